"""Scan output for people (a Rich report grouped by category) and for machines (`--json`).

JSON document (`schema_version` 1, added by `ui.emit_json`), documented keys:

- `root`, `platform`, `archs` (`["sm_120"]`), `files_scanned`, `seconds`;
- `counts`: `{"error": n, "warning": n, "note": n}`; `blocking`: true when any error exists;
- `findings`: list of `{rule, name, category, path, line, col, severity, message, evidence,
  snippet, fix: {transform, params, manual}}`;
- `skipped`: list of `{path, reason}` (binary, non-UTF-8, oversized, unreadable, loops);
- `kernels`: per arch, `{arch, kernels, placeholders, verdict}`: the `__global__` definitions
  of the compiled files, how many of them only trap there (FB154 warnings kept), and the
  report's verdict line for that arch.

The human report opens with that verdict line per arch ("kernels for sm_120: none - every
kernel gated to sm_90/sm_100") and a table of the findings by category and severity.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from flashbuild import platforms
from flashbuild.console import VERDICTS, Column, clip, lit, plural, render_table, ui, wrap
from flashbuild.errors import BlockingFindings, UsageError
from flashbuild.outputs import refuse_over_tree
from flashbuild.scanning.facts import PlaceholderFacts
from flashbuild.scanning.findings import (
    Finding,
    KernelCount,
    ScanOptions,
    ScanResult,
    ScanTarget,
    Severity,
    make_target,
)
from flashbuild.scanning.rules import RULES
from flashbuild.scanning.scan import scan_tree

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from rich.console import Console

    from flashbuild.arch import Arch

#: The JSON schema of `scan --json` (a test validates real output against it).
SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "scan-report.schema.json"

#: The verdict words doctor and verify use too (console.VERDICTS).
_WORD = {Severity.ERROR: "error", Severity.WARNING: "warn", Severity.NOTE: "note"}


def to_json(result: ScanResult) -> dict[str, Any]:
    return {
        "root": str(result.root),
        "platform": result.target.platform,
        "archs": [a.sm for a in result.target.archs],
        "files_scanned": result.files_scanned,
        "seconds": round(result.seconds, 3),
        "counts": result.counts(),
        "blocking": bool(result.blocking),
        "truth": result.truth,
        "recipe": None if result.recipe is None else {
            "name": result.recipe.name, "why": result.recipe.why, "steps": result.recipe.steps,
            "unplanned": list(result.recipe.unplanned)},
        "findings": [finding_json(f) for f in result.findings],
        "skipped": [{"path": s.path, "reason": s.reason} for s in result.skipped],
        "kernels": [{"arch": count.arch.sm, "kernels": count.kernels,
                     "placeholders": len(_placeholders(result, count.arch)),
                     "verdict": kernel_verdict(result, count)} for count in result.kernels],
    }


def _placeholders(result: ScanResult, arch: Arch) -> list[Finding]:
    """The FB154 kernel warnings for `arch` the scan kept (the preprocessor can clear some)."""
    return [f for f in result.findings if f.rule == "FB154" and f.severity is Severity.WARNING
            and isinstance(f.facts, PlaceholderFacts) and f.facts.kernel and f.facts.arch == arch]


def _gated_to(findings: Sequence[Finding]) -> str:
    """`sm_90/sm_100`: the first arch of each generation the placeholders' work is written
    for (an sm_100/sm_103/sm_110 list reads as its generations)."""
    first: dict[int, int] = {}
    for f in findings:
        assert isinstance(f.facts, PlaceholderFacts)
        for sm in f.facts.written_for:
            code = int(sm.removeprefix("sm_").rstrip("af"))
            first[code // 10] = min(first.get(code // 10, code), code)
    return "/".join(f"sm_{code}" for _major, code in sorted(first.items()))


def kernel_verdict(result: ScanResult, count: KernelCount) -> str:
    """One line: how many of the kernels the build compiles hold work for the arch, e.g.
    `kernels for sm_120: none - every kernel gated to sm_90/sm_100` or `kernels for sm_120:
    31 of 40 compiled, 9 trap (gated to sm_90)`."""
    sm = count.arch.sm
    dead = _placeholders(result, count.arch)
    if count.kernels == 0:
        return f"kernels for {sm}: no __global__ kernel in the files the build compiles"
    gated = _gated_to(dead)
    if len(dead) >= count.kernels:
        return f"kernels for {sm}: none - every kernel gated to {gated}"
    line = f"kernels for {sm}: {count.kernels - len(dead)} of {count.kernels} compiled"
    if dead:
        line += f", {len(dead)} trap{'s' if len(dead) == 1 else ''} (gated to {gated})"
    return line


#: The columns of the findings table: a category, then a count per severity.
_TABLE_COLUMNS = [Column("category", key=True),
                  *(Column(s.value, key=True, justify="right") for s in Severity),
                  Column("total", key=True, justify="right")]


def category_rows(findings: Sequence[Finding]) -> list[list[str]]:
    """The findings table: one row per category with findings (most errors first), a count
    per severity, and a total row."""
    counts: dict[str, dict[Severity, int]] = {}
    for f in findings:
        row = counts.setdefault(f.category.value, dict.fromkeys(Severity, 0))
        row[f.severity] += 1
    order = sorted(counts, key=lambda c: (*(-counts[c][s] for s in Severity), c))
    rows = [[category, *(str(counts[category][s]) for s in Severity),
             str(sum(counts[category].values()))] for category in order]
    if rows:
        rows.append(["total", *(str(sum(1 for f in findings if f.severity is s))
                                for s in Severity), str(len(findings))])
    return rows


def finding_json(f: Finding) -> dict[str, Any]:
    return {
        "rule": f.rule, "name": RULES[f.rule].name, "category": f.category.value,
        "path": f.path, "line": f.line, "col": f.col, "severity": f.severity.value,
        "message": f.message, "evidence": f.evidence, "snippet": f.snippet,
        "truth": f.truth.value,
        "fix": {"transform": f.fix.transform, "params": f.fix.params, "manual": f.fix.manual},
        "handled": f.handled or None, "handled_step": f.handled_step or None,
    }


def group_findings(findings: Sequence[Finding]) -> list[list[Finding]]:
    """Findings of one rule in one file, together, in file order (the first one stands for
    the group); groups ordered by severity, then path."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in sorted(findings, key=Finding.sort_key):
        groups.setdefault((f.path, f.rule), []).append(f)
    rank = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.NOTE: 2}
    return sorted(groups.values(), key=lambda g: (rank[g[0].severity], g[0].sort_key()))


