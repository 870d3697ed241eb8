"""The `flashbuild patch` stage function and the rendering of its results (Rich / JSON).

The pipeline chooses the recipe (pipeline/command.py `run_patch_command`) and calls
`run_patch`."""

from __future__ import annotations

import difflib
import os
import textwrap
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.text import Text

from flashbuild.console import plural, ui
from flashbuild.detect.gpu import probe_gpus
from flashbuild.patching.engine import patch_tree, revert_tree
from flashbuild.proc import ProcessRunner
from flashbuild.recipes.when import make_context

if TYPE_CHECKING:
    from pathlib import Path

    from flashbuild.arch import ArchSpec
    from flashbuild.patching.engine import FileDiff, PatchReport, RevertReport, StepReport
    from flashbuild.recipes.model import Recipe


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


#: The explain report's width: every line it writes fits it (a path or an id longer than a
#: line is kept whole on a line of its own, never split).
EXPLAIN_WIDTH = 80


def wrap(text: str, *, indent: str = "", cont: str = "    ",
         width: int = EXPLAIN_WIDTH) -> list[str]:
    """`text` in lines of at most `width`, broken only at spaces (a path, an id, `a-b` and
    `>=120,<130` stay whole); continuation lines start with `cont`."""
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=cont,
                         break_long_words=False, break_on_hyphens=False) or [indent.rstrip()]


def step_result(step: StepReport) -> str:
    """What a step did, in one phrase: `6 files, 56 edited, 3 already, 3 kept, 1 refused`."""
    edits = sum(1 for x in step.sites if x.action == "edit")
    already = sum(1 for x in step.sites if x.action == "already")
    kept = sum(1 for x in step.sites if x.action == "keep")
    refused = sum(1 for x in step.sites if x.action == "refused")
    return ", ".join(filter(None, [
        plural(len(step.files), "file") if step.files else "",
        f"{edits} edited" if edits else "", f"{already} already" if already else "",
        f"{kept} kept" if kept else "", f"{refused} refused" if refused else "",
        plural(len(step.hunks), "hunk") if step.hunks else "",
        f"excludes {', '.join(step.build_excludes)}" if step.build_excludes else ""]))


def explain_lines(report: PatchReport, *, verbose: bool = False) -> list[str]:
    """`--explain`: per step whether it applies (`yes`/`no`), what it did, and one line of why;
    with `verbose` (`-v`) also every site, hunk and note of each step that applies. Every line
    fits EXPLAIN_WIDTH columns."""
    applied = sum(1 for s in report.steps if s.matched)
    lines = wrap(f"recipe {report.recipe}: which steps apply, and why ({applied} of "
                 f"{plural(len(report.steps), 'step')})", cont="")
    for s in report.steps:
        result = step_result(s) if s.matched else ""
        head = f"{'yes' if s.matched else 'no '} {s.id} ({s.kind})"
        lines += wrap(f"{head}: {result}" if result else head)
        lines += wrap(f"why: {s.reason}", indent="    ", cont="         ")
        if verbose and s.matched:
            lines += _step_detail(s)
        elif s.matched:
            # A refused site is never left to -v: the step did not do what it says there.
            for site in s.sites:
                if site.action == "refused":
                    lines += wrap(f"refused {site.path}:{site.line} {site.kind}: {site.note}",
                                  indent="      ", cont="          ")
    if not verbose and any(s.matched and (s.sites or s.hunks or s.notes)
                           for s in report.steps):
        lines += wrap("(every site, hunk and note" + (", and the diff" if report.dry_run
                                                     else "") +
                      ": `flashbuild -v patch ... --explain`)", cont="")
    return lines


def _step_detail(step: StepReport) -> list[str]:
    lines: list[str] = []
    for site in step.sites:
        lines += wrap(f"{site.action} {site.path}:{site.line} {site.kind}" +
                      (f": {site.note}" if site.note else ""), indent="      ",
                      cont="          ")
    for hunk in step.hunks:
        lines += wrap(f"hunk {hunk.header.strip()} {hunk.status} at line {hunk.line}" +
                      (f", offset {hunk.offset}" if hunk.offset else "") +
                      (f", fuzz {hunk.fuzz}" if hunk.fuzz else ""), indent="      ",
                      cont="          ")
    for note in step.notes:
        lines += wrap(f"note: {note}", indent="      ", cont="          ")
    return lines


