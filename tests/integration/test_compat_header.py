"""The shipped dlfcn compat header compiles and works; guarded instantiations still compile.

Real tools: g++ (Linux dlopen through the header), x86_64-w64-mingw32-g++ (the Windows branch
under -Wall -Wextra -Werror; skipped when absent), wine (runs the mingw-built probe for real;
skipped when absent), nvcc (a guarded kernel file; skipped when absent).

One probe program runs on both sides, so the Windows branch is held to what glibc's dlopen
does: paths relative to the current directory, absolute and long paths, RTLD_NOLOAD adding a
reference only to a module already loaded, dlopen(NULL) + dlclose, RTLD_GLOBAL joining the
search of RTLD_DEFAULT / RTLD_NEXT / the program's handle while RTLD_LOCAL does not, and
dlerror() being per thread, cleared once read."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from flashbuild.patching.transforms import registry
from flashbuild.patching.transforms.base import TransformContext
from flashbuild.patching.transforms.dynload import HEADER_NAME, compat_header_text
from flashbuild.proc import ProcessRunner
from flashbuild.recipes.transforms import ExplicitInstantiationsParams
from tests.unit.transform_tree import DictTree

pytestmark = pytest.mark.integration
RUN = ProcessRunner()
MINGW = "x86_64-w64-mingw32-g++"
WARNINGS = ("-Wall", "-Wextra", "-Werror")

PLUGIN = r"""
#if defined(_WIN32)
#define FB_EXPORT __declspec(dllexport)
#else
#define FB_EXPORT __attribute__((visibility("default")))
#endif
extern "C" FB_EXPORT int fb_plugin_add(int a, int b) { return a + b + 1000; }
"""
# Opened with RTLD_LOCAL next to a global one: its symbol must stay out of RTLD_DEFAULT.
LOCAL_PLUGIN = PLUGIN.replace("fb_plugin_add(int a, int b) { return a + b + 1000; }",
                              "fb_local_only(int a, int b) { return a * b; }")

# Reads UTF-8 paths from paths.txt (argv is in the ANSI code page on Windows): every line but
# the last must load; the last names a plugin not loaded yet, for the RTLD_NOLOAD checks.
PROBE = r"""
#include "fb_dlfcn_compat.h"
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>
#if defined(_WIN32)
#define FB_MISSING "./fb_missing_plugin.dll"
#define FB_LOCAL "./local.dll"
#else
#include <pthread.h>
#define FB_MISSING "./fb_missing_plugin.so"
#define FB_LOCAL "./local.so"
#endif
typedef int (*add_fn)(int, int);

static int call(void* h) {
  add_fn add = reinterpret_cast<add_fn>(dlsym(h, "fb_plugin_add"));
  return add ? add(2, 3) : -1;
}

static const char* thread_saw = "unset";
#if defined(_WIN32)
static DWORD WINAPI other(LPVOID) { thread_saw = dlerror() ? "error" : "none"; return 0; }
static void in_other_thread() {
  HANDLE t = CreateThread(nullptr, 0, other, nullptr, 0, nullptr);
  WaitForSingleObject(t, INFINITE);
  CloseHandle(t);
}
static void show_path(const std::wstring& name) {
  std::wstring full;
  if (!fb_dlfcn_detail::full_path(name, full)) { std::printf("path failed\n"); return; }
  const char* kind = full.compare(0, 8, L"\\\\?\\UNC\\") == 0 ? "unc-prefixed"
                   : full.compare(0, 4, L"\\\\?\\") == 0 ? "prefixed"
                   : full.size() > 2 && full[1] == L':' && full[2] == L'\\' ? "drive"
                   : "other";
  std::printf("path %s %s\n", kind,
              full.find(L'/') == std::wstring::npos && full.find(L"..") == std::wstring::npos
                  ? "clean" : "unclean");
}
#else
static void* other(void*) { thread_saw = dlerror() ? "error" : "none"; return nullptr; }
static void in_other_thread() {
  pthread_t t;
  pthread_create(&t, nullptr, other, nullptr);
  pthread_join(t, nullptr);
}
#endif

