"""A build folder poisoned by a configure that did not finish (issue 27): under `ulimit -f`
CMake dies of SIGXFSZ while it writes its files. The build said only "CMake configure
failed", and the half-written folder stayed for the next run to reuse. Now the failing run
names the signal and the limit, and the next run sets the folder aside (a dated
`.flashbuild-stale-*` sibling) and configures afresh."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.building import builddir
from flashbuild.building.cmake import CONFIGURE_RUNNING, unfinished_configure
from tests.reliability.helpers import Outcome, judge_outcome, record

CUDA = Path("/usr/local/cuda-13.0")
#: KiB: past the compiler checks' own files, short of CMake's configure log (about 120 KiB).
LIMIT_KIB = 40


def _tree(base: Path) -> Path:
    tree = base / "c"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.24)\n"
                                         "project(c LANGUAGES CXX)\nadd_library(c SHARED a.cpp)\n")
    (tree / "a.cpp").write_text("int f() { return 1; }\n")
    (tree / "c.toml").write_text('[recipe]\nname = "c"\n[source]\npath = "."\n'
                                 '[build]\ntargets = ["c"]\n')
    return tree


def _build(tree: Path, *, limit: int | None, cache: Path) -> Outcome:
    argv = [sys.executable, "-m", "flashbuild", "build", "--recipe", str(tree / "c.toml"),
            "--arch", "sm_90a", "--cuda", str(CUDA), "--install", "none", "-j", "1"]
    if limit is not None:
        argv = ["bash", "-c", f'ulimit -f {limit}; exec "$@"', "bash", *argv]
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    # A user cache of its own: the compiler probe (building/cmake_seed.py) runs under the
    # limit too, and is killed by it.
    done = subprocess.run(argv, env={**os.environ, "PATH": path, "XDG_CACHE_HOME": str(cache)},
                          cwd=tree.parent,
                          capture_output=True, text=True, timeout=300, check=False)
    return Outcome(done.returncode, done.stdout + done.stderr, 0.0)


@pytest.mark.skipif(not (CUDA / "bin" / "nvcc").is_file() or shutil.which("bash") is None,
                    reason="needs bash and the CUDA 13.0 toolkit")
def test_a_configure_killed_by_a_file_size_limit_is_set_aside(tmp_path: Path) -> None:
    tree, cache = _tree(tmp_path), tmp_path / "cache"
    first = _build(tree, limit=LIMIT_KIB, cache=cache)
    judge_outcome("configure under ulimit -f", first, code=6,
                  say="CMake configure was killed by SIGXFSZ")
    assert "ulimit -f unlimited" in first.output
    # The probe, killed with it, left nothing behind: the next run probes again.
    assert not [p for p in (cache / "flashbuild" / "cmake-probe").rglob("*") if p.is_file()]
    again = _build(tree, limit=None, cache=cache)
    judge_outcome("build after a configure killed under ulimit -f", again, code=0,
                  say="was set aside: a CMake configure in it was killed before it ended")
    root = tmp_path / "build" / "flashbuild"
    stale = [p.name for p in root.iterdir() if builddir.STALE_MARK in p.name]
    assert len(stale) == 1, sorted(p.name for p in root.iterdir())
    # The stale copy is kept; the fresh folder configured to the end.
    folder = root / stale[0].split(builddir.STALE_MARK)[0]
    assert (root / stale[0] / CONFIGURE_RUNNING).is_file()
    assert not (folder / CONFIGURE_RUNNING).exists()
    assert unfinished_configure(folder) == ""
    log = (folder / "logs" / "configure.log").read_text(encoding="utf-8")
    assert "# compiler checks: those of the probe for this toolchain" in log


@pytest.mark.parametrize("cut", [50, 100, -1])
def test_a_cut_short_cmake_cache_is_unfinished(tmp_path: Path, cut: int) -> None:
    """A CMakeCache.txt cut inside an entry (no final newline)."""
    whole = ("# This is the CMakeCache file.\nCMAKE_CXX_COMPILER:FILEPATH=/usr/bin/c++\n"
             "CMAKE_CACHEFILE_DIR:INTERNAL=/b\n")
    (tmp_path / "CMakeCache.txt").write_text(whole[:cut])
    why = unfinished_configure(tmp_path)
    record(f"CMakeCache.txt cut at {cut}", clear_error=None, data_lost=False,
           tree_changed=False, hang=False, false_pass=why == "")
    assert "cut short" in why
    (tmp_path / "CMakeCache.txt").write_text(whole)
    assert unfinished_configure(tmp_path) == ""