def file_summary(diffs: tuple[FileDiff, ...]) -> list[str]:
    """One line per file of a diff: `  arch/sm_gate.h  +3 -2` (`new`, `deleted`)."""
    lines: list[str] = []
    for d in diffs:
        before = (d.before or "").replace("\r\n", "\n").splitlines()
        after = (d.after or "").replace("\r\n", "\n").splitlines()
        added = removed = 0
        for line in difflib.unified_diff(before, after, lineterm="", n=0):
            if line.startswith("+") and not line.startswith("+++"):
                added += 1
            elif line.startswith("-") and not line.startswith("---"):
                removed += 1
        what = ("new, " if d.before is None else "deleted, " if d.after is None else "")
        lines += wrap(f"{d.path}  ({what}+{added} -{removed})", indent="  ")
    return lines


def print_patch(report: PatchReport, *, explain: bool, show_diff: bool) -> None:
    ctx = report.context
    heading = (f"recipe {report.recipe} on {report.tree} (platform {ctx['platform']}, arch "
               f"{ctx['arch'] or 'none'})")
    if not explain:
        ui.step(f"recipe [bold]{escape(report.recipe)}[/] on {escape(str(report.tree))} "
                f"(platform {ctx['platform']}, arch {ctx['arch'] or 'none'})")
        for note in report.notes:
            ui.info(f"  [dim]{escape(note)}[/]")
        _print_step_notes(report)
        _print_rest(report, show_diff)
        return
    # --explain: a summary that fits 80 columns; the detail and the diff with -v (or --diff).
    first, *rest = wrap(heading, width=EXPLAIN_WIDTH - 2, cont="")
    ui.say(first)
    for line in rest:
        ui.literal(f"  {line}")
    for note in report.notes:
        for line in wrap(note, indent="  ", cont="  "):
            ui.literal(line, style="dim")
    for line in explain_lines(report, verbose=ui.verbose):
        ui.literal(line)
    # A dry run's diff is the detail (hundreds of lines for the bundled recipe): by default
    # one line per file, the diff itself with -v or --diff.
    full_diff = ui.verbose or show_diff
    if report.dry_run and report.pending and not full_diff:
        ui.literal("would write:")
        for line in file_summary(report.pending):
            ui.literal(line)
    _print_rest(report, show_diff, dry_run_diff=full_diff)


def _print_step_notes(report: PatchReport) -> None:
    for s in report.steps:
        if not s.matched:
            continue
        for note in s.notes:
            ui.paragraph(f"{s.id}: {note}", style="dim")
        for site in s.sites:
            if site.action in ("keep", "refused"):
                # The site first and whole (an editor jumps to path:line), the reason wrapped.
                word = "kept" if site.action == "keep" else "refused"
                ui.paragraph(f"{word} {site.path}:{site.line} {site.kind}: {site.note}")


def _print_rest(report: PatchReport, show_diff: bool, *, dry_run_diff: bool = True) -> None:
    if report.dry_run:
        if dry_run_diff:
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


def run_patch(*, recipe: Recipe | None, tree: Path, platform: str | None,
              arch: ArchSpec | None, dry_run: bool, diff: bool, explain: bool, revert: bool,
              as_json: bool, discard_edits: bool = False, chosen: str = "") -> int:
    """The `flashbuild patch` stage: build the context, patch or revert `tree` with the
    recipe the pipeline chose (pipeline/choose.py `choose_for_patch`; None only to revert);
    `chosen`: the line that says which recipe and why, for the JSON document."""
    if revert:
        reverted = revert_tree(tree, dry_run=dry_run, discard_edits=discard_edits)
        if as_json:
            payload = reverted.to_json()
            if dry_run:
                payload["diff"] = unified_text(reverted.pending)
            ui.emit_json({"ok": True, **payload, "chosen": chosen or None})
        else:
            print_revert(reverted)
        return 0
    assert recipe is not None  # choose_for_patch gives one unless reverting
    ctx = make_context(platform=platform, arch=arch,
                       gpu_capabilities=_gpu_capabilities() if arch is None else None)
    report = patch_tree(recipe, tree, ctx, dry_run=dry_run, discard_edits=discard_edits)
    if as_json:
        payload = report.to_json()
        if dry_run or diff:
            payload["diff"] = unified_text(report.pending if dry_run else report.diffs)
        ui.emit_json({"ok": True, **payload, "chosen": chosen or None})
    else:
        print_patch(report, explain=explain, show_diff=diff)
    return 0


def _gpu_capabilities() -> list[tuple[int, int]]:
    """Compute capabilities of this machine's GPUs (detection never raises)."""

    return [g.capability for g in probe_gpus(os.environ, ProcessRunner()).gpus]
