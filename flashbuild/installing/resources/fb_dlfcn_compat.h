// fb_dlfcn_compat.h — dlopen/dlsym/dlerror/dlclose everywhere (shipped by flashbuild).
//
// On POSIX this is exactly <dlfcn.h>. On Windows (_WIN32) there is no dlfcn.h, so the four
// calls are mapped to the Win32 loader:
//   dlopen  -> LoadLibraryExW, the UTF-8 path converted to UTF-16 (MultiByteToWideChar).
//              A name with a directory part (`/`, `\` or a drive) is a path, as for POSIX
//              dlopen: GetFullPathNameW resolves it against the current directory, a result
//              of MAX_PATH or more gets the `\\?\` prefix, and it is loaded with
//              LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR | LOAD_LIBRARY_SEARCH_DEFAULT_DIRS so the
//              plugin's own dependencies next to it resolve (that flag fails with
//              ERROR_INVALID_PARAMETER unless the path is absolute). A bare name is searched
//              with LOAD_LIBRARY_SEARCH_DEFAULT_DIRS alone: PATH and the current directory are
//              not searched, as for Python >= 3.8 extension modules.
//              RTLD_NOLOAD only looks the module up (GetModuleHandleExW, which adds a reference
//              as dlopen does); dlopen(NULL) is the program's own handle.
//   dlsym   -> GetProcAddress, cast through FARPROC. The pseudo-handles RTLD_DEFAULT and
//              RTLD_NEXT, and the program's own handle from dlopen(NULL), search in glibc's
//              order: the program, the DLLs it imports (what glibc loads at startup), then the
//              libraries opened with RTLD_GLOBAL, in the order they were opened. RTLD_NEXT
//              starts after the module that calls dlsym (the one that includes this header).
//              A library opened with RTLD_LOCAL (the default) stays out of that search, as
//              on Linux; dlclose takes a global library out of it again. The RTLD_GLOBAL list
//              belongs to the module (exe or DLL) that compiled this header: Windows has no
//              process-wide symbol namespace to put it in, and binds a DLL's imports to named
//              DLLs at load time, so RTLD_GLOBAL cannot change how other DLLs link.
//   dlerror -> FormatMessageW(GetLastError()) converted to UTF-8 in a thread-local buffer,
//              trailing CR/LF trimmed, returned once and then cleared, as POSIX specifies;
//   dlclose -> FreeLibrary (0 on success, like dlclose); the program's own handle from
//              dlopen(NULL) holds no reference and is never freed.
// The other RTLD_* flags are accepted and ignored on Windows (the Win32 loader has no lazy
// binding). A plugin DLL must export its symbols
// (__declspec(dllexport)); `extern "C"` alone exports nothing from a DLL.
#ifndef FB_DLFCN_COMPAT_H_
#define FB_DLFCN_COMPAT_H_

#if defined(_WIN32)

#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX  // windows.h's min/max macros break std::min/std::max
#endif
#include <windows.h>
// rpcndr.h (pulled in by windows.h) defines `small` as `char`, which breaks any variable
// named `small`.
#ifdef small
#undef small
#endif

#include <stdio.h>
#include <string.h>

#include <stdint.h>

#include <string>
#include <vector>

#ifndef RTLD_LAZY
#define RTLD_LAZY 0x00001
#endif
#ifndef RTLD_NOW
#define RTLD_NOW 0x00002
#endif
#ifndef RTLD_GLOBAL
#define RTLD_GLOBAL 0x00100
#endif
#ifndef RTLD_LOCAL
#define RTLD_LOCAL 0x00000
#endif
#ifndef RTLD_NODELETE
#define RTLD_NODELETE 0x01000
#endif
#ifndef RTLD_NOLOAD
#define RTLD_NOLOAD 0x00004
#endif
// glibc's values: the null handle and -1.
#ifndef RTLD_DEFAULT
#define RTLD_DEFAULT (static_cast<void*>(nullptr))
#endif
#ifndef RTLD_NEXT
#define RTLD_NEXT (reinterpret_cast<void*>(static_cast<intptr_t>(-1)))
#endif