def _wrapped(console: Console, label: str, text: str, *, style: str = "dim",
             label_style: str | None = None, indent: str | None = None) -> None:
    """`label` and `text` wrapped between words at the console's width (a path or a flag is
    never split), the lines after the first indented (under the label by default)."""
    lines = wrap(label + text, console.width,
                 indent=" " * len(label) if indent is None else indent)
    _line(console, (label, style if label_style is None else label_style),
          (lines[0][len(label):], style))
    for more in lines[1:]:
        _line(console, (more, style))


def _line(console: Console, *parts: tuple[str, str]) -> None:
    """One line of literal text (no markup, no highlighting) that never wraps: a path stays
    whole for terminals and editors that jump to `file:line:col`."""
    console.print(Text.assemble(*parts), soft_wrap=True, highlight=False)


def print_summary(result: ScanResult, console: Console) -> None:
    """The top of the report: what was scanned, the answer (what the target gets), how many
    findings of which kind, and what decided the gates."""
    _wrapped(console, "flashbuild scan ", f"{result.root} for {result.target.label}: "
             f"{result.files_scanned} files in {result.seconds:.2f} s", style="",
             label_style="bold", indent="  ")
    for count in result.kernels:
        for text in wrap(kernel_verdict(result, count), console.width, indent="  "):
            _line(console, (text, "bold"))
    render_table(console, "findings by category", _TABLE_COLUMNS, category_rows(result.findings))
    if result.truth:
        _wrapped(console, "gates: ", result.truth)


def print_report(result: ScanResult, console: Console) -> None:
    counts = result.counts()
    print_summary(result, console)
    groups = group_findings(result.findings)
    shown = [g for g in groups if g[0].severity is not Severity.NOTE]
    for group in shown:
        f = group[0]
        _line(console, ("", ""))
        _line(console, (f"{f.path}:{f.line}:{f.col}", "bold"), (": ", ""),
              (_WORD[f.severity], VERDICTS[_WORD[f.severity]]),
              (f" {f.rule} [{f.category.value}] ", ""),
              (f.message, ""))
        if f.snippet:
            _line(console, ("    | ", "dim"), (clip(f.snippet, 160), "dim"))
        _line(console, ("    evidence: ", "dim"), (f.evidence, ""),
              (f" [{f.truth.value}]", "dim"))
        _line(console, ("    fix: ", "dim"), (f.fix.describe(), ""))
        if f.handled:
            _line(console, ("    handled by build: ", "dim"), (f.handled, ""))
        if len(group) > 1:
            lines = ", ".join(str(g.line) for g in group[1:12])
            more = f" and {len(group) - 12} more" if len(group) > 12 else ""
            _line(console, (f"    also {f.rule} in this file at lines {lines}{more}", "dim"))
    notes = [g for g in groups if g[0].severity is Severity.NOTE]
    if notes:
        by_rule: dict[str, list[Finding]] = {}
        for g in notes:
            by_rule.setdefault(g[0].rule, []).extend(g)
        _line(console, ("", ""))
        _line(console, (f"notes ({counts['note']}, collapsed; --json lists each)", "bold"))
        for rule, items in sorted(by_rule.items()):
            first = items[0]
            files = len({i.path for i in items})
            _line(console, (f"  {rule} x{len(items)} in {plural(files, 'file')}: ", "cyan"),
                  (RULES[rule].short, ""), (f" (first: {first.path}:{first.line}:{first.col})",
                                            "dim"))
    if result.skipped:
        _line(console, ("", ""))
        _line(console, (f"not scanned ({len(result.skipped)})", "bold"))
        for sk in result.skipped:
            _line(console, ("  ", ""), (sk.path, ""), (f": {sk.reason}", "dim"))
    _line(console, ("", ""))
    for text in closing_lines(result):
        _line(console, (text, ""))


