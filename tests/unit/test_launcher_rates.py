"""sccache's per-stage hit rates for one build, and the environment that launches
cpp_extension's compiles (flashbuild/building/launcher.py)."""

from __future__ import annotations

import shlex
from pathlib import Path

from flashbuild.building.launcher import Launcher, rates, rates_note, setuptools_env

SCCACHE = Launcher("sccache", Path("/opt/bin/sccache"), cuda=True)


def test_the_rate_is_this_builds_and_counts_the_device_stages() -> None:
    before = {"C/C++": (5, 5), "CUDA": (0, 2)}
    after = {"C/C++": (7, 5), "CUDA": (2, 2), "PTX": (0, 2), "CUBIN": (0, 2)}
    found = rates(before, after)
    assert [(r.stage, r.hits, r.misses) for r in found] == [
        ("C/C++", 2, 0), ("CUBIN", 0, 2), ("CUDA", 2, 0), ("PTX", 0, 2)]
    note = rates_note(SCCACHE, found)
    # 4 hits of 8 requests once the device stages count, not 4 of 4
    assert note.endswith("all stages 4/8 (50%)"), note
    assert note.isascii()


def test_no_stats_gives_no_rates() -> None:
    assert rates(None, None) == ()
    assert "no compile" in rates_note(SCCACHE, ())


def test_linux_launches_nvcc_and_the_host_compiler(tmp_path: Path) -> None:
    env, what = setuptools_env(SCCACHE, nvcc=Path("/cuda/bin/nvcc"), wrapper_dir=tmp_path,
                               env={"CXX": "g++-13"}, msvc_host=False)
    assert shlex.split(env["PYTORCH_NVCC"]) == ["/opt/bin/sccache", "/cuda/bin/nvcc"]
    assert env["TORCH_NO_COMPILER_WRAPPER"] == "1"
    assert "/opt/bin/sccache g++-13" in Path(env["CXX"]).read_text()
    assert what == "sccache (nvcc and g++-13)"
    # A CMake the setup.py runs itself takes the CUDA launcher from the environment.
    assert env["CMAKE_CUDA_COMPILER_LAUNCHER"] == "/opt/bin/sccache"
    mine = {"CMAKE_CUDA_COMPILER_LAUNCHER": "ccache"}
    env, _ = setuptools_env(SCCACHE, nvcc=Path("/cuda/bin/nvcc"), wrapper_dir=tmp_path,
                            env=mine, msvc_host=False)
    assert "CMAKE_CUDA_COMPILER_LAUNCHER" not in env  # the user's own stays


def test_msvc_launches_nvcc_only(tmp_path: Path) -> None:
    env, what = setuptools_env(SCCACHE, nvcc=Path("C:/cuda/bin/nvcc.exe"),
                               wrapper_dir=tmp_path, env={}, msvc_host=True)
    assert "CXX" not in env and what == "sccache (nvcc)"
    ccache = Launcher("ccache", Path("/usr/bin/ccache"), cuda=False)
    env, what = setuptools_env(ccache, nvcc=Path("/cuda/bin/nvcc"), wrapper_dir=tmp_path,
                               env={}, msvc_host=False)
    assert "PYTORCH_NVCC" not in env and what == "ccache (c++)"
    assert "CMAKE_CUDA_COMPILER_LAUNCHER" not in env  # ccache cannot cache nvcc
