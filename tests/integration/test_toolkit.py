"""cmake_toolkit_root against real CMake + Ninja + the venv's PyPI CUDA toolkit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from flashbuild import platforms
from flashbuild.building.toolkit import cmake_toolkit_root
from flashbuild.detect.cuda import find_toolkits
from flashbuild.proc import ProcessRunner

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parent.parent / "fixtures" / "detect" / "cmake_cuda"


def _pypi_toolkit():  # type: ignore[no-untyped-def]
    site = [Path(sysconfig.get_paths()["purelib"])]
    search = find_toolkits(os.environ, ProcessRunner(), platforms.current(), site_packages=site)
    found = [t for t in search.candidates if t.layout == "pypi" and t.nvcc is not None]
    if not found:
        pytest.skip("the PyPI CUDA toolkit is not installed (pip install -e .[cuda])")
    return found[0]


def test_pypi_toolkit_is_found_with_its_version_and_codes() -> None:
    toolkit = _pypi_toolkit()
    assert toolkit.release is not None and toolkit.release.major >= 12
    assert "sm_90" in toolkit.codes
    assert toolkit.has_headers


def test_shaped_folder_is_reused_and_keyed_by_installation(tmp_path: Path) -> None:
    toolkit = _pypi_toolkit()
    first = cmake_toolkit_root(toolkit, tmp_path)
    second = cmake_toolkit_root(toolkit, tmp_path)
    assert first == second
    assert first != toolkit.root
    assert (first / "lib" / "libcudart.so").resolve().is_file()
    assert (first / "targets" / "x86_64-linux" / "lib" / "libcudadevrt.a").exists()
    # nvcc must be a real file in bin/ so it reads the profile beside it (FACTS.md).
    assert not (first / "bin" / "nvcc").is_symlink()
    assert [p.name for p in tmp_path.iterdir()] == [first.name]


def test_cmake_configures_and_builds_a_cuda_library_with_the_pypi_toolkit(
        cuda_toolkit_root: Path, tmp_path: Path) -> None:
    # The PyPI wheels beside this interpreter (the project pins their versions), also when
    # pytest runs from an unactivated venv with an older system cmake on PATH.
    scripts = sysconfig.get_paths()["scripts"]
    cmake = shutil.which("cmake", path=scripts) or shutil.which("cmake")
    ninja = shutil.which("ninja", path=scripts) or shutil.which("ninja")
    if cmake is None or ninja is None:
        pytest.skip("cmake and ninja (PyPI wheels) are not installed")
    build = tmp_path / "build"
    nvcc = cuda_toolkit_root / "bin" / "nvcc"
    configure = subprocess.run(
        [cmake, "-S", str(PROJECT), "-B", str(build), "-G", "Ninja",
         f"-DCMAKE_MAKE_PROGRAM={ninja}", f"-DCMAKE_CUDA_COMPILER={nvcc}",
         f"-DCUDAToolkit_ROOT={cuda_toolkit_root}", "-DCMAKE_CUDA_ARCHITECTURES=90a-real"],
        capture_output=True, text=True, check=False)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    cache = (build / "CMakeCache.txt").read_text()
    assert f"CUDAToolkit_BIN_DIR:PATH={cuda_toolkit_root}/bin" in cache or \
        str(cuda_toolkit_root) in cache
    compiled = subprocess.run([cmake, "--build", str(build), "-j", "2"],
                              capture_output=True, text=True, check=False)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    library = next(build.glob("libprobe.so*"))
    assert library.stat().st_size > 0


DRIVER_PROJECT = """cmake_minimum_required(VERSION 3.24)
project(drv CXX)
find_package(CUDAToolkit REQUIRED)
add_library(drv SHARED drv.cpp)
target_link_libraries(drv PRIVATE CUDA::cuda_driver)
add_executable(drvexe main.cpp)
target_link_libraries(drvexe PRIVATE CUDA::cuda_driver)
"""


def test_the_shaped_folder_has_a_driver_stub_that_cmake_links_against(tmp_path: Path) -> None:
    """The PyPI wheels ship no libcuda stub, so a tree linking `CUDA::cuda_driver`
    (llama-cpp-python's ggml-cuda) could not configure with them; the shaped folder now has
    one, made with the host compiler from cuda.h, named as the driver (`libcuda.so.1`)."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    toolkit = _pypi_toolkit()
    cxx = shutil.which("g++")
    scripts = sysconfig.get_paths()["scripts"]
    cmake = shutil.which("cmake", path=scripts) or shutil.which("cmake")
    ninja = shutil.which("ninja", path=scripts) or shutil.which("ninja")
    if cxx is None or cmake is None or ninja is None:
        pytest.skip("g++, cmake and ninja are needed")
    root = cmake_toolkit_root(toolkit, tmp_path / "toolkits",
                              stub_with=(ProcessRunner(), Path(cxx)))
    stub = root / "lib" / "stubs" / "libcuda.so"
    with stub.open("rb") as fh:
        elf = ELFFile(fh)
        dynamic = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
        assert [t.soname for t in dynamic.iter_tags() if t.entry.d_tag == "DT_SONAME"] == \
            ["libcuda.so.1"]
        names = {s.name for s in elf.get_section_by_name(".dynsym").iter_symbols()}
    assert {"cuInit", "cuDeviceGetCount", "cuCtxCreate_v4"} <= names
    assert not list(stub.parent.glob("*.c"))  # only the library stays

    src = tmp_path / "proj"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(DRIVER_PROJECT)
    (src / "drv.cpp").write_text("#include <cuda.h>\nint drv_init() { return cuInit(0); }\n")
    (src / "main.cpp").write_text("#include <cuda.h>\nint main() { int n = 0; "
                                  "return cuDeviceGetCount(&n); }\n")
    build = tmp_path / "build"
    configure = subprocess.run(
        [cmake, "-S", str(src), "-B", str(build), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}",
         f"-DCMAKE_CXX_COMPILER={cxx}", f"-DCUDAToolkit_ROOT={root}"],
        capture_output=True, text=True, check=False)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    built = subprocess.run([cmake, "--build", str(build)], capture_output=True, text=True,
                           check=False)
    assert built.returncode == 0, built.stdout + built.stderr
