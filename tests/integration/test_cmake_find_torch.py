"""A CMakeLists.txt that says `find_package(Torch CONFIG REQUIRED)` expects the user to pass
torch's CMake folder (torchmcubes 0.1.0: its configure stopped with "Could not find a package
configuration file provided by \\"Torch\\""). flashbuild passes this interpreter's torch as
Torch_DIR, as it passes pybind11_DIR; real CMake finds torch with it (CPU torch here)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from flashbuild.arch import parse_arch_spec
from flashbuild.building import cmake
from flashbuild.building.backends.cmake import torch_dir

pytestmark = pytest.mark.integration

LISTS = """cmake_minimum_required(VERSION 3.18)
project(t LANGUAGES CXX)
find_package(Torch CONFIG REQUIRED)
message(STATUS "found torch ${Torch_VERSION} at ${Torch_DIR}")
"""


def test_find_package_torch_finds_the_torch_flashbuild_passes(tmp_path: Path) -> None:
    found = torch_dir()
    exe = shutil.which("cmake")
    if found is None or exe is None or shutil.which("c++") is None:
        pytest.skip("needs torch, cmake and a C++ compiler")
    (tmp_path / "CMakeLists.txt").write_text(LISTS, encoding="utf-8")
    bare = subprocess.run([exe, "-S", str(tmp_path), "-B", str(tmp_path / "a")],
                          capture_output=True, text=True, check=False, timeout=300)
    assert bare.returncode != 0 and '"Torch"' in bare.stdout + bare.stderr
    inputs = cmake.ConfigureInputs(
        source_dir=tmp_path, build_dir=tmp_path / "b", output_dir=tmp_path / "out",
        nvcc=Path("/nonexistent/nvcc"), toolkit_root=Path("/nonexistent"),
        arch=parse_arch_spec("sm_90a"), python="python3", torch_dir=found)
    argv = cmake.configure_argv(cmake.Tools(cmake=Path(exe), ninja=Path("ninja")), inputs)
    defines = [a for a in argv if a.startswith("-DTorch_DIR=")]
    assert defines == [f"-DTorch_DIR={Path(found).as_posix()}"]
    # torch's config would add -gencode flags for every arch of its own build otherwise.
    assert "-DTORCH_CUDA_ARCH_LIST=9.0a" in argv
    done = subprocess.run([exe, "-S", str(tmp_path), "-B", str(tmp_path / "b"), *defines],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "found torch" in done.stdout