def bundled_lines(result: ScanResult) -> list[str]:
    """The bundled recipe that matches the tree (`result.recipe`): why, which findings its
    steps fix, the commands that use it; and how many findings the build does by itself.
    The same lines end `scan` and `recipe init` on such a tree."""
    root, t = result.root, result.target
    arch = ";".join(a.sm for a in t.archs)
    lines = []
    by_build = [f for f in result.findings if f.handled and not f.handled_step]
    if result.recipe is not None:
        r = result.recipe
        fixed = [f for f in result.findings if f.handled_step]
        rules = ", ".join(f"{rule} x{n}" for rule, n in sorted(
            {f.rule: sum(g.rule == f.rule for g in fixed) for f in fixed}.items()))
        lines += [f"bundled recipe `{r.name}` matches this tree: {r.why}",
                  (f"  {plural(r.steps, 'step')} for {t.label}; they edit the lines of "
                   f"{plural(len(fixed), 'finding')}" + (f" ({rules})" if rules else ""))
                  if r.steps else f"  no step of it applies to {t.label}",
                  *([f"  {plural(len(r.unplanned), 'step')} of it do not apply to this tree "
                     f"(build and patch stop there, exit 5); first: {r.unplanned[0]}"]
                    if r.unplanned else []),
                  f"  uses it: flashbuild build {root} --arch {arch}",
                  f"  applies its steps: flashbuild patch {root} --platform {t.platform} "
                  f"--arch {arch}",
                  f"  lists them: flashbuild recipe show {r.name}"]
    if by_build:
        lines.append(f"{plural(len(by_build), 'finding')} handled by `flashbuild build` "
                     "itself (no step, no error)")
    return lines


def closing_lines(result: ScanResult) -> list[str]:
    """The end of the report: the bundled recipe that matches the tree (what it fixes, the
    commands that use it), what the build does by itself, the counts, and what `recipe init`
    would really draft (issue 28: no promise of fixes it does not draft)."""
    from flashbuild.scanning.draft import draft_recipe  # noqa: PLC0415  # cycle

    counts = result.counts()
    root = result.root
    lines = bundled_lines(result)
    summary = (f"{plural(counts['error'], 'error')}, {plural(counts['warning'], 'warning')}, "
               f"{plural(counts['note'], 'note')}")
    if counts["error"]:
        summary += " - errors fail the build without a change (exit code 11)"
    lines.append(summary)
    if result.recipe is None and (counts["error"] or counts["warning"]):
        drafted = draft_recipe(result, name="tree", source_path=".")
        if drafted.steps:
            lines.append(f"`flashbuild recipe init --source {root}` drafts "
                         f"{plural(len(drafted.steps), 'patch step')} and "
                         f"{plural(len(drafted.todos), 'TODO')} from these findings")
        else:
            lines.append(f"`flashbuild recipe init` has no step to draft for these "
                         f"({plural(len(drafted.todos), 'TODO')} for a person): each fix "
                         "above says what to do")
    return lines


def resolve_platform(platform: str | None) -> str:
    if platform is not None:
        return platform
    return platforms.current().name


def run_scan(source: Path, *, platform: str | None, arch: str, as_json: bool,
             sarif: Path | None, include_vendored: bool = False, jobs: int | None = None,
             force: bool = False, static: bool = False, compile_units: bool = False,
             scanner: Callable[[Path, ScanTarget, ScanOptions], ScanResult] | None = None
             ) -> int:
    """The `scan` stage: scan, print (Rich or JSON), write SARIF; the exit code says whether
    blocking findings exist (0 none, 11 some). `scanner`: what scans (the pipeline's, which
    asks the build first); default `scan_tree`, which reads the text."""

    from flashbuild.scanning.sarif import to_sarif  # noqa: PLC0415  # start-up
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be 1 or more", fix="pass e.g. --jobs 2, or leave it out")
    if sarif is not None:
        refuse_over_tree(sarif, source, option="--sarif", force=force)
    target = make_target(resolve_platform(platform), arch)
    if static and compile_units:
        raise UsageError("--static and --compile contradict each other",
                         fix="--static runs nothing; leave out one of them")
    result = (scanner or scan_tree)(source, target, ScanOptions(
        include_vendored=include_vendored, jobs=jobs, static=static,
        compile="always" if compile_units else "auto"))
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
