"""CUDA 13 keeps CCCL under `<toolkit>/include/cccl`; nvcc adds it for itself, torch's
cpp_extension does not give it to the host compiler. A `.cpp` of a CUDAExtension that
includes `<cuda/std/utility>` (as every CUTLASS user does through `cutlass/cutlass.h`:
FlashMLA's `csrc/api/api.cpp`) must compile in a flashbuild build as it did with CUDA 12.

CPU torch here: the sources compile and the link fails (`-lc10_cuda`); the test asserts the
`.cpp` object was compiled. On a CUDA torch the build links and installs.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from flashbuild.building.backends import setuptools as st
from flashbuild.building.toolkit import cccl_include_dir
from flashbuild.errors import BuildError

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed")]

SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(name="cccltree", version="0.1", packages=["cccltree"],
      ext_modules=[CUDAExtension(name="cccltree._C",
                                 sources=["csrc/api.cpp", "csrc/kernel.cu"])],
      cmdclass={"build_ext": BuildExtension})
"""
# Host code that needs CCCL, without torch's headers (the compile stays small).
API = """#include <cuda/std/utility>
#include <Python.h>

static int first() { cuda::std::pair<int, int> p{1, 2}; return p.first; }
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit__C(void) { (void)first(); return PyModule_Create(&module); }
"""
KERNEL = """extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }
"""
RECIPE = """[recipe]
name = "cccltree"
[source]
path = "."
[build]
backend = "setuptools"
[install]
package = "cccltree"
package_dir = "cccltree"
"""


def _tree(root: Path) -> Path:
    tree = root / "cccltree"
    (tree / "csrc").mkdir(parents=True)
    (tree / "cccltree").mkdir()
    (tree / "setup.py").write_text(SETUP)
    (tree / "csrc" / "api.cpp").write_text(API)
    (tree / "csrc" / "kernel.cu").write_text(KERNEL)
    (tree / "cccltree" / "__init__.py").write_text("")
    (tree / "tree.toml").write_text(RECIPE)
    return tree


def test_a_cpp_that_includes_cccl_compiles(tmp_path: Path, cuda_toolkit_root: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.pipeline.command import run_build

    if cccl_include_dir(cuda_toolkit_root) is None:
        pytest.skip("this toolkit keeps CCCL in include/ (CUDA 12): nothing to add")
    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = _tree(tmp_path)
    build_dir = tmp_path / "b"
    try:
        run_build(recipe=str(tree / "tree.toml"), source=None, arch="sm_90a",
                  cuda=cuda_toolkit_root, platform=None, jobs_text="2", launcher_text="none",
                  install_text="wheel", build_dir=build_dir, as_json=True)
    except BuildError as exc:  # CPU torch: no libc10_cuda to link
        assert "cuda/std/utility" not in exc.evidence, exc.evidence
        assert "c10_cuda" in str(exc) + exc.evidence or "torch_cuda" in exc.evidence, exc
    objects = list((build_dir / "src" / "build").rglob("api.o"))
    assert objects, "g++ did not compile csrc/api.cpp"
    assert list((build_dir / "src" / "build").rglob("kernel.o"))


def test_without_the_folder_the_same_cpp_fails(tmp_path: Path, cuda_toolkit_root: Path) -> None:
    # The fixture is a real test of the problem: g++ with the toolkit's include/ alone (what
    # torch gives a .cpp) cannot find <cuda/std/utility>.
    if cccl_include_dir(cuda_toolkit_root) is None:
        pytest.skip("this toolkit keeps CCCL in include/ (CUDA 12)")
    source = tmp_path / "a.cpp"
    source.write_text("#include <cuda/std/utility>\nint main() { return 0; }\n")
    done = subprocess.run(["g++", "-fsyntax-only", "-I", str(cuda_toolkit_root / "include"),
                           str(source)], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "cuda/std/utility" in done.stderr


CMAKELISTS = """cmake_minimum_required(VERSION 3.24)
project(cccltree LANGUAGES CXX CUDA)
find_package(CUDAToolkit REQUIRED)
add_library(api STATIC api.cpp)
target_link_libraries(api PRIVATE CUDA::cudart)
"""


@pytest.mark.parametrize("which", ["wheel", "system"])
def test_cmake_cxx_target_gets_cccl(tmp_path: Path, cuda_toolkit_root: Path, which: str) -> None:
    # The CMake backend's rule: a C++ target that links CUDA::cudart sees include/cccl, from
    # CMake itself where its FindCUDAToolkit gives it, else from the define flashbuild adds.
    import shutil

    from flashbuild.arch import parse_arch_spec
    from flashbuild.building import cmake
    from flashbuild.proc import ProcessRunner

    cccl = cccl_include_dir(cuda_toolkit_root)
    if cccl is None:
        pytest.skip("this toolkit keeps CCCL in include/ (CUDA 12)")
    tools = cmake.find_tools(ProcessRunner(), __import__("os").environ)
    if which == "system":
        system = Path("/usr/bin/cmake")
        if not system.is_file() or system.resolve() == tools.cmake.resolve():
            pytest.skip("no second (system) cmake here")
        tools = cmake.Tools(cmake=system, ninja=tools.ninja)
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(CMAKELISTS)
    (src / "api.cpp").write_text("#include <cuda/std/utility>\n"
                                 "int first() { cuda::std::pair<int, int> p{1, 2}; "
                                 "return p.first; }\n")
    inputs = cmake.ConfigureInputs(
        source_dir=src, build_dir=tmp_path / "b", output_dir=tmp_path / "b" / "out",
        nvcc=cuda_toolkit_root / "bin" / "nvcc", toolkit_root=cuda_toolkit_root,
        arch=parse_arch_spec("sm_90a"), python=__import__("sys").executable,
        cccl_dir=cccl)
    configure = subprocess.run(cmake.configure_argv(tools, inputs), capture_output=True,
                               text=True, check=False)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    built = subprocess.run(cmake.build_argv(tools, tmp_path / "b", 1), capture_output=True,
                           text=True, check=False)
    assert built.returncode == 0, built.stdout
    assert list((tmp_path / "b").rglob("api.cpp.o"))
    shutil.rmtree(tmp_path / "b")
