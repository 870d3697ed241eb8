// fb_dlfcn_compat.h — dlopen/dlsym/dlerror/dlclose everywhere (shipped by flashbuild).
//
// On POSIX this is exactly <dlfcn.h>. On Windows (_WIN32) there is no dlfcn.h, so the four
// calls are mapped to the Win32 loader:
//   dlopen  -> LoadLibraryExW, the UTF-8 path converted to UTF-16 (MultiByteToWideChar), with
//              LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR | LOAD_LIBRARY_SEARCH_DEFAULT_DIRS so the
//              plugin's own dependencies next to it resolve (PATH and the current directory
//              are not searched, as for Python >= 3.8 extension modules);
//   dlsym   -> GetProcAddress, cast through FARPROC;
//   dlerror -> FormatMessageW(GetLastError()) converted to UTF-8 in a thread-local buffer,
//              returned once and then cleared, as POSIX specifies;
//   dlclose -> FreeLibrary (0 on success, like dlclose).
// RTLD_* flags are accepted and ignored on Windows (the Win32 loader has no lazy binding or
// global symbol namespace). A plugin DLL must export its symbols (__declspec(dllexport));
// `extern "C"` alone exports nothing from a DLL.
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

namespace fb_dlfcn_detail {

// The pending error message, per thread, as POSIX dlerror() keeps it.
inline char* error_buffer() {
  static thread_local char buffer[1024];
  return buffer;
}

inline bool& error_pending() {
  static thread_local bool pending = false;
  return pending;
}

inline void set_error(const char* what, DWORD code) {
  char* out = error_buffer();
  const size_t size = 1024;
  size_t used = 0;
  if (what != nullptr) {
    used = strlen(what);
    if (used > size / 2) used = size / 2;
    memcpy(out, what, used);
    out[used++] = ':';
    out[used++] = ' ';
  }
  wchar_t wide[512];
  DWORD n = FormatMessageW(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, nullptr,
                           code, MAKELANGID(LANG_NEUTRAL, SUBLANG_DEFAULT), wide,
                           static_cast<DWORD>(sizeof(wide) / sizeof(wide[0])), nullptr);
  while (n > 0 && (wide[n - 1] == L'\r' || wide[n - 1] == L'\n' || wide[n - 1] == L' ')) --n;
  int written = 0;
  if (n > 0) {
    written = WideCharToMultiByte(CP_UTF8, 0, wide, static_cast<int>(n), out + used,
                                  static_cast<int>(size - used - 1), nullptr, nullptr);
  }
  if (written <= 0) {
    written = snprintf(out + used, size - used, "Windows error %lu",
                          static_cast<unsigned long>(code));
    if (written < 0) written = 0;
  }
  out[used + static_cast<size_t>(written)] = '\0';
  error_pending() = true;
}

}  // namespace fb_dlfcn_detail

inline void* dlopen(const char* path, int flags) {
  (void)flags;
  if (path == nullptr) {
    // dlopen(NULL) is the main program.
    return static_cast<void*>(GetModuleHandleW(nullptr));
  }
  int chars = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, nullptr, 0);
  if (chars <= 0) {
    fb_dlfcn_detail::set_error(path, GetLastError());
    return nullptr;
  }
  wchar_t stack_buffer[MAX_PATH];
  wchar_t* wide = stack_buffer;
  if (chars > MAX_PATH) {
    wide = static_cast<wchar_t*>(HeapAlloc(GetProcessHeap(), 0, sizeof(wchar_t) * chars));
    if (wide == nullptr) {
      fb_dlfcn_detail::set_error(path, ERROR_NOT_ENOUGH_MEMORY);
      return nullptr;
    }
  }
  MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, wide, chars);
  // LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR needs a fully qualified path; fall back to the default
  // directories alone for a bare name (which then resolves like Python's own imports).
  const bool qualified = (chars > 2 && wide[1] == L':') || wide[0] == L'\\' || wide[0] == L'/';
  const DWORD search = qualified
      ? (LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR | LOAD_LIBRARY_SEARCH_DEFAULT_DIRS)
      : LOAD_LIBRARY_SEARCH_DEFAULT_DIRS;
  HMODULE module = LoadLibraryExW(wide, nullptr, search);
  const DWORD code = module == nullptr ? GetLastError() : 0;
  if (wide != stack_buffer) HeapFree(GetProcessHeap(), 0, wide);
  if (module == nullptr) {
    fb_dlfcn_detail::set_error(path, code);
    return nullptr;
  }
  return static_cast<void*>(module);
}

inline void* dlsym(void* handle, const char* symbol) {
  FARPROC proc = GetProcAddress(static_cast<HMODULE>(handle), symbol);
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
  if (FreeLibrary(static_cast<HMODULE>(handle))) return 0;
  fb_dlfcn_detail::set_error("dlclose", GetLastError());
  return -1;
}

#else  // POSIX

#include <dlfcn.h>

#endif  // _WIN32

#endif  // FB_DLFCN_COMPAT_H_
