"""`flashbuild repair` on a real torch extension's wheel: tests/fixtures/torchcpu (a
CppExtension, C++ only) built by `flashbuild build`'s setuptools backend against the installed
torch, so its module needs torch's libc10/libtorch_* as torch.utils.cpp_extension links them.
Repaired to the policy this host's glibc allows (a wheel linked here can claim no older one:
test_ci_local_leg.py), it is retagged with torch's libraries left outside; linked with OpenMP
too (libgomp.so.1, which neither torch nor the policy provides) it is refused, naming it.

CI installs the CPU torch, so this runs there; `flashbuild build` refuses a CPU torch for a
setuptools tree up front (it cannot build a CUDAExtension), so the refusal is patched out here
as in test_torchext_fixture.py: this tree has no CUDA source. The CUDA torch's wheel
(libcudart, libc10_cuda) went through repair by hand (docs/ci.md)."""

from __future__ import annotations

import importlib.util
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from flashbuild.building.backends import setuptools as st
from flashbuild.errors import VerifyError
from flashbuild.verifying.abi import policy_for_glibc
from flashbuild.verifying.repair import repair_wheel
from tests.conftest import FIXTURES

pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not importable: no torch extension to build "
                                 "(CI installs the CPU torch)"),
              pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                 reason="needs a C++ compiler")]


def _build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    """The wheel `flashbuild build` writes for a copy of the torchcpu fixture."""
    from flashbuild.pipeline.command import run_build

    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = tmp_path / name
    shutil.copytree(FIXTURES / "torchcpu", tree)
    build_dir = tmp_path / f"{name}-build"
    run_build(recipe=str(tree / "torchcpu.toml"), source=None, arch="sm120", cuda=None,
              platform=None, jobs_text="1", launcher_text="none", install_text="none",
              build_dir=build_dir, as_json=True)
    (wheel,) = (build_dir / "dist-setuptools").glob("torchcpu-*.whl")
    return wheel


def _host_policy() -> str:
    host = policy_for_glibc(platform.libc_ver()[1])
    if host is None:
        pytest.skip(f"this host's glibc {platform.libc_ver()[1]} is older than every policy")
    return host.name


def test_a_torch_extension_is_retagged_with_torchs_libraries_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _build(tmp_path, monkeypatch, "torchcpu")
    assert wheel.name.endswith("-linux_x86_64.whl")
    policy = _host_policy()
    done = subprocess.run([sys.executable, "-m", "flashbuild", "repair", str(wheel),
                           "--policy", policy, "-w", str(tmp_path / "out")],
                          capture_output=True, text=True, check=False, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    (out,) = (tmp_path / "out").glob("*.whl")
    assert out.name == wheel.name.replace("linux_x86_64", f"{policy}_x86_64")
    # It says what it left out: the torch libraries cpp_extension linked (libc10 always).
    assert "not bundled" in said and "libc10.so" in said, said
    with zipfile.ZipFile(wheel) as before, zipfile.ZipFile(out) as after:
        old = sorted(n for n in before.namelist() if not n.endswith(("RECORD", "WHEEL")))
        new = sorted(n for n in after.namelist() if not n.endswith(("RECORD", "WHEEL")))
    assert new == old  # nothing bundled: no libtorch*/libc10* (nor anything else) added
    assert not any("libc10" in n or "libtorch" in n for n in new), new
    repaired = repair_wheel(wheel, policy=policy, out_dir=tmp_path / "again")
    assert "libc10.so" in repaired.left_out
    assert all(s.startswith(("libc10", "libtorch")) for s in repaired.left_out), repaired


def test_a_torch_extension_needing_another_library_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHCPU_OPENMP", "1")
    wheel = _build(tmp_path, monkeypatch, "torchcpu-openmp")
    with pytest.raises(VerifyError, match="bundles none") as info:
        repair_wheel(wheel, policy=_host_policy(), out_dir=tmp_path / "out")
    assert "libgomp.so.1" in info.value.evidence
    assert "libc10" not in info.value.evidence and "libtorch" not in info.value.evidence
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
