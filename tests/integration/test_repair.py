"""`flashbuild repair` on wheels built here: a binary needing GLIBC_2.38 is refused the
manylinux_2_28 tag, torch/CUDA/driver libraries are never bundled, any other outside library
is a refusal naming it (issue 31, item 2)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from typing import TYPE_CHECKING

import pytest
from wheel.wheelfile import WheelFile

from flashbuild.errors import UsageError, VerifyError
from flashbuild.verifying.abi import policy_for_glibc
from flashbuild.verifying.repair import repair_wheel
from tests.integration.test_verify_abi import _needs_glibc_238

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")]


def _stub(folder: Path, soname: str) -> Path:
    """An empty shared library whose soname is `soname` (what a binary linked to it needs)."""
    src = folder / "empty.c"
    src.write_text("int flashbuild_stub;\n")
    out = folder / soname
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), f"-Wl,-soname,{soname}",
                    str(src)], check=True, timeout=120)
    return out


def _linked(folder: Path, sonames: list[str]) -> Path:
    """A module that needs each of `sonames` (and libc), built with this host's gcc."""
    folder.mkdir(parents=True, exist_ok=True)
    libs = [str(_stub(folder, s)) for s in sonames]
    (folder / "ext.c").write_text("int ext(void) { return 1; }\n")
    out = folder / "ext.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(folder / "ext.c"),
                    "-Wl,--no-as-needed", *libs], check=True, timeout=120)
    return out


def _wheel(folder: Path, binary: Path, tag: str = "cp311-cp311-linux_x86_64") -> Path:
    path = folder / f"pkg-1.0-{tag}.whl"
    with WheelFile(path, "w") as wf:
        wf.write(str(binary), "pkg/ext.so")
        wf.writestr("pkg/__init__.py", "")
        wf.writestr("pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: pkg\n"
                    "Version: 1.0\n")
        wf.writestr("pkg-1.0.dist-info/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\n"
                    f"Root-Is-Purelib: false\nTag: {tag}\n")
    return path


