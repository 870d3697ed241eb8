"""Fixtures shared by integration tests: real toolchains found the way doctor finds them."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cuda_toolkit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CMake-usable CUDA toolkit root: the PyPI toolkit of the running interpreter if there
    is one (what `pip install -e .[cuda]` gives), else the toolkit doctor would choose. Its
    `bin/nvcc` is the compiler to use. Skips when no toolkit with nvcc exists."""
    from flashbuild import platforms
    from flashbuild.building.toolkit import cmake_toolkit_root
    from flashbuild.detect.cuda import find_toolkits
    from flashbuild.proc import ProcessRunner

    site = [Path(p) for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}]
    search = find_toolkits(os.environ, ProcessRunner(), platforms.current(), site_packages=site)
    usable = [t for t in search.candidates if t.nvcc is not None and t.has_headers]
    pypi = [t for t in usable if t.layout == "pypi" and "pypi" in t.origins]
    toolkit = pypi[0] if pypi else search.chosen
    if toolkit is None or toolkit.nvcc is None:
        pytest.skip("no CUDA toolkit with nvcc on this machine")
    return cmake_toolkit_root(toolkit, tmp_path_factory.mktemp("cuda-toolkits"))


@pytest.fixture(scope="session")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding `libnvidia-ml.so.1` built from tests/fixtures/nvml/fake_nvml.c: put it on
    LD_LIBRARY_PATH and set FAKE_NVML_GPUS ("12.0:NVIDIA GeForce RTX 5090,...") to stand in for
    the driver's NVML. Skips without a host C compiler or off Linux."""
    import shutil
    import subprocess
    import sys

    cc = shutil.which("cc") or shutil.which("gcc")
    if sys.platform != "linux" or cc is None:
        pytest.skip("the NVML stand-in is an ELF shared library built with the host compiler")
    folder = tmp_path_factory.mktemp("nvml")
    source = Path(__file__).resolve().parents[1] / "fixtures" / "nvml" / "fake_nvml.c"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(folder / "libnvidia-ml.so.1"),
                    str(source)], check=True, timeout=120)
    return folder
