"""The shipped dlfcn compat header compiles and works; guarded instantiations still compile.

Real tools: g++ (Linux dlopen through the header), x86_64-w64-mingw32-g++ (the Windows branch,
compile only; skipped when absent), nvcc (a guarded kernel file; skipped when absent)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flashbuild.patching.transforms import registry
from flashbuild.patching.transforms.base import TransformContext
from flashbuild.patching.transforms.dynload import HEADER_NAME, compat_header_text
from flashbuild.patching.transforms.instantiations import ExplicitInstantiationsParams
from flashbuild.proc import ProcessRunner
from tests.unit.transform_tree import DictTree

pytestmark = pytest.mark.integration
RUN = ProcessRunner()

PLUGIN = r"""
#if defined(_WIN32)
#define FB_EXPORT __declspec(dllexport)
#else
#define FB_EXPORT __attribute__((visibility("default")))
#endif
extern "C" FB_EXPORT int fb_plugin_add(int a, int b) { return a + b + 1000; }
"""

MAIN = r"""
#include "fb_dlfcn_compat.h"
#include <cstdio>
typedef int (*add_fn)(int, int);
int main(int argc, char** argv) {
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { std::printf("open failed: %s\n", dlerror()); return 2; }
  add_fn add = reinterpret_cast<add_fn>(dlsym(h, "fb_plugin_add"));
  if (!add) { std::printf("sym failed: %s\n", dlerror()); return 3; }
  void* missing = dlsym(h, "fb_not_there");
  const char* err = dlerror();
  std::printf("%d %s %s\n", add(2, 3), missing ? "found" : "missing", err ? "error" : "none");
  std::printf("%s\n", dlerror() ? "again" : "cleared");
  if (argc > 2) { void* bad = dlopen(argv[2], RTLD_NOW); std::printf("%s\n", bad ? "?" : "bad"); }
  return dlclose(h);
}
"""


def _write(tmp: Path) -> None:
    (tmp / HEADER_NAME).write_text(compat_header_text())
    (tmp / "plugin.cpp").write_text(PLUGIN)
    (tmp / "main.cpp").write_text(MAIN)


def test_dlopen_through_the_header_on_linux(tmp_path: Path) -> None:
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    _write(tmp_path)
    RUN.run(["g++", "-shared", "-fPIC", "-fvisibility=hidden", "-o", tmp_path / "libplug.so",
             tmp_path / "plugin.cpp"], timeout=120)
    RUN.run(["g++", "-Wall", "-Wextra", "-Werror", "-o", tmp_path / "main", tmp_path / "main.cpp",
             "-ldl"], timeout=120)
    done = RUN.run([tmp_path / "main", tmp_path / "libplug.so", tmp_path / "nope.so"])
    assert done.stdout.split("\n")[:3] == ["1005 missing error", "cleared", "bad"]


def test_windows_branch_compiles_with_mingw(tmp_path: Path) -> None:
    if shutil.which("x86_64-w64-mingw32-g++") is None:
        pytest.skip("x86_64-w64-mingw32-g++ not installed (apt-get install g++-mingw-w64-x86-64)")
    _write(tmp_path)
    # A variable named `small` must survive windows.h (rpcndr.h defines it as a macro).
    (tmp_path / "small.cpp").write_text('#include "fb_dlfcn_compat.h"\n#include <algorithm>\n'
                                        "int f(int small) { return std::max(small, 1); }\n")
    for name in ("main.cpp", "small.cpp"):
        RUN.run(["x86_64-w64-mingw32-g++", "-std=c++17", "-Wall", "-Werror", "-c",
                 "-o", tmp_path / f"{name}.o", tmp_path / name], timeout=120)
    RUN.run(["x86_64-w64-mingw32-g++", "-shared", "-o", tmp_path / "plug.dll",
             tmp_path / "plugin.cpp"], timeout=120)
    RUN.run(["x86_64-w64-mingw32-g++", "-static", "-o", tmp_path / "main.exe",
             tmp_path / "main.cpp.o"], timeout=120)
    assert (tmp_path / "main.exe").stat().st_size > 0


KERNELS = """\
template <typename T>
__global__ void scale(T* x, T a, int n) {
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


def _nvcc() -> str | None:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda-13.0/bin/nvcc"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@pytest.mark.slow
def test_guarded_instantiations_still_instantiate_under_gcc(tmp_path: Path) -> None:
    nvcc = _nvcc()
    if nvcc is None or shutil.which("nm") is None:
        pytest.skip("nvcc or nm not installed")
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
