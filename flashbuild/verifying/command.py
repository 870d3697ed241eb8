"""The `flashbuild verify` stage function the CLI calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashbuild.arch import parse_arch_spec
from flashbuild.console import ui
from flashbuild.errors import UsageError, VerifyError
from flashbuild.proc import ProcessRunner
from flashbuild.verifying.report import render
from flashbuild.verifying.verify import verify_install

if TYPE_CHECKING:
    from pathlib import Path


def run_verify(*, path: Path | None, package: str | None, arch: str | None, as_json: bool,
               bench: bool, gpu: bool | None, strict_arch: bool = True,
               recipe: str | None = None, allow_placeholders: bool = False,
               policy: str | None = None) -> int:
    """Verify, print the report, return the exit code (0, or VerifyError's 8). `recipe`
    supplies the `[verify]` expectations (exports, kernels, dynamic_smem) for a binary built
    without flashbuild; they replace the manifest's. Its `[install] top_level` says which
    exports are looked up on a top-level module."""
    if path is not None and package is not None:
        raise UsageError("PATH and --package name two different things to verify",
                         evidence=f"PATH {path}, --package {package}",
                         fix="pass one of them: a file, folder or wheel, or an installed "
                         "package")
    exports = kernels = dynamic_smem = None
    top_level: tuple[str, ...] = ()
    if recipe is not None:
        from flashbuild.recipes.load import load_recipe  # noqa: PLC0415  # start-up

        loaded = load_recipe(recipe)
        table = loaded.verify
        exports, kernels, dynamic_smem = table.exports, table.kernels, table.dynamic_smem
        top_level = loaded.install.top_level if loaded.install is not None else ()
    report = verify_install(
        path=path, package=package,
        targets=parse_arch_spec(arch) if arch else None, strict_arch=strict_arch,
        allow_placeholders=allow_placeholders,
        exports=exports, kernels=kernels, dynamic_smem=dynamic_smem, top_level=top_level,
        run_gpu=gpu, bench=bench, runner=ProcessRunner(echo=ui.command), policy=policy)
    if as_json:
        ui.emit_json(report.to_json())
    else:
        render(report, ui.human)
    return 0 if report.ok else VerifyError.exit_code


def run_repair(*, wheels: list[Path], policy: str, out_dir: Path | None,
               exclude: list[str], as_json: bool) -> int:
    """Retag each wheel for `policy` (flashbuild.verifying.repair), print where it went."""
    from flashbuild.verifying.repair import repair_wheel  # noqa: PLC0415  # start-up

    done = [repair_wheel(w, policy=policy, out_dir=out_dir or w.parent, exclude=exclude)
            for w in wheels]
    if as_json:
        ui.emit_json({"ok": True, "wheels": [
            {"source": str(r.source), "wheel": str(r.wheel), "platform": r.platform,
             "left_out": list(r.left_out)} for r in done]})
        return 0
    for r in done:
        ui.say(f"{r.source.name} -> {r.wheel}")
        if r.left_out:
            ui.say_wrapped(f"  not bundled (torch, CUDA, the driver or --exclude provide "
                           f"them): {', '.join(r.left_out)}")
    return 0
