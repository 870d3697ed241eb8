"""The `flashbuild patch` stage function and the rendering of its results (Rich / JSON).

The CLI only parses options and calls `run_patch`."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.text import Text

from flashbuild.console import Column, plural, ui
from flashbuild.recipes.when import make_context

if TYPE_CHECKING:
    from pathlib import Path

    from flashbuild.patching.engine import FileDiff, PatchReport, RevertReport


def unified_text(diffs: tuple[FileDiff, ...]) -> str:
    """One unified diff (LF-normalised for display) of every file."""
    out: list[str] = []
    for d in diffs:
        before = (d.before or "").replace("\r\n", "\n").splitlines(keepends=True)
        after = (d.after or "").replace("\r\n", "\n").splitlines(keepends=True)
        out.extend(difflib.unified_diff(
            before, after, f"a/{d.path}" if d.before is not None else "/dev/null",
            f"b/{d.path}" if d.after is not None else "/dev/null"))
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
    return "".join(out)


def print_diff(diffs: tuple[FileDiff, ...]) -> None:
    for line in unified_text(diffs).splitlines():
        style = ("bold" if line.startswith(("---", "+++")) else
                 "cyan" if line.startswith("@@") else
                 "green" if line.startswith("+") else
                 "red" if line.startswith("-") else "")
        ui.human.print(Text(line, style=style), soft_wrap=True)


def explain_rows(report: PatchReport) -> list[list[str]]:
    """One row per step: id, kind, whether it applies, why, and what it did."""
    rows = []
    for s in report.steps:
        edits = sum(1 for x in s.sites if x.action == "edit")
        already = sum(1 for x in s.sites if x.action in ("already",))
        kept = sum(1 for x in s.sites if x.action == "keep")
        result = ", ".join(filter(None, [
            plural(len(s.files), "file") if s.files else "",
            f"{edits} edited" if edits else "", f"{already} already" if already else "",
            f"{kept} kept" if kept else "",
            plural(len(s.hunks), "hunk") if s.hunks else "",
            f"excludes {', '.join(s.build_excludes)}" if s.build_excludes else ""]))
        rows.append([s.id, s.kind, "yes" if s.matched else "no", s.reason,
                     result if s.matched else ""])
    return rows


def print_patch(report: PatchReport, *, explain: bool, show_diff: bool) -> None:
    ctx = report.context
    ui.step(f"recipe [bold]{escape(report.recipe)}[/] on {escape(str(report.tree))} "
            f"(platform {ctx['platform']}, arch {ctx['arch'] or 'none'})")
    for note in report.notes:
        ui.info(f"  [dim]{escape(note)}[/]")
    if explain:
        ui.table(f"recipe {report.recipe}: which steps apply, and why",
                 [Column("step", key=True), Column("kind"), Column("applies"), Column("why"),
                  Column("result")], explain_rows(report))
    _print_step_notes(report)
    _print_rest(report, show_diff)


def _print_step_notes(report: PatchReport) -> None:
    for s in report.steps:
        if not s.matched:
            continue
        for note in s.notes:
            ui.paragraph(f"{s.id}: {note}", style="dim")
        for site in s.sites:
            if site.action == "keep":
                # The site first and whole (an editor jumps to path:line), the reason wrapped.
                ui.paragraph(f"kept {site.path}:{site.line} {site.kind}: {site.note}")


def _print_rest(report: PatchReport, show_diff: bool) -> None:
    if report.dry_run:
        print_diff(report.pending)
        ui.step(f"dry run: {plural(len(report.files_written), 'file')} would be written, nothing "
                "was changed")
    else:
        if show_diff:
            print_diff(report.diffs)
        applied = sum(1 for s in report.steps if s.matched)
        if not applied and not report.files_changed:
            ui.step("no step applies to this target: the tree is as the recipe found it" +
                    (f" (restored {plural(len(report.files_written), 'file')})"
                     if report.files_written else ""))
        elif report.files_written:
            ui.step(f"applied {plural(applied, 'step')}: wrote "
                    f"{plural(len(report.files_written), 'file')}; "
                    f"{len(report.files_changed)} differ from the original tree")
        else:
            ui.step(f"applied {plural(applied, 'step')}: the tree was already patched for "
                    "this plan, no file rewritten")
    if report.build_excludes:
        ui.info("  build excludes: " + escape(", ".join(report.build_excludes)))


def print_revert(report: RevertReport) -> None:
    for note in report.notes:
        ui.info(f"  [dim]{escape(note)}[/]")
    if not report.had_state:
        ui.step(f"nothing to revert: {escape(str(report.tree))} has no flashbuild patches")
        return
    if report.dry_run:
        print_diff(report.pending)
        ui.step(f"dry run: revert would restore {plural(len(report.files_restored), 'file')}; "
                "nothing "
                "was changed")
        return
    state = "" if report.was_complete else " (an interrupted run)"
    ui.step(f"reverted{state}: restored {plural(len(report.files_restored), 'file')} byte for "
            "byte "
            "and removed .flashbuild/")


def run_patch(*, recipe: str | None, source: Path | None, platform: str | None,
              arch: str | None, dry_run: bool, diff: bool, explain: bool, revert: bool,
              as_json: bool, discard_edits: bool = False) -> int:
    """The `flashbuild patch` stage: load the recipe, build the context, patch or revert."""
    from flashbuild.patching.engine import patch_tree, revert_tree
    from flashbuild.recipes.load import load_recipe, source_tree

    loaded = load_recipe(recipe or "csrc")
    tree = source_tree(loaded, source)
    if revert:
        reverted = revert_tree(tree, dry_run=dry_run, discard_edits=discard_edits)
        if as_json:
            payload = reverted.to_json()
            if dry_run:
                payload["diff"] = unified_text(reverted.pending)
            ui.emit_json({"ok": True, **payload})
        else:
            print_revert(reverted)
        return 0
    ctx = make_context(platform=platform, arch=arch,
                       gpu_capabilities=_gpu_capabilities() if arch is None else None)
    report = patch_tree(loaded, tree, ctx, dry_run=dry_run, discard_edits=discard_edits)
    if as_json:
        payload = report.to_json()
        if dry_run or diff:
            payload["diff"] = unified_text(report.pending if dry_run else report.diffs)
        ui.emit_json({"ok": True, **payload})
    else:
        print_patch(report, explain=explain, show_diff=diff)
    return 0


def _gpu_capabilities() -> list[tuple[int, int]]:
    """Compute capabilities of this machine's GPUs (detection never raises)."""
    import os

    from flashbuild.detect.gpu import probe_gpus
    from flashbuild.proc import ProcessRunner

    return [g.capability for g in probe_gpus(os.environ, ProcessRunner()).gpus]
