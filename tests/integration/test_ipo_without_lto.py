"""A CMake tree that asks for IPO, built with a C++ compiler that cannot link with LTO
(tests/fixtures/cmake/ipo; torchmcubes with the H200 machine's /opt/gcc/bin/g++, whose link
stopped at "could not run lto-wrapper" after every unit compiled). The probe finds the
compiler's refusal, and with the include it writes real CMake builds the tree with no LTO
flag; a compiler that links LTO gets nothing, and neither does a tree that does not ask."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from flashbuild.building import ipo
from flashbuild.proc import ProcessRunner

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cmake" / "ipo"
GXX = shutil.which("g++")

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None or GXX is None,
                                reason="needs cmake and g++")

#: g++ whose LTO cannot run: what the H200 machine's linker said, for any -flto.
BROKEN = """#!/bin/sh
for a in "$@"; do
  case "$a" in -flto*) echo "/usr/bin/ld: error: could not run lto-wrapper" >&2; exit 1;; esac
done
exec {gxx} "$@"
"""


def _broken_gxx(tmp_path: Path) -> Path:
    script = tmp_path / "bin" / "g++-nolto"
    script.parent.mkdir()
    script.write_text(BROKEN.format(gxx=GXX), encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def _build(build: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    configure = subprocess.run(["cmake", "-S", str(FIXTURE), "-B", str(build), *extra],
                               capture_output=True, text=True, env=env, timeout=300,
                               check=False)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    return subprocess.run(["cmake", "--build", str(build), "--verbose"], capture_output=True,
                          text=True, env=env, timeout=300, check=False)


def test_a_compiler_that_cannot_link_lto_builds_the_tree_without_it(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "CXX": str(_broken_gxx(tmp_path)), "HOME": str(tmp_path)}
    failed = _build(tmp_path / "plain", env)
    assert failed.returncode != 0
    assert "could not run lto-wrapper" in failed.stdout + failed.stderr

    assert ipo.asks_for_ipo(FIXTURE)
    build = tmp_path / "fixed"
    build.mkdir()
    found = ipo.without_ipo(FIXTURE, build, ProcessRunner(), env, {})
    assert found is not None
    include, note = found
    assert "could not run lto-wrapper" in note and "g++-nolto" in note
    built = _build(build, env, f"-DCMAKE_PROJECT_INCLUDE={include}")
    assert built.returncode == 0, built.stdout + built.stderr
    assert "-flto" not in built.stdout
    assert list(build.rglob("libipomod.so"))
    # A recipe that sets CMAKE_PROJECT_INCLUDE itself keeps it.
    assert ipo.without_ipo(FIXTURE, build, ProcessRunner(), env,
                           {"CMAKE_PROJECT_INCLUDE": "own.cmake"}) is None


def test_a_compiler_that_links_lto_or_a_tree_that_does_not_ask_gets_nothing(
        tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "CXX": str(GXX), "HOME": str(tmp_path)}
    probe = subprocess.run([str(GXX), *ipo.LTO_FLAGS, "-x", "c++", "-", "-o",
                            str(tmp_path / "a")], input="int main() { return 0; }\n",
                           capture_output=True, text=True, timeout=120, check=False)
    if probe.returncode != 0:
        pytest.skip(f"this g++ cannot link LTO itself: {probe.stderr.strip()[:200]}")
    assert ipo.without_ipo(FIXTURE, tmp_path, ProcessRunner(), env, {}) is None
    plain = tmp_path / "tree"
    plain.mkdir()
    (plain / "CMakeLists.txt").write_text("project(p CXX)\nadd_library(m SHARED m.cpp)\n",
                                          encoding="utf-8")
    assert not ipo.asks_for_ipo(plain)