namespace fb_dlfcn_detail {

const size_t kErrorSize = 1024;

// The pending error message, per thread, as POSIX dlerror() keeps it.
inline char* error_buffer() {
  static thread_local char buffer[kErrorSize];
  return buffer;
}

inline bool& error_pending() {
  static thread_local bool pending = false;
  return pending;
}

// "<what>: <system message for code>" in UTF-8, kept until the next dlerror() of this thread.
inline void set_error(const char* what, DWORD code) {
  char* out = error_buffer();
  size_t used = 0;
  if (what != nullptr) {
    used = strlen(what);
    if (used > kErrorSize / 2) {
      used = kErrorSize / 2;
      // Never cut a UTF-8 sequence in half: back up to the start of a character.
      while (used > 0 && (static_cast<unsigned char>(what[used]) & 0xC0) == 0x80) --used;
    }
    memcpy(out, what, used);
    out[used++] = ':';
    out[used++] = ' ';
  }
  wchar_t wide[512];
  DWORD n = FormatMessageW(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, nullptr,
                           code, MAKELANGID(LANG_NEUTRAL, SUBLANG_DEFAULT), wide,
                           static_cast<DWORD>(sizeof(wide) / sizeof(wide[0])), nullptr);
  // System messages end with "\r\n"; dlerror() text is one line.
  while (n > 0 && (wide[n - 1] == L'\r' || wide[n - 1] == L'\n' || wide[n - 1] == L' ')) --n;
  int written = 0;
  if (n > 0) {
    written = WideCharToMultiByte(CP_UTF8, 0, wide, static_cast<int>(n), out + used,
                                  static_cast<int>(kErrorSize - used - 1), nullptr, nullptr);
  }
  if (written <= 0) {
    written = snprintf(out + used, kErrorSize - used, "Windows error %lu",
                       static_cast<unsigned long>(code));
    if (written < 0) written = 0;
    if (static_cast<size_t>(written) >= kErrorSize - used) {
      written = static_cast<int>(kErrorSize - used - 1);
    }
  }
  out[used + static_cast<size_t>(written)] = '\0';
  error_pending() = true;
}

// UTF-8 -> UTF-16; false (GetLastError() set) for text that is not valid UTF-8.
inline bool widen(const char* text, std::wstring& out) {
  const int chars = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, text, -1, nullptr, 0);
  if (chars <= 0) return false;
  out.assign(static_cast<size_t>(chars), L'\0');
  if (MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, text, -1, &out[0], chars) != chars) {
    return false;
  }
  out.resize(static_cast<size_t>(chars - 1));  // drop the terminating NUL
  return true;
}

// POSIX dlopen treats a name containing a slash as a path (relative to the current
// directory); on Windows `\` and a drive prefix (`C:x`) make a path too.
inline bool is_path(const std::wstring& name) {
  return name.find_first_of(L"\\/") != std::wstring::npos ||
         (name.size() >= 2 && name[1] == L':');
}

// The absolute path LoadLibraryExW needs for LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR, with the
// `\\?\` prefix when it reaches MAX_PATH (the loader rejects longer plain paths); false
// (GetLastError() set) when it cannot be resolved.
inline bool full_path(const std::wstring& name, std::wstring& out) {
  // `\\?\` and `\\.\` paths are already absolute and must not be normalised.
  if (name.compare(0, 4, L"\\\\?\\") == 0 || name.compare(0, 4, L"\\\\.\\") == 0) {
    out = name;
    return true;
  }
  const DWORD need = GetFullPathNameW(name.c_str(), 0, nullptr, nullptr);
  if (need == 0) return false;
  std::wstring full(static_cast<size_t>(need), L'\0');
  const DWORD got = GetFullPathNameW(name.c_str(), need, &full[0], nullptr);
  if (got == 0) return false;
  if (got >= need) {  // the current directory changed between the two calls
    SetLastError(ERROR_INSUFFICIENT_BUFFER);
    return false;
  }
  full.resize(static_cast<size_t>(got));
  if (full.size() >= MAX_PATH) {
    // `\\?\` turns off normalisation, so it goes on only after GetFullPathNameW (which also
    // turned every `/` into `\`); a UNC path `\\server\share` becomes `\\?\UNC\server\share`.
    if (full.compare(0, 2, L"\\\\") == 0) {
      full = L"\\\\?\\UNC\\" + full.substr(2);
    } else {
      full = L"\\\\?\\" + full;
    }
  }
  out.swap(full);
  return true;
}

