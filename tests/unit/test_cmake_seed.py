"""Which configures the compiler probe stands for, what its key holds, and what a probe that
fails or a folder that already has a cache does (building/cmake_seed.py; the real configure
is tests/integration/test_cmake_seed.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from flashbuild import platforms
from flashbuild.building import cmake_seed
from flashbuild.runner import Completed

LINUX = platforms.get("linux")


def _tree(tmp_path: Path, text: str) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    (tree / "CMakeLists.txt").write_text(text, encoding="utf-8")
    return tree


def _argv(tree: Path, build: Path, *extra: str) -> list[str]:
    return ["/opt/cmake/bin/cmake", "-S", str(tree), "-B", str(build), "-G", "Ninja",
            "-DCMAKE_CUDA_COMPILER=/opt/cuda/bin/nvcc", "-DCMAKE_CUDA_ARCHITECTURES=90a-real",
            "-DCMAKE_LIBRARY_OUTPUT_DIRECTORY=/x/out", *extra]


@pytest.mark.parametrize(("text", "blocked"), [
    ("cmake_minimum_required(VERSION 3.26)\nproject(k LANGUAGES CXX CUDA)\n", ""),
    # An arch list chosen before project() is what the configure passes anyway.
    ("cmake_minimum_required(VERSION 3.26)\nif(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)\n"
     "  set(CMAKE_CUDA_ARCHITECTURES 90)\nendif()\nproject(k CXX CUDA)\n", ""),
    ("# set(CMAKE_CXX_COMPILER clang++)\nproject(k)\n", ""),
    ("project(k CXX)\nset(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})\n"
     "enable_language(CUDA)\n", "sets a compiler"),
    ("set(CMAKE_CUDA_FLAGS \"--allow-unsupported-compiler\")\nproject(k CXX CUDA)\n",
     "before project()"),
    ("include(cmake/toolchain.cmake)\nproject(k CXX CUDA)\n", "include() before project()"),
    ("set(ENV{CUDAHOSTCXX} g++-12)\nproject(k CXX CUDA)\n", "before project()"),
    ("add_library(k k.cu)\n", "no project()"),
])
def test_a_tree_that_chooses_its_own_compilers_is_not_seeded(tmp_path: Path, text: str,
                                                             blocked: str) -> None:
    why = cmake_seed.preamble_blocks(_tree(tmp_path, text))
    assert (blocked in why) if blocked else why == ""


def _key(argv: Sequence[str], env: Mapping[str, str]) -> str:
    parsed = cmake_seed._parse(argv)
    assert not isinstance(parsed, str), parsed
    _source, generator, defines = parsed
    return cmake_seed.toolchain_key(argv[0], generator, cmake_seed._key_defines(defines),
                                    env, LINUX)


def test_the_key_is_the_toolchain_not_the_arch_ptxas_options_or_the_folders(
        tmp_path: Path) -> None:
    tree, env = _tree(tmp_path, "project(k CXX CUDA)\n"), {"PATH": "/usr/bin"}
    base = _key(_argv(tree, tmp_path / "a"), env)
    # Another folder, another output folder, another arch, ptxas told to be verbose.
    same = _argv(tree, tmp_path / "b", "-DCMAKE_CUDA_FLAGS=-Xptxas -v")
    same[same.index("-DCMAKE_CUDA_ARCHITECTURES=90a-real")] = "-DCMAKE_CUDA_ARCHITECTURES=120"
    assert _key(same, env) == base
    # A flag the checks compile with, another host compiler, another PATH: another probe.
    assert _key(_argv(tree, tmp_path / "a", "-DCMAKE_CUDA_FLAGS=-std=c++17"), env) != base
    assert _key(_argv(tree, tmp_path / "a"), {**env, "CUDAHOSTCXX": "g++-12"}) != base
    assert _key(_argv(tree, tmp_path / "a"), {"PATH": "/opt/gcc/bin:/usr/bin"}) != base


def test_a_compiler_changed_in_place_is_checked_again(tmp_path: Path) -> None:
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n", encoding="utf-8")
    tree = _tree(tmp_path, "project(k CXX CUDA)\n")
    argv = [*_argv(tree, tmp_path / "a"), f"-DCMAKE_CUDA_COMPILER={nvcc}"]
    before = _key(argv, {})
    nvcc.write_text("#!/bin/sh\n# 13.1\n", encoding="utf-8")
    os.utime(nvcc, ns=(nvcc.stat().st_atime_ns, nvcc.stat().st_mtime_ns + 10**9))
    assert _key(argv, {}) != before


@pytest.mark.parametrize(("extra", "why"), [
    (("-DCMAKE_TOOLCHAIN_FILE=/x/t.cmake",), "CMAKE_TOOLCHAIN_FILE"),
    (("-C", "/x/init.cmake"), "-C"),
    (("-T", "cuda=12.8"), "-T"),
])
def test_a_configure_with_its_own_platform_is_not_seeded(tmp_path: Path, extra: tuple[str, ...],
                                                        why: str) -> None:
    tree = _tree(tmp_path, "project(k CXX CUDA)\n")
    done = cmake_seed.seed(tmp_path / "b", _argv(tree, tmp_path / "b", *extra), {},
                           runner=_NoRunner(), platform=LINUX, cache_root=tmp_path / "probes")
    assert done.key == "" and why in done.why_not


class _NoRunner:
    def run(self, argv: Sequence[str | os.PathLike[str]], **_kw: object) -> Completed:
        raise AssertionError(f"nothing is run here: {argv}")

    def which(self, program: str, env: Mapping[str, str] | None = None) -> str | None:
        return None


class _FailingProbe(_NoRunner):
    def __init__(self) -> None:
        self.runs = 0

    def run(self, argv: Sequence[str | os.PathLike[str]], **_kw: object) -> Completed:
        self.runs += 1
        return Completed(tuple(map(str, argv)), 1, "",
                         "CMake Error: No CMAKE_CUDA_COMPILER could be found.\n")


def test_a_probe_that_fails_leaves_the_checks_to_the_configure_and_nothing_behind(
        tmp_path: Path) -> None:
    tree = _tree(tmp_path, "project(k CXX CUDA)\n")
    runner = _FailingProbe()
    for n in ("a", "b"):
        done = cmake_seed.seed(tmp_path / n, _argv(tree, tmp_path / n), {}, runner=runner,
                               platform=LINUX, cache_root=tmp_path / "probes")
        assert done.key == ""
        assert "No CMAKE_CUDA_COMPILER could be found" in done.why_not
        assert not (tmp_path / n / "CMakeCache.txt").exists()
    # Tried again each time (a failure can be of the moment), and no half probe is kept.
    assert runner.runs == 2
    assert list((tmp_path / "probes").iterdir()) == []
    assert done.line().startswith("compiler checks: run by this configure (the compiler probe")


def test_a_folder_with_a_cache_and_the_switch_off_are_left_alone(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "project(k CXX CUDA)\n")
    build = tmp_path / "b"
    build.mkdir()
    (build / "CMakeCache.txt").write_text("CMAKE_HOME_DIRECTORY:INTERNAL=/x\n", encoding="utf-8")
    done = cmake_seed.seed(build, _argv(tree, build), {}, runner=_NoRunner(), platform=LINUX,
                           cache_root=tmp_path / "probes")
    assert "has a CMake cache" in done.why_not
    assert (build / "CMakeCache.txt").read_text(encoding="utf-8") == \
        "CMAKE_HOME_DIRECTORY:INTERNAL=/x\n"
    done = cmake_seed.seed(tmp_path / "c", _argv(tree, tmp_path / "c"),
                           {cmake_seed.SWITCH: "0"}, runner=_NoRunner(), platform=LINUX,
                           cache_root=tmp_path / "probes")
    assert done.why_not == f"{cmake_seed.SWITCH}=0"


def test_the_seed_cache_holds_what_the_checks_wrote_not_the_probes_own_entries(
        tmp_path: Path) -> None:
    cache = tmp_path / "CMakeCache.txt"
    cache.write_text(
        "// Path to a program.\nCMAKE_AR:FILEPATH=/usr/bin/ar\n"
        "CMAKE_CUDA_COMPILER:STRING=/opt/cuda/bin/nvcc\n"
        "CMAKE_CUDA_ARCHITECTURES:UNINITIALIZED=90a-real\nCMAKE_CUDA_FLAGS:STRING=\n"
        "CMAKE_HOME_DIRECTORY:INTERNAL=/tmp/probe/src\nCMAKE_PROJECT_NAME:STATIC=flashbuild_probe\n"
        "flashbuild_probe_BINARY_DIR:STATIC=/tmp/probe/build\n"
        "CMAKE_CACHEFILE_DIR:INTERNAL=/tmp/probe/build\nCMAKE_PLATFORM_INFO_INITIALIZED:INTERNAL=1\n",
        encoding="utf-8")
    kept = cmake_seed.probe_cache(cache, {"CMAKE_CUDA_ARCHITECTURES", "CMAKE_CUDA_FLAGS"})
    assert kept.splitlines() == ["CMAKE_AR:FILEPATH=/usr/bin/ar",
                                 "CMAKE_CUDA_COMPILER:STRING=/opt/cuda/bin/nvcc",
                                 "CMAKE_PLATFORM_INFO_INITIALIZED:INTERNAL=1"]
