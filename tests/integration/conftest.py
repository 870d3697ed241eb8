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
