"""Scan output for people (a Rich report grouped by category) and for machines (`--json`).

JSON document (`schema_version` 1, added by `ui.emit_json`), documented keys:

- `root`, `platform`, `archs` (`["sm_120"]`), `files_scanned`, `seconds`;
- `counts`: `{"error": n, "warning": n, "note": n}`; `blocking`: true when any error exists;
- `findings`: list of `{rule, name, category, path, line, col, severity, message, evidence,
  snippet, fix: {transform, params, manual}}`;
- `skipped`: list of `{path, reason}` (binary, non-UTF-8, oversized, unreadable, loops).
"""

from __future__ import annotations

from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from flashbuild.console import clip
from flashbuild.scanning.rules import RULES
from flashbuild.scanning.scan import Finding, ScanResult, Severity

if TYPE_CHECKING:
    from rich.console import Console

#: The JSON schema of `scan --json` (a test validates real output against it).
SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "scan-report.schema.json"

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.NOTE: "cyan"}


def to_json(result: ScanResult) -> dict[str, Any]:
    return {
        "root": str(result.root),
        "platform": result.target.platform,
        "archs": [a.sm for a in result.target.archs],
        "files_scanned": result.files_scanned,
        "seconds": round(result.seconds, 3),
        "counts": result.counts(),
        "blocking": bool(result.blocking),
        "findings": [finding_json(f) for f in result.findings],
        "skipped": [{"path": s.path, "reason": s.reason} for s in result.skipped],
    }


def finding_json(f: Finding) -> dict[str, Any]:
    return {
        "rule": f.rule, "name": RULES[f.rule].name, "category": f.category.value,
        "path": f.path, "line": f.line, "col": f.col, "severity": f.severity.value,
        "message": f.message, "evidence": f.evidence, "snippet": f.snippet,
        "fix": {"transform": f.fix.transform, "params": f.fix.params, "manual": f.fix.manual},
    }


def print_report(result: ScanResult, console: Console) -> None:
    counts = result.counts()
    console.print(f"[bold]flashbuild scan[/] {escape(str(result.root))} for "
                  f"{escape(result.target.label)}: {result.files_scanned} files in "
                  f"{result.seconds:.2f} s")
    findings = sorted(result.findings, key=lambda f: (f.category.value, f.sort_key()))
    for category, items in groupby(findings, key=lambda f: f.category):
        group = list(items)
        console.print(f"\n[bold underline]{category.value}[/] ({len(group)})")
        for f in group:
            style = _STYLE[f.severity]
            console.print(f"  [{style}]{f.severity.value:7}[/] {f.rule} "
                          f"[bold]{escape(f.path)}:{f.line}:{f.col}[/] {escape(f.message)}")
            if f.snippet:
                console.print(f"           [dim]│ {escape(clip(f.snippet, 120))}[/]")
            console.print(f"           [dim]evidence:[/] {escape(f.evidence)}")
            console.print(f"           [dim]fix:[/] {escape(f.fix.describe())}")
    if result.skipped:
        console.print(f"\n[bold underline]skipped[/] ({len(result.skipped)})")
        for s in result.skipped:
            console.print(f"  [dim]note[/]    {escape(s.path)}: {escape(s.reason)}")
    console.print(f"\n{counts['error']} error(s), {counts['warning']} warning(s), "
                  f"{counts['note']} note(s)" + (
                      " — errors block the build (exit code 11); `flashbuild recipe init` "
                      "drafts the fixes" if counts["error"] else ""))


def resolve_platform(platform: str | None) -> str:
    if platform is not None:
        return platform
    from flashbuild import platforms

    return platforms.current().name


def run_scan(source: Path, *, platform: str | None, arch: str, as_json: bool,
             sarif: Path | None, include_vendored: bool = False, jobs: int | None = None) -> int:
    """The `scan` stage: scan, print (Rich or JSON), write SARIF; the exit code says whether
    blocking findings exist (0 none, 11 some)."""
    import json

    from flashbuild.console import lit, ui
    from flashbuild.errors import BlockingFindings, UsageError
    from flashbuild.scanning.sarif import to_sarif
    from flashbuild.scanning.scan import ScanOptions, make_target, scan_tree

    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be 1 or more", fix="pass e.g. --jobs 2, or leave it out")
    target = make_target(resolve_platform(platform), arch)
    result = scan_tree(source, target, ScanOptions(include_vendored=include_vendored, jobs=jobs))
    if sarif is not None:
        try:
            sarif.write_text(json.dumps(to_sarif(result), indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write the SARIF file {sarif}: {exc.strerror or exc}",
                             fix="pass a writable path to --sarif") from exc
    if as_json:
        ui.emit_json({"ok": not result.blocking, **to_json(result)})
    else:
        print_report(result, ui.human)
        if sarif is not None:
            ui.step(f"wrote SARIF 2.1.0 to {lit(sarif)}")
    return BlockingFindings.exit_code if result.blocking else 0
