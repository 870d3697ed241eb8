"""An arch variable that feeds nvcc's `-arch sm_${V}` and also reaches C/C++ as `-DNAME=${V}`
(tests/fixtures/cmake/archdefine; libKMCUDA 6.2.3, whose `#if CUDA_ARCH < 60` GCC refused
with `-DCUDA_ARCH=90a`): scan FB196 finds it for a suffixed target only, recipe init drafts
the step, and with it real CMake and the host compiler build the tree with `CUDA_ARCH=90a`,
giving C/C++ 90 while the arch variable keeps the suffix."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.scanning.findings import ScanOptions, make_target
from flashbuild.scanning.scan import scan_tree

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cmake" / "archdefine"

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("c++") is None,
                                reason="needs cmake and a C++ compiler")


def _configure_and_build(tree: Path, build: Path) -> subprocess.CompletedProcess[str]:
    configure = subprocess.run(["cmake", "-S", str(tree), "-B", str(build), "-DCUDA_ARCH=90a"],
                               capture_output=True, text=True, timeout=300, check=False)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    return subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True,
                          timeout=300, check=False)


def test_a_suffixed_arch_define_is_found_drafted_and_then_builds(tmp_path: Path) -> None:
    def rules(arch: str) -> list[tuple[str, int]]:
        found = scan_tree(FIXTURE, make_target("linux", arch), ScanOptions(static=True, jobs=1))
        return [(f.rule, f.line) for f in found.findings if f.rule == "FB196"]

    assert rules("sm_90a") == [("FB196", 9)]
    assert rules("sm_90") == []  # a number stays a number: nothing to say
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    failed = _configure_and_build(tree, tmp_path / "pristine")
    assert failed.returncode != 0
    assert "user-defined literal in preprocessor expression" in failed.stdout + failed.stderr
    draft = tmp_path / "draft.toml"
    runner = CliRunner()
    made = runner.invoke(app, ["recipe", "init", "--source", str(tree), "--platform", "linux",
                               "--arch", "sm_90a", "--static", "-o", str(draft)])
    assert made.exit_code == 0, made.output
    assert "arch-number-for-cuda-arch" in draft.read_text(encoding="utf-8")
    done = runner.invoke(app, ["patch", "--recipe", str(draft), "--source", str(tree),
                               "--platform", "linux", "--arch", "sm_90a"])
    assert done.exit_code == 0, done.output
    built = _configure_and_build(tree, tmp_path / "patched")
    assert built.returncode == 0, built.stdout + built.stderr
    library = next((tmp_path / "patched").glob("libarchdefine.*"))
    # C/C++ got the number, and its `#if CUDA_ARCH < 60` took the >= 60 branch.
    assert ctypes.CDLL(str(library)).archdefine_arch() == 901
    cache = (tmp_path / "patched" / "CMakeCache.txt").read_text(encoding="utf-8")
    assert "CUDA_ARCH:UNINITIALIZED=90a" in cache
