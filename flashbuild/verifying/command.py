"""The `flashbuild verify` stage function the CLI calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashbuild.arch import parse_arch_spec
from flashbuild.console import ui
from flashbuild.errors import VerifyError
from flashbuild.proc import ProcessRunner
from flashbuild.verifying.report import render
from flashbuild.verifying.verify import verify_install

if TYPE_CHECKING:
    from pathlib import Path


def run_verify(*, path: Path | None, package: str | None, arch: str | None, as_json: bool,
               bench: bool, gpu: bool | None) -> int:
    """Verify, print the report, return the exit code (0, or VerifyError's 8)."""
    report = verify_install(
        manifest_path=path, package=package,
        targets=parse_arch_spec(arch) if arch else None,
        run_gpu=gpu, bench=bench, runner=ProcessRunner(echo=ui.command))
    if as_json:
        ui.emit_json(report.to_json())
    else:
        render(report, ui.human)
    return 0 if report.ok else VerifyError.exit_code