// The libraries dlopen'ed with RTLD_GLOBAL by this module, in the order they were opened (one
// entry per such dlopen, so dlclose removes one), guarded by `global_lock`.
inline std::vector<HMODULE>& global_libraries() {
  static std::vector<HMODULE> libraries;
  return libraries;
}

inline SRWLOCK& global_lock() {
  static SRWLOCK lock = SRWLOCK_INIT;
  return lock;
}

inline void add_global(HMODULE module) {
  AcquireSRWLockExclusive(&global_lock());
  global_libraries().push_back(module);
  ReleaseSRWLockExclusive(&global_lock());
}

inline void remove_global(HMODULE module) {
  AcquireSRWLockExclusive(&global_lock());
  std::vector<HMODULE>& libraries = global_libraries();
  for (size_t i = libraries.size(); i > 0; --i) {
    if (libraries[i - 1] == module) {
      libraries.erase(libraries.begin() + static_cast<std::ptrdiff_t>(i - 1));
      break;
    }
  }
  ReleaseSRWLockExclusive(&global_lock());
}

// glibc's global scope in Windows terms: the program, the DLLs named in its import table
// (loaded before it ran, as DT_NEEDED libraries are), then the RTLD_GLOBAL libraries.
inline std::vector<HMODULE> global_scope() {
  std::vector<HMODULE> scope;
  HMODULE program = GetModuleHandleW(nullptr);
  scope.push_back(program);
  const unsigned char* base = reinterpret_cast<const unsigned char*>(program);
  const IMAGE_DOS_HEADER* dos = reinterpret_cast<const IMAGE_DOS_HEADER*>(base);
  if (dos->e_magic == IMAGE_DOS_SIGNATURE) {
    const IMAGE_NT_HEADERS* nt = reinterpret_cast<const IMAGE_NT_HEADERS*>(base + dos->e_lfanew);
    const IMAGE_DATA_DIRECTORY& imports =
        nt->OptionalHeader.DataDirectory[IMAGE_DIRECTORY_ENTRY_IMPORT];
    if (nt->Signature == IMAGE_NT_SIGNATURE && imports.VirtualAddress != 0) {
      for (const IMAGE_IMPORT_DESCRIPTOR* entry =
               reinterpret_cast<const IMAGE_IMPORT_DESCRIPTOR*>(base + imports.VirtualAddress);
           entry->Name != 0; ++entry) {
        HMODULE module = GetModuleHandleA(reinterpret_cast<const char*>(base + entry->Name));
        if (module != nullptr) scope.push_back(module);
      }
    }
  }
  AcquireSRWLockShared(&global_lock());
  scope.insert(scope.end(), global_libraries().begin(), global_libraries().end());
  ReleaseSRWLockShared(&global_lock());
  return scope;
}

// The module this header was compiled into: the caller of dlsym, for RTLD_NEXT.
inline HMODULE this_module() {
  HMODULE module = nullptr;
  GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS |
                         GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                     reinterpret_cast<LPCWSTR>(&global_libraries), &module);
  return module;
}

