"""`flashbuild patch --explain` (patching/report.py), issue 28: a summary per step (yes/no,
what it did, one `why` line) that fits 80 columns without splitting an id or a path; every
site, hunk and note only with -v; a dry run's diff as one line per file unless -v or --diff.
The real command on the bundled recipe is tests/integration/test_narrow_output.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.console import ui
from flashbuild.patching.engine import FileDiff, PatchReport, StepReport
from flashbuild.patching.report import EXPLAIN_WIDTH, explain_lines, file_summary
from flashbuild.patching.transforms.base import Site
from flashbuild.patching.unified import HunkReport
from tests.unit.patching_fakes import FIXTURES, fake_transform

__all__ = ["fake_transform"]

LONG_PATH = ("third_party/vendored/cutlass/include/cutlass/gemm/kernel/"
             "sm120_gemm_tma_warpspecialized.hpp")


def _report() -> PatchReport:
    sites = tuple(Site(path=f"kernels/k{i}.cu", line=10 + i, kind="kernel-instantiation",
                       action="edit") for i in range(40))
    kept = Site(path="kernels/norm.cu", line=267, kind="host-instantiation", action="keep",
                note="host template launch_rms_norm is referenced from kernels/fusion.cu:173")
    return PatchReport(
        recipe="demo", tree=Path("/tmp/tree"),
        context={"platform": "windows", "arch": "sm_120"}, dry_run=True,
        files_changed=(), files_written=(), build_excludes=(),
        steps=(
            StepReport(id="msvc-instantiations-with-a-rather-long-step-identifier",
                       description="", kind="transform", matched=True,
                       reason="platform windows is in windows; sm_120 matches >=120,<130; "
                       "cuda 13.0 matches >=12.8; compiler msvc is in msvc, gcc, clang",
                       clauses=(), files=("kernels/k0.cu",), sites=(*sites, kept),
                       notes=(f"added {LONG_PATH} (a header it needs)",)),
            StepReport(id="sm120-allow-list", description="", kind="diff", matched=True,
                       reason="sm_120 matches >=120,<130", clauses=(), files=(LONG_PATH,),
                       hunks=(HunkReport("@@ -19,9 +19,10 @@", "applied", 21, 2, 1),)),
            StepReport(id="hopper-only", description="", kind="transform", matched=False,
                       reason="none of sm_120 matches >=90,<100", clauses=()),
        ))


def test_the_summary_is_two_lines_a_step_within_80_columns() -> None:
    lines = explain_lines(_report())
    assert all(len(line) <= EXPLAIN_WIDTH for line in lines), lines
    assert lines[0] == "recipe demo: which steps apply, and why (2 of 3 steps)"
    heads = [line for line in lines if line.startswith(("yes ", "no  "))]
    assert heads == [
        "yes msvc-instantiations-with-a-rather-long-step-identifier (transform): 1 file,",
        "yes sm120-allow-list (diff): 1 file, 1 hunk",
        "no  hopper-only (transform)"]
    assert "    why: none of sm_120 matches >=90,<100" in lines
    # No site, hunk or note: those are -v's, and the last line says how to get them.
    assert not any("kernels/k1.cu" in line or "launch_rms_norm" in line for line in lines)
    assert lines[-1] == ("(every site, hunk and note, and the diff: `flashbuild -v patch ... "
                         "--explain`)")
    assert len(lines) <= 12


def test_verbose_adds_every_site_hunk_and_note_still_within_80_columns() -> None:
    lines = explain_lines(_report(), verbose=True)
    text = "\n".join(lines)
    assert all(len(line) <= EXPLAIN_WIDTH for line in lines if LONG_PATH not in line)
    assert sum("kernel-instantiation" in line for line in lines) == 40
    assert "      keep kernels/norm.cu:267 host-instantiation: host template" in text
    assert "hunk @@ -19,9 +19,10 @@ applied at line 21, offset 2, fuzz 1" in text
    assert LONG_PATH in text.split(), "a path is never split, even past 80 columns"
    assert "flashbuild -v patch" not in text


def test_a_dry_runs_files_are_one_line_each() -> None:
    diffs = (FileDiff("a.cu", "x\ny\n", "x\nz\nw\n"), FileDiff("new.h", None, "1\n2\n"))
    assert file_summary(diffs) == ["  a.cu  (+2 -1)", "  new.h  (new, +2 -0)"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES / "tree", tmp_path / "tree")
    return tmp_path / "tree"


@pytest.mark.usefixtures("fake_transform")
def test_explain_dry_run_lists_files_and_the_diff_needs_v_or_diff(tree: Path) -> None:
    args = ["patch", "--recipe", str(FIXTURES / "demo.toml"), "--source", str(tree),
            "--platform", "windows", "--arch", "sm120", "--dry-run", "--explain"]
    try:
        out = CliRunner().invoke(app, args).output
        assert "would write:" in out and "+int mul(int a, int b) {" not in out
        assert all(len(line) <= EXPLAIN_WIDTH for line in out.splitlines()
                   if str(tree) not in line), out
        out = CliRunner().invoke(app, [*args, "--diff"]).output
        assert "+int mul(int a, int b) {" in out and "would write:" not in out
        out = CliRunner().invoke(app, ["-v", *args]).output
        assert "+int mul(int a, int b) {" in out
    finally:
        ui.configure(verbose=False)
