"""torch's AT_DISPATCH macros given `tensor.type()` (tests/fixtures/torchapi/dispatchtype;
Deformable-DETR's ms_deform_attn_cuda.cu, which nvcc refused against torch 2.14 with "no
suitable conversion function from \"const at::DeprecatedTypeProperties\" to
\"c10::ScalarType\""): the scan finds the calls in code, recipe init drafts one edit for the
identical lines, and `flashbuild patch` leaves only `scalar_type()`."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.scanning.findings import ScanOptions, make_target
from flashbuild.scanning.scan import scan_tree

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchapi" / "dispatchtype"


def test_dispatch_on_type_is_found_and_drafted_as_scalar_type(tmp_path: Path) -> None:
    result = scan_tree(FIXTURE, make_target("linux", "sm_90a"),
                       ScanOptions(static=True, jobs=1))
    assert sorted(f.line for f in result.findings if f.rule == "FB124") == [12, 19]
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    draft = tmp_path / "draft.toml"
    runner = CliRunner()
    made = runner.invoke(app, ["recipe", "init", "--source", str(tree), "--platform", "linux",
                               "--arch", "sm_90a", "-o", str(draft)])
    assert made.exit_code == 0, made.output
    # The two identical lines are one step, which the plan expects to edit twice.
    assert draft.read_text(encoding="utf-8").count('transform = "replace-block"') == 1
    done = runner.invoke(app, ["patch", "--recipe", str(draft), "--source", str(tree),
                               "--platform", "linux", "--arch", "sm_90a"])
    assert done.exit_code == 0, done.output
    text = (tree / "src" / "op_cuda.cu").read_text(encoding="utf-8")
    assert text.count("AT_DISPATCH_FLOATING_TYPES(value.scalar_type()") == 3
    assert "// AT_DISPATCH_FLOATING_TYPES(value.type(), ...) in a comment" in text