// The first definition of `symbol` in the global scope; with `after_caller`, only in the
// modules after this one (all of them when this module is not in the scope).
inline FARPROC search_scope(const char* symbol, bool after_caller) {
  const std::vector<HMODULE> scope = global_scope();
  size_t start = 0;
  if (after_caller) {
    const HMODULE self = this_module();
    for (size_t i = 0; i < scope.size(); ++i) {
      if (scope[i] == self) start = i + 1;
    }
  }
  for (size_t i = start; i < scope.size(); ++i) {
    if (FARPROC proc = GetProcAddress(scope[i], symbol)) return proc;
  }
  SetLastError(ERROR_PROC_NOT_FOUND);
  return nullptr;
}

}  // namespace fb_dlfcn_detail

inline void* dlopen(const char* path, int flags) {
  if (path == nullptr) {
    // dlopen(NULL) is the main program; GetModuleHandleW adds no reference, and dlclose
    // knows not to release this handle.
    return static_cast<void*>(GetModuleHandleW(nullptr));
  }
  std::wstring name;
  if (!fb_dlfcn_detail::widen(path, name)) {
    fb_dlfcn_detail::set_error(path, GetLastError());
    return nullptr;
  }
  DWORD search = LOAD_LIBRARY_SEARCH_DEFAULT_DIRS;
  if (fb_dlfcn_detail::is_path(name)) {
    std::wstring full;
    if (!fb_dlfcn_detail::full_path(name, full)) {
      fb_dlfcn_detail::set_error(path, GetLastError());
      return nullptr;
    }
    name.swap(full);
    search |= LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR;
  }
  HMODULE module = nullptr;
  if ((flags & RTLD_NOLOAD) != 0) {
    // Only a module that is already loaded; flags 0 adds a reference (as dlopen does), so
    // the handle is released with dlclose like any other.
    if (!GetModuleHandleExW(0, name.c_str(), &module)) module = nullptr;
  } else {
    module = LoadLibraryExW(name.c_str(), nullptr, search);
  }
  if (module == nullptr) {
    fb_dlfcn_detail::set_error(path, GetLastError());
    return nullptr;
  }
  // RTLD_NOLOAD | RTLD_GLOBAL promotes a loaded library to the global scope, as in glibc.
  if ((flags & RTLD_GLOBAL) != 0) fb_dlfcn_detail::add_global(module);
  return static_cast<void*>(module);
}

inline void* dlsym(void* handle, const char* symbol) {
  FARPROC proc = nullptr;
  if (handle == RTLD_DEFAULT || handle == static_cast<void*>(GetModuleHandleW(nullptr))) {
    proc = fb_dlfcn_detail::search_scope(symbol, false);
  } else if (handle == RTLD_NEXT) {
    proc = fb_dlfcn_detail::search_scope(symbol, true);
  } else {
    proc = GetProcAddress(static_cast<HMODULE>(handle), symbol);
  }
  if (proc == nullptr) {
    fb_dlfcn_detail::set_error(symbol, GetLastError());
    return nullptr;
  }
  // GetProcAddress returns a function pointer; POSIX dlsym returns void*. The round trip
  // through FARPROC is what MinGW and MSVC both accept.
  return reinterpret_cast<void*>(proc);
}

inline char* dlerror() {
  if (!fb_dlfcn_detail::error_pending()) return nullptr;
  fb_dlfcn_detail::error_pending() = false;
  return fb_dlfcn_detail::error_buffer();
}

inline int dlclose(void* handle) {
  // The program's own handle (dlopen(NULL)) was handed out without a reference.
  if (handle != nullptr && handle == static_cast<void*>(GetModuleHandleW(nullptr))) return 0;
  if (FreeLibrary(static_cast<HMODULE>(handle))) {
    fb_dlfcn_detail::remove_global(static_cast<HMODULE>(handle));
    return 0;
  }
  fb_dlfcn_detail::set_error("dlclose", GetLastError());
  return -1;
}

#else  // POSIX

#include <dlfcn.h>

#endif  // _WIN32

#endif  // FB_DLFCN_COMPAT_H_