def test_glibc_238_is_refused_the_manylinux_2_28_tag(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, _needs_glibc_238(tmp_path))
    with pytest.raises(VerifyError, match="cannot be tagged manylinux_2_28_x86_64") as info:
        repair_wheel(wheel, policy="manylinux_2_28", out_dir=tmp_path / "out")
    assert "GLIBC_2.38" in info.value.evidence and "GLIBC_2.28" in info.value.evidence
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    # And through the CLI: exit 8, nothing written.
    done = subprocess.run([sys.executable, "-m", "flashbuild", "repair", str(wheel),
                           "--policy", "manylinux_2_28", "-w", str(tmp_path / "cli")],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 8, done.stdout + done.stderr
    assert "GLIBC_2.38" in done.stdout + done.stderr
    assert not list(tmp_path.glob("cli/*.whl"))


def test_torch_cuda_and_the_driver_stay_outside_and_the_tag_is_rewritten(
        tmp_path: Path) -> None:
    binary = _linked(tmp_path / "libs", ["libc10.so", "libtorch_cpu.so", "libcudart.so.13",
                                         "libcuda.so.1", "libcublas.so.13"])
    wheel = _wheel(tmp_path, binary)
    done = repair_wheel(wheel, policy="manylinux_2_17", out_dir=tmp_path / "out")
    assert done.wheel.name == "pkg-1.0-cp311-cp311-manylinux_2_17_x86_64.whl"
    assert done.left_out == ("libc10.so", "libcublas.so.13", "libcuda.so.1", "libcudart.so.13",
                             "libtorch_cpu.so")
    with zipfile.ZipFile(done.wheel) as zf:
        names = zf.namelist()
        wheel_meta = zf.read("pkg-1.0.dist-info/WHEEL").decode()
        record = zf.read("pkg-1.0.dist-info/RECORD").decode()
    # Nothing bundled: the same files, WHEEL retagged, RECORD fresh (hashes of every file).
    assert sorted(n for n in names if not n.endswith("RECORD")) == [
        "pkg-1.0.dist-info/METADATA", "pkg-1.0.dist-info/WHEEL", "pkg/__init__.py",
        "pkg/ext.so"]
    assert "Tag: cp311-cp311-manylinux_2_17_x86_64\n" in wheel_meta
    assert "linux_x86_64" not in wheel_meta.replace("manylinux_2_17_x86_64", "")
    assert "pkg-1.0.dist-info/WHEEL,sha256=" in record and "pkg/ext.so,sha256=" in record


def test_another_outside_library_is_an_error_naming_it_unless_excluded(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, _linked(tmp_path / "libs", ["libgomp.so.1", "libc10.so"]))
    with pytest.raises(VerifyError, match="bundles none") as info:
        repair_wheel(wheel, policy="manylinux_2_28", out_dir=tmp_path / "out")
    assert "libgomp.so.1" in info.value.evidence and "libc10" not in info.value.evidence
    # A requirement of the wheel provides it: --exclude leaves it out on purpose.
    done = subprocess.run([sys.executable, "-m", "flashbuild", "repair", str(wheel),
                           "--policy", "manylinux_2_28", "--exclude", "libgomp.so.*", "--json",
                           "-w", str(tmp_path / "out")],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (out,) = json.loads(done.stdout)["wheels"]
    assert out["platform"] == "manylinux_2_28_x86_64"
    assert out["left_out"] == ["libc10.so", "libgomp.so.1"]


def test_only_linux_platform_wheels(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, _linked(tmp_path / "libs", []), tag="py3-none-any")
    with pytest.raises(UsageError, match="not a Linux platform wheel"):
        repair_wheel(wheel, policy="manylinux_2_28", out_dir=tmp_path / "out")
    with pytest.raises(UsageError, match="unknown manylinux policy"):
        repair_wheel(wheel, policy="manylinux_9_99", out_dir=tmp_path / "out")


def test_libmvec_is_a_system_library_from_manylinux_2_28_on(tmp_path: Path) -> None:
    # auditwheel's policy file lists libmvec.so.1 for manylinux_2_28 and later only.
    wheel = _wheel(tmp_path, _linked(tmp_path / "libs", ["libmvec.so.1"]))
    with pytest.raises(VerifyError, match="bundles none"):
        repair_wheel(wheel, policy="manylinux_2_17", out_dir=tmp_path / "out")
    done = repair_wheel(wheel, policy="manylinux_2_28", out_dir=tmp_path / "out")
    assert done.platform == "manylinux_2_28_x86_64" and done.left_out == ()


def test_a_wheel_linked_on_glibc_239_gets_the_policy_that_glibc_allows(tmp_path: Path) -> None:
    # Ubuntu 24.04 (glibc 2.39: ubuntu-24.04 runners, the project's GPU machines) links
    # __isoc23_strtol@GLIBC_2.38 into ordinary C/C++ code. manylinux_2_34 was the newest policy
    # flashbuild knew, so a wheel built there had no policy at all: policy_for_glibc("2.39")
    # named manylinux_2_34, whose repair refused GLIBC_2.38 (the leg script on the GPU machine,
    # 2026-11-28). auditwheel's manylinux_2_39 is the one that glibc allows.
    names = [getattr(policy_for_glibc(g), "name", None) for g in ("2.36", "2.39")]
    assert names == ["manylinux_2_34", "manylinux_2_39"]
    wheel = _wheel(tmp_path, _needs_glibc_238(tmp_path))
    with pytest.raises(VerifyError, match="cannot be tagged manylinux_2_34_x86_64") as info:
        repair_wheel(wheel, policy="manylinux_2_34", out_dir=tmp_path / "no")
    assert "GLIBC_2.38" in info.value.evidence
    done = repair_wheel(wheel, policy="manylinux_2_39", out_dir=tmp_path / "out")
    assert done.wheel.name == "pkg-1.0-cp311-cp311-manylinux_2_39_x86_64.whl"
