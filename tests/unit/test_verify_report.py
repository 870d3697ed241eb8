"""verify's human report on a narrow pipe: every check keeps its status and result on its own
line, and a long file name is printed whole (a table used to squeeze the status and the result
out of 80 columns once a subject was long)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from flashbuild.verifying.report import render
from flashbuild.verifying.verify import Check, Status, VerifyReport

LONG = "causal_conv1d_cuda.cpython-312-x86_64-linux-gnu.so"


def test_status_subject_and_result_survive_80_columns() -> None:
    report = VerifyReport(
        manifest_path=Path("/site-packages/pkg/flashbuild-manifest.json"), package="pkg",
        targets="90a-real", checks=(
            Check(area="images", subject=f"../{LONG}", status=Status.OK,
                  summary="sm_90a SASS present"),
            Check(area="dependencies", subject=f"../{LONG}", status=Status.FAIL,
                  summary="1 of 5 libraries missing", evidence="libcudart.so.13: not found",
                  fix="install the CUDA runtime"),
        ))
    out = io.StringIO()
    render(report, Console(file=out, width=80, color_system=None, emoji=False,
                           highlight=False))
    lines = out.getvalue().splitlines()
    ok = next(line for line in lines if "images" in line and LONG in line)
    assert ok.split()[0] == "ok" and ok.rstrip().endswith("sm_90a SASS present")
    failed = next(line for line in lines if "dependencies" in line)
    assert failed.split()[0] == "error" and f"../{LONG}" in failed
    assert any("libcudart.so.13: not found" in line for line in lines)
    assert any("fix: install the CUDA runtime" in line for line in lines)
