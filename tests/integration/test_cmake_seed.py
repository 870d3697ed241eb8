"""A fresh build folder seeded with the compiler checks of the toolchain's probe
(building/cmake_seed.py) configures as CMake's own second configure of a folder does, with
real cmake, ninja and nvcc: the same build.ninja, the same cache, no compiler checks, and the
library builds. A tree that sets its own compiler is configured with its own checks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flashbuild import platforms
from flashbuild.building import cmake, cmake_seed
from flashbuild.proc import ProcessRunner

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parent.parent / "fixtures" / "detect" / "cmake_cuda"
CHECKS = "Detecting CUDA compiler ABI info"


def _argv(tools: cmake.Tools, source: Path, build: Path, toolkit: Path, *extra: str
          ) -> list[str]:
    return [str(tools.cmake), "-S", str(source), "-B", str(build), "-G", "Ninja",
            f"-DCMAKE_MAKE_PROGRAM={tools.ninja}", f"-DCMAKE_CUDA_COMPILER={toolkit}/bin/nvcc",
            f"-DCUDAToolkit_ROOT={toolkit}", *extra]


def _configure(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _ninja(build: Path) -> str:
    # The folder's own path, and the rule that re-runs CMake (it lists the files CMake read,
    # which a first configure has more of), are what may differ.
    text = (build / "build.ninja").read_text(encoding="utf-8").replace(str(build), "BUILD")
    return re.sub(r"^build build\.ninja.*?(?=^\S)|^build /\S+.*?: phony.*?$", "", text,
                  flags=re.MULTILINE | re.DOTALL)


def _cache(build: Path) -> list[str]:
    # Comments and help strings left out: the probe's cache keeps no help text.
    text = (build / "CMakeCache.txt").read_text(encoding="utf-8").replace(str(build), "BUILD")
    return sorted(line for line in text.splitlines() if line and not line.startswith(("#", "//")))


def test_a_seeded_folder_configures_like_cmakes_second_configure_and_builds(
        cuda_toolkit_root: Path, tmp_path: Path) -> None:
    tools = cmake.find_tools(ProcessRunner(), {}, platforms.current())
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    arch = "-DCMAKE_CUDA_ARCHITECTURES=90a-real"
    # CMake's own way: configure a folder, then configure it again.
    twice = tmp_path / "twice"
    first = _configure(_argv(tools, PROJECT, twice, cuda_toolkit_root, arch))
    assert CHECKS in first
    second = _configure(_argv(tools, PROJECT, twice, cuda_toolkit_root, arch))
    assert CHECKS not in second

    seeded = tmp_path / "seeded"
    argv = _argv(tools, PROJECT, seeded, cuda_toolkit_root, arch, "-DCMAKE_CUDA_FLAGS=-Xptxas -v")
    done = cmake_seed.seed(seeded, argv, env, runner=ProcessRunner(),
                           platform=platforms.current())
    assert done.key, done.why_not
    probes = list((tmp_path / "cache" / "flashbuild" / "cmake-probe").iterdir())
    assert len(probes) == 1
    out = _configure(argv)
    assert CHECKS not in out
    assert "The CUDA compiler identification" not in out
    # ptxas's options change no check: the folder is the second configure's, less that flag.
    assert "-Xptxas -v" in (seeded / "CMakeCache.txt").read_text(encoding="utf-8")
    plain = tmp_path / "plain"
    argv = _argv(tools, PROJECT, plain, cuda_toolkit_root, arch)
    assert cmake_seed.seed(plain, argv, env, runner=ProcessRunner(),
                           platform=platforms.current()).key == done.key
    assert len(list(probes[0].parent.iterdir())) == 1, "a second probe was run"
    _configure(argv)
    assert _ninja(plain) == _ninja(twice)
    seeded_cache, own_cache = set(_cache(plain)), set(_cache(twice))
    assert (sorted(seeded_cache - own_cache), sorted(own_cache - seeded_cache)) == ([], [])

    built = subprocess.run([str(tools.ninja), "-C", str(seeded)], capture_output=True,
                           text=True, check=False, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    assert next(seeded.glob("libprobe.so*")).stat().st_size > 0


def test_a_tree_that_sets_its_compiler_runs_its_own_checks(cuda_toolkit_root: Path,
                                                          tmp_path: Path) -> None:
    tools = cmake.find_tools(ProcessRunner(), {}, platforms.current())
    tree = tmp_path / "tree"
    shutil.copytree(PROJECT, tree)
    text = (tree / "CMakeLists.txt").read_text(encoding="utf-8")
    (tree / "CMakeLists.txt").write_text(text.replace(
        "project(", f"set(CMAKE_CUDA_HOST_COMPILER {shutil.which('g++') or 'g++'})\nproject(",
        1), encoding="utf-8")
    build = tmp_path / "build"
    done = cmake_seed.seed(build, _argv(tools, tree, build, cuda_toolkit_root,
                                        "-DCMAKE_CUDA_ARCHITECTURES=90a-real"),
                           {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin"},
                           runner=ProcessRunner(), platform=platforms.current())
    assert done.key == ""
    assert "sets a compiler" in done.why_not
    assert not (build / "CMakeCache.txt").exists()
    assert not (tmp_path / "cache").exists(), "no probe runs for a tree it cannot stand for"
