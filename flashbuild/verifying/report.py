"""Render a VerifyReport for people (Rich) — JSON goes through `ui.emit_json`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from flashbuild.verifying.verify import Status, VerifyReport

if TYPE_CHECKING:
    from rich.console import Console

_STYLE = {Status.OK: "[green]ok[/]", Status.WARN: "[yellow]warn[/]",
          Status.FAIL: "[bold red]FAIL[/]", Status.SKIP: "[dim]skip[/]"}


def render(report: VerifyReport, console: Console) -> None:
    console.print(f"[bold]flashbuild verify[/] {escape(report.package)} "
                  f"[dim]({escape(str(report.manifest_path))}; targets {report.targets})[/]")
    for subject, images in report.images.items():
        # A linked module holds one container per object: show each image name once.
        names = ", ".join(dict.fromkeys(
            str(i["arch"]) + ("*" if i["compressed"] else "") for i in images))
        note = " [dim](* = compressed)[/]" if any(i["compressed"] for i in images) else ""
        console.print(f"  {escape(subject)}: {escape(names) or 'no GPU code'}{note}")
    table = Table(show_header=True, header_style="bold", expand=False)
    for column in ("", "area", "subject", "result"):
        table.add_column(column)
    for check in report.checks:
        detail = escape(check.summary)
        if check.evidence and check.status in (Status.WARN, Status.FAIL):
            detail += f"\n[dim]{escape(check.evidence[-600:])}[/]"
        if check.fix and check.status in (Status.WARN, Status.FAIL):
            detail += f"\n[bold]fix:[/] {escape(check.fix)}"
        table.add_row(_STYLE[check.status], check.area, escape(check.subject), detail)
    console.print(table)
    fails, warns = len(report.failures), len(report.warnings)
    if report.ok:
        console.print(f"[bold green]verified[/] ({warns} warning(s))")
    else:
        console.print(f"[bold red]{fails} check(s) failed[/], {warns} warning(s)")
