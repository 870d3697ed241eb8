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
    return cmake_toolkit_root(toolkit, run_folder(tmp_path_factory, "cuda-toolkits"))


def run_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder shared by every xdist worker of this run: `<pytest-N>/<name>` (each worker's
    base temp is `<pytest-N>/popen-gwX`), or `<pytest-N>/<name>` itself without xdist.

    For cuda_toolkit_root: its folder is part of the key of flashbuild's CMake compiler-check
    probe (CUDAToolkit_ROOT, flashbuild/building/cmake_seed.py; about 4 s of CPU each here).
    With one folder per worker, and one more per module that imports the fixture (a separate
    fixture definition, so a second session instance), the same probe ran again in each of
    them: ten probes in a default run, where one folder for the run needs about half. The
    folder is made by cmake_toolkit_root, which builds it under a staging name and renames it
    into place, so workers making it at once need no lock (the first rename wins, the others
    use it); tests only read it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    folder = base / name
    folder.mkdir(exist_ok=True)
    return folder


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