int main() {
  std::vector<std::string> paths;
  std::ifstream list("paths.txt");
  for (std::string line; std::getline(list, line);) paths.push_back(line);
  if (paths.size() < 2) return 9;
  for (size_t i = 0; i + 1 < paths.size(); ++i) {
    void* h = dlopen(paths[i].c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) { std::printf("load %zu failed: %s\n", i, dlerror()); continue; }
    std::printf("load %zu %d\n", i, call(h));
    std::printf("close %zu %d\n", i, dlclose(h));
  }

  const char* late = paths.back().c_str();
  void* before = dlopen(late, RTLD_NOW | RTLD_NOLOAD);
  dlerror();
  void* h = dlopen(late, RTLD_NOW);
  void* again = dlopen(late, RTLD_NOW | RTLD_NOLOAD);
  std::printf("noload before=%s after=%s\n", before ? "handle" : "null",
              again == nullptr ? "null" : again == h ? "same" : "other");
  void* gone_sym = dlsym(h, "fb_not_there");
  const char* sym_error = dlerror();
  std::printf("symbol %s %s %s\n", gone_sym ? "found" : "missing", sym_error ? "error" : "none",
              dlerror() ? "again" : "cleared");
  if (again) dlclose(again);
  // RTLD_NOLOAD took its own reference: after releasing it the plugin is still there...
  void* still = dlopen(late, RTLD_NOW | RTLD_NOLOAD);
  std::printf("one close: %s %d\n", still ? "loaded" : "unloaded", still ? call(still) : -1);
  if (still) dlclose(still);
  // ...and the last dlclose unloads it.
  dlclose(h);
  void* gone = dlopen(late, RTLD_NOW | RTLD_NOLOAD);
  dlerror();
  std::printf("last close: %s\n", gone ? "loaded" : "unloaded");

  void* self = dlopen(nullptr, RTLD_NOW);
  const int closed = dlclose(self);
  std::printf("self %s %d %d\n", self ? "handle" : "null", closed,
              dlclose(dlopen(nullptr, RTLD_NOW)));

  // RTLD_GLOBAL / RTLD_DEFAULT / RTLD_NEXT as glibc defines them: a global library joins the
  // search of RTLD_DEFAULT, RTLD_NEXT (after the program) and the program's own handle; a
  // local one does not; dlclose takes it out again. strlen comes from the C runtime the
  // program links (libc / msvcrt.dll): there from the start.
  const char* global_path = paths[0].c_str();
  std::printf("default before %s\n", dlsym(RTLD_DEFAULT, "fb_plugin_add") ? "found" : "null");
  dlerror();
  void* global_lib = dlopen(global_path, RTLD_NOW | RTLD_GLOBAL);
  void* local_lib = dlopen(FB_LOCAL, RTLD_NOW | RTLD_LOCAL);
  void* me = dlopen(nullptr, RTLD_NOW);
  add_fn by_default = reinterpret_cast<add_fn>(dlsym(RTLD_DEFAULT, "fb_plugin_add"));
  add_fn by_next = reinterpret_cast<add_fn>(dlsym(RTLD_NEXT, "fb_plugin_add"));
  add_fn by_self = reinterpret_cast<add_fn>(dlsym(me, "fb_plugin_add"));
  std::printf("global default=%d next=%d self=%d\n", by_default ? by_default(2, 3) : -1,
              by_next ? by_next(2, 3) : -1, by_self ? by_self(2, 3) : -1);
  void* hidden = dlsym(RTLD_DEFAULT, "fb_local_only");
  const char* hidden_error = dlerror();
  add_fn direct = reinterpret_cast<add_fn>(dlsym(local_lib, "fb_local_only"));
  std::printf("local default=%s error=%s direct=%d\n", hidden ? "found" : "null",
              hidden_error ? "yes" : "no", direct ? direct(6, 7) : -1);
  std::printf("runtime default=%s next=%s\n", dlsym(RTLD_DEFAULT, "strlen") ? "found" : "null",
              dlsym(RTLD_NEXT, "strlen") ? "found" : "null");
  // (Not checked after dlclose: glibc keeps a library that an RTLD_DEFAULT lookup bound
  // loaded, so "gone from the search" is not what Linux does either.)
  dlclose(local_lib);
  dlclose(global_lib);
  dlclose(me);

  void* missing = dlopen(FB_MISSING, RTLD_NOW);
  in_other_thread();
  const char* first_raw = dlerror();  // valid only until the next dlerror() call
  const std::string first = first_raw ? first_raw : "(null)";
  std::printf("missing %s thread=%s second=%s\n", missing ? "handle" : "null", thread_saw,
              dlerror() ? "error" : "null");
  std::printf("error [%s]\n", first.c_str());
#if defined(_WIN32)
  show_path(L"sub/../x.dll");
  show_path(std::wstring(300, L'd') + L"/x.dll");
  show_path(L"\\\\server\\share\\" + std::wstring(300, L'd') + L"\\x.dll");
  show_path(L"\\\\?\\C:\\x.dll");
#endif
  return 0;
}
"""


def _sources(tmp: Path) -> None:
    (tmp / HEADER_NAME).write_text(compat_header_text(), encoding="utf-8")
    (tmp / "plugin.cpp").write_text(PLUGIN)
    (tmp / "local.cpp").write_text(LOCAL_PLUGIN)
    (tmp / "probe.cpp").write_text(PROBE)


def _plugins(tmp: Path, built: Path, suffix: str) -> dict[str, Path]:
    """A copy of the plugin per case, so each case loads its own module."""
    long_dir = tmp.joinpath(*["d" * 90] * 3)  # > 260 characters once absolute
    places = {"relative": tmp / "sub" / f"rel{suffix}", "absolute": tmp / f"abs{suffix}",
              "long": long_dir / f"long{suffix}", "utf8": tmp / "plügin" / f"u{suffix}",
              "backslash": tmp / f"bs{suffix}", "rooted": tmp / f"root{suffix}",
              "late": tmp / f"late{suffix}"}
    for place in places.values():
        place.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, place)
    return places


def _check_probe(stdout: str, loads: int) -> str:
    """Assert the probe's report; returns the dlerror() text of the missing plugin."""
    lines = [line.rstrip("\r") for line in stdout.split("\n") if line]
    expected = [f"{kind} {i} {value}" for i in range(loads)
                for kind, value in (("load", 1005), ("close", 0))]
    expected += ["noload before=null after=same", "symbol missing error cleared",
                 "one close: loaded 1005", "last close: unloaded", "self handle 0 0",
                 "default before null", "global default=1005 next=1005 self=1005",
                 "local default=null error=yes direct=42", "runtime default=found next=found",
                 "missing null thread=none second=null"]
    assert lines[:len(expected)] == expected
    error = lines[len(expected)]
    assert error.startswith("error [./fb_missing_plugin.") and error.endswith("]")
    text = error[len("error ["):-1]
    assert text.split(": ", 1)[1].strip() != ""  # a system message after the name
    assert text == text.rstrip()  # no trailing CR/LF or blanks
    return text


