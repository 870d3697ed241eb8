"""A `find_package` that found nothing, as the real CMake says it: the configure's error names
the package, the file:line that asks for it and the recipe line that points CMake at an
installed copy (atlas-engine 0.2.0's TBB; the recorded text is in
tests/unit/test_cmake_refusals.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from flashbuild.building.cmake import missing_package_error

pytestmark = pytest.mark.integration


def test_the_real_cmakes_words_for_a_missing_package_are_read(tmp_path: Path) -> None:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("no cmake")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(p LANGUAGES NONE)\n\n"
        "find_package(FbNoSuchLib CONFIG REQUIRED)\n", encoding="utf-8")
    done = subprocess.run([cmake, "-S", str(tmp_path), "-B", str(tmp_path / "b")],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode != 0
    error = missing_package_error(done.stdout + done.stderr, tmp_path / "log")
    assert error is not None, done.stderr
    assert "FbNoSuchLib library (find_package at" in error.what
    assert "CMakeLists.txt:4)" in error.what
