"""Render a VerifyReport for people (Rich) — JSON goes through `ui.emit_json`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from flashbuild.arch import parse_arch
from flashbuild.console import clip
from flashbuild.errors import FlashbuildError
from flashbuild.verifying.verify import Status, VerifyReport

if TYPE_CHECKING:
    from rich.console import Console

_STYLE = {Status.OK: "[green]ok[/]", Status.WARN: "[yellow]warn[/]",
          Status.FAIL: "[bold red]FAIL[/]", Status.SKIP: "[dim]skip[/]"}


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
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("", no_wrap=True)
    table.add_column("area", no_wrap=True)
    # A subject is a file name: never broken in the middle (overflow="fold" would).
    table.add_column("subject", no_wrap=True, overflow="ignore")
    table.add_column("result", overflow="fold")
    for check in report.checks:
        detail = escape(check.summary)
        if check.evidence and check.status in (Status.WARN, Status.FAIL):
            detail += f"\n[dim]{escape(clip(check.evidence, 600, keep='end'))}[/]"
        if check.fix and check.status in (Status.WARN, Status.FAIL):
            detail += f"\n[bold]fix:[/] {escape(check.fix)}"
        table.add_row(_STYLE[check.status], check.area, escape(check.subject), detail)
    console.print(table)
    fails, warns = len(report.failures), len(report.warnings)
    if report.ok:
        console.print(f"[bold green]verified[/] ({warns} warning(s))")
    else:
        console.print(f"[bold red]{fails} check(s) failed[/], {warns} warning(s)")
