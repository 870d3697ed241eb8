"""Render a VerifyReport for people (Rich) — JSON goes through `ui.emit_json`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from flashbuild.arch import parse_arch
from flashbuild.console import VERDICTS, clip, plural
from flashbuild.errors import FlashbuildError
from flashbuild.verifying.verify import Status, VerifyReport

if TYPE_CHECKING:
    from rich.console import Console

_WORD = {Status.OK: "ok", Status.WARN: "warn", Status.FAIL: "error", Status.SKIP: "skip"}


def user_targets(cmake: str) -> str:
    """The targets as a user types them (`sm_90a, sm_120+PTX`), not CMake's `90a-real;120`
    that the report carries (a bare CMake arch is SASS and PTX); the CMake text itself when
    it cannot be read back."""
    images: dict[str, set[str]] = {}
    try:
        for token in filter(None, (t.strip() for t in cmake.split(";"))):
            code, _, kind = token.partition("-")
            sm = parse_arch(code).arch.sm
            images.setdefault(sm, set()).update(
                {"real": {"sass"}, "virtual": {"ptx"}}.get(kind, {"sass", "ptx"}))
    except FlashbuildError:
        return cmake
    words = [sm + "+PTX" if kinds == {"sass", "ptx"} else
             sm if kinds == {"sass"} else "compute_" + sm.removeprefix("sm_")
             for sm, kinds in images.items()]
    return ", ".join(words) or cmake


def render(report: VerifyReport, console: Console) -> None:
    where = report.manifest_path or report.subject
    console.print(f"[bold]flashbuild verify[/] {escape(report.package)} "
                  f"[dim]({escape(report.subject_kind)} {escape(str(where))}; targets "
                  f"{escape(user_targets(report.targets))}"
                  f"{'' if report.strict_arch else '; --no-strict-arch'})[/]")
    for proof in report.binaries:
        # A linked module holds one container per object: each image name is shown once.
        compressed = {str(i["arch"]) for i in report.images.get(proof.subject, [])
                      if i["compressed"]}
        names = ", ".join(n + ("*" if n in compressed else "")
                          for n in (*proof.sass, *proof.ptx))
        line = f"  {escape(proof.subject)}: " + (
            escape(names) if names else "unreadable" if not proof.readable else "no GPU code")
        if proof.extra:
            line += (f"  [bold {'red' if report.strict_arch else 'yellow'}]extra: "
                     f"{escape(', '.join(proof.extra))}[/]")
        if proof.missing and proof.readable:
            line += f"  [bold red]missing: {escape(', '.join(proof.missing))}[/]"
        if compressed:
            line += " [dim](* = compressed)[/]"
        console.print(line)
    # One line per check, not a table: a table squeezes its columns to the terminal's width,
    # and a long file name then pushed the status and the result out of an 80-column pipe.
    # Lines are printed whole (soft wrap), so a path is never broken in the middle.
    for check in report.checks:
        word = _WORD[check.status]
        console.print(f"  [{VERDICTS[word]}]{word:<5}[/] {escape(check.area):<12} "
                      f"{escape(check.subject)}: {escape(check.summary)}", soft_wrap=True)
        if check.status in (Status.WARN, Status.FAIL):
            if check.evidence:
                for line in clip(check.evidence, 600, keep="end").splitlines():
                    console.print(f"        [dim]{escape(line)}[/]", soft_wrap=True)
            if check.fix:
                console.print(f"        [bold]fix:[/] {escape(check.fix)}", soft_wrap=True)
    fails, warns = len(report.failures), len(report.warnings)
    if report.ok:
        console.print(f"[bold green]verified[/] ({plural(warns, 'warning')})")
    else:
        console.print(f"[bold red]{plural(fails, 'check')} failed[/], "
                      f"{plural(warns, 'warning')}")