def test_dlopen_through_the_header_on_linux(tmp_path: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    _sources(tmp_path)
    for name, source in (("plug.so", "plugin.cpp"), ("local.so", "local.cpp")):
        RUN.run(["g++", "-shared", "-fPIC", "-fvisibility=hidden", "-o", tmp_path / name,
                 tmp_path / source], timeout=120)
    RUN.run(["g++", *WARNINGS, "-o", tmp_path / "probe", tmp_path / "probe.cpp", "-ldl",
             "-lpthread"], timeout=120)
    places = _plugins(tmp_path, tmp_path / "plug.so", ".so")
    paths = ["./" + places["relative"].relative_to(tmp_path).as_posix(),
             str(places["absolute"]), places["long"].relative_to(tmp_path).as_posix(),
             str(places["long"]), "./plügin/u.so", "./late.so"]
    assert len(str(places["long"])) > 260
    (tmp_path / "paths.txt").write_text("\n".join(paths) + "\n", encoding="utf-8")
    done = RUN.run([tmp_path / "probe"], cwd=tmp_path)
    assert "No such file" in _check_probe(done.stdout, loads=len(paths) - 1)


def _mingw_probe(tmp: Path) -> None:
    _sources(tmp)
    # A variable named `small` must survive windows.h (rpcndr.h defines it as a macro).
    (tmp / "small.cpp").write_text('#include "fb_dlfcn_compat.h"\n#include <algorithm>\n'
                                   "int f(int small) { return std::max(small, 1); }\n")
    RUN.run([MINGW, "-std=c++17", *WARNINGS, "-c", "-o", tmp / "small.o", tmp / "small.cpp"],
            timeout=120)
    # -static: the probe and plugin need no MinGW runtime DLLs next to them.
    RUN.run([MINGW, "-std=c++17", *WARNINGS, "-static", "-o", tmp / "probe.exe",
             tmp / "probe.cpp"], timeout=120)
    for name, source in (("plug.dll", "plugin.cpp"), ("local.dll", "local.cpp")):
        RUN.run([MINGW, *WARNINGS, "-shared", "-static", "-o", tmp / name, tmp / source],
                timeout=120)


def test_windows_branch_compiles_with_mingw(tmp_path: Path) -> None:
    if shutil.which(MINGW) is None:
        pytest.skip(f"{MINGW} not installed (apt-get install g++-mingw-w64-x86-64)")
    _mingw_probe(tmp_path)
    for name in ("probe.exe", "plug.dll"):
        assert (tmp_path / name).read_bytes()[:2] == b"MZ"


@pytest.mark.slow
def test_windows_branch_runs_under_wine(tmp_path: Path) -> None:
    if shutil.which(MINGW) is None or shutil.which("wine") is None:
        pytest.skip(f"{MINGW} or wine not installed (apt-get install g++-mingw-w64-x86-64 wine)")
    _mingw_probe(tmp_path)
    places = _plugins(tmp_path, tmp_path / "plug.dll", ".dll")

    def windows(path: Path) -> str:
        # wine maps the Linux root to drive Z: (its default prefix layout).
        return "Z:" + str(path).replace("/", "\\")

    paths = [
        "./" + places["relative"].relative_to(tmp_path).as_posix(),  # relative, `/`
        "sub\\..\\" + places["backslash"].name,  # relative, `\` and `..`
        windows(places["absolute"]),  # absolute, with a drive
        str(places["rooted"]),  # `\tmp\...`: rooted on the current drive
        places["long"].relative_to(tmp_path).as_posix(),  # relative, > MAX_PATH once resolved
        windows(places["long"]),  # absolute, > MAX_PATH
        "./plügin/u.dll",  # UTF-8
        "./late.dll",
    ]
    (tmp_path / "paths.txt").write_text("\n".join(paths) + "\n", encoding="utf-8")
    env = {**os.environ, "WINEPREFIX": str(tmp_path / "wineprefix"), "WINEDEBUG": "-all",
           # No Mono/Gecko install prompts; UTF-8 so wine maps `plügin` to the same file.
           "WINEDLLOVERRIDES": "mscoree=;mshtml=", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env.pop("DISPLAY", None)
    try:
        done = RUN.run(["wine", tmp_path / "probe.exe"], cwd=tmp_path, env=env, timeout=300)
    finally:
        # Stop this prefix's wineserver (and only it) before tmp_path is cleaned up.
        RUN.run(["wineserver", "-k"], env=env, check=False, timeout=60)
    _check_probe(done.stdout, loads=len(paths) - 1)
    tail = [line.rstrip("\r") for line in done.stdout.split("\n") if line.startswith("path ")]
    assert tail == ["path drive clean", "path prefixed clean", "path unc-prefixed clean",
                    "path prefixed clean"]


KERNELS = """\
template <typename T>
__global__ void scale(T* __restrict__ x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * a;
}
template __global__ void scale<float>(float*, float, int);
#define FB_INST(T) template __global__ void scale<T>(T*, T, int);
FB_INST(double)

template <typename T>
void launch_scale(T* x, T a, int n) { scale<T><<<(n + 255) / 256, 256>>>(x, a, n); }
template void launch_scale<float>(float*, float, int);
template void launch_scale<int>(int*, int, int);
"""
USER = "template <typename T> void launch_scale(T*, T, int);\n" \
       "void go(float* x) { launch_scale<float>(x, 2.f, 4); }\n"


@pytest.mark.slow
def test_guarded_instantiations_still_instantiate_under_gcc(tmp_path: Path,
                                                           cuda_toolkit_root: Path) -> None:
    nvcc = str(cuda_toolkit_root / "bin" / "nvcc")
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) not installed")
    tree = DictTree({"k.cu": KERNELS, "user.cpp": USER})
    ctx = TransformContext(platform="windows", archs=("sm_90a",),
                           sources=("k.cu", "user.cpp"))
    result = registry()["explicit-instantiations"].apply(
        tree, ExplicitInstantiationsParams(files=("k.cu",), expect=4), ctx)
    guarded = result.changes["k.cu"]
    # Both kernel sites are guarded; both host sites are kept, because references are matched
    # by function name (user.cpp calls launch_scale), not per specialisation.
    assert guarded.count("#if !defined(_MSC_VER)") == 2
    assert [s.action for s in result.sites] == ["edit", "edit", "keep", "keep"]
    (tmp_path / "k.cu").write_text(guarded)
    RUN.run([nvcc, "-c", "-arch=sm_90a", "-o", tmp_path / "k.o", tmp_path / "k.cu"],
            timeout=300)
    symbols = RUN.run(["nm", "-C", tmp_path / "k.o"]).stdout
    # The kept host instantiation and the guarded ones are all still emitted under gcc.
    assert "launch_scale<float>(float*, float, int)" in symbols
    assert "launch_scale<int>(int*, int, int)" in symbols
    assert "scale<float>(float*, float, int)" in symbols
    assert "scale<double>(double*, double, int)" in symbols
