"""A tree written for CUB before CCCL 3 (tests/fixtures/cub/debugsync; megablocks 0.10.0's
csrc/cumsum.h on the GPU machine): its `cub::Device*` calls pass the trailing
`debug_synchronous` argument that CUDA 13's CCCL removed. The scan finds each call, recipe
init drafts the edit that leaves the argument out, and `flashbuild patch` applies it; CUDA
13's nvcc refuses the pristine file and compiles the patched one. A call whose line repeats
in its file is a TODO, not an edit that would also change the other."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.scanning.findings import ScanOptions, make_target
from flashbuild.scanning.scan import scan_tree

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cub" / "debugsync"


def _nvcc(cuda: Path, source: Path, out: Path) -> subprocess.CompletedProcess[str]:
    # The device pass only (`--ptx`): its front end reads the whole unit, host code too, and
    # resolves the overloads there; the host compile would add 10 s and decide nothing more.
    return subprocess.run([str(cuda / "bin" / "nvcc"), "--ptx", "-arch=sm_90", str(source),
                           "-o", str(out)], capture_output=True, text=True, check=False,
                          timeout=300)


def test_each_call_is_found_where_it_passes_the_argument(tmp_path: Path) -> None:
    result = scan_tree(FIXTURE, make_target("linux", "sm_90a"),
                       ScanOptions(static=True, jobs=1))
    found = sorted((f.path, f.line) for f in result.findings if f.rule == "FB119")
    # The call already without the argument (scan.cu:25) is no finding.
    assert found == [("csrc/scan.cu", 8), ("csrc/scan.cu", 19), ("csrc/twice.cu", 7),
                     ("csrc/twice.cu", 9)]


def test_the_drafted_edit_makes_cuda_13_compile_the_file(tmp_path: Path,
                                                         cuda_toolkit_root: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    draft = tmp_path / "draft.toml"
    runner = CliRunner()
    made = runner.invoke(app, ["recipe", "init", "--source", str(tree), "--platform",
                               "linux", "--arch", "sm_90a", "-o", str(draft)])
    assert made.exit_code == 0, made.output
    text = draft.read_text(encoding="utf-8")
    assert text.count('transform = "replace-block"') == 3
    # The one-line call repeated word for word (twice.cu) is one step that edits both lines.
    assert "# TODO: FB119" not in text

    pristine = (tree / "csrc" / "scan.cu").read_text(encoding="utf-8")
    refused = _nvcc(cuda_toolkit_root, tree / "csrc" / "scan.cu", tmp_path / "a.ptx")
    assert refused.returncode != 0
    assert "no instance of" in refused.stdout + refused.stderr

    patched = runner.invoke(app, ["patch", "--recipe", str(draft), "--source", str(tree),
                                  "--platform", "linux", "--arch", "sm_90a"])
    assert patched.exit_code == 0, patched.output
    now = (tree / "csrc" / "scan.cu").read_text(encoding="utf-8")
    assert now == pristine.replace("stream,\n                                debug_synchronous)",
                                   "stream)").replace("n, stream, false)", "n, stream)")
    built = _nvcc(cuda_toolkit_root, tree / "csrc" / "scan.cu", tmp_path / "b.ptx")
    assert built.returncode == 0, built.stdout + built.stderr
    # twice.cu's two identical lines are both edited, and nothing else of it.
    assert (tree / "csrc" / "twice.cu").read_text(encoding="utf-8") == (
        FIXTURE / "csrc" / "twice.cu").read_text(encoding="utf-8").replace(
        "n, s, true);", "n, s);")
