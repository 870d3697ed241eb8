"""`flashbuild recipe init`: the recipe decision first, then the draft.

A tree that a bundled recipe matches by content (pipeline/choose.py `bundled_match`, as
`build TREE` and `patch TREE` choose it) gets no draft: the bundled recipe is tested against
that project's upstream tree, and a draft would miss what it does (FlashMLA on Windows: the
draft has no step for the five `__int128` sites the bundled recipe's 13 steps fix). The
command names the recipe, says which findings its steps fix and which the build does by
itself (the scan's lines: scanning/report.py `bundled_lines`), points at the commands that use
it, and writes nothing. `--draft` drafts anyway (to start a recipe of one's own), as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashbuild.console import ui
from flashbuild.patching.plan import plan_steps
from flashbuild.pipeline.choose import bundled_match, with_bundled
from flashbuild.pipeline.introspect import introspect_for_draft
from flashbuild.scanning.draft import run_init
from flashbuild.scanning.findings import ScanOptions, make_target
from flashbuild.scanning.report import bundled_lines, resolve_platform
from flashbuild.scanning.scan import scan_tree

if TYPE_CHECKING:
    from pathlib import Path


def init_command(source: Path, *, platform: str | None, arch: str, output: Path | None,
                 as_json: bool, check: bool, force: bool, static: bool, draft: bool) -> int:
    # Without -o the recipe is printed on stdout: every other line goes to stderr, so
    # `recipe init ... > recipe.toml` writes a file that loads.
    with ui.stdout_for_product(output is None):
        return _init(source, platform=platform, arch=arch, output=output, as_json=as_json,
                     check=check, force=force, static=static, draft=draft)


def _init(source: Path, *, platform: str | None, arch: str, output: Path | None,
          as_json: bool, check: bool, force: bool, static: bool, draft: bool) -> int:
    root = source.resolve()
    bundled = bundled_match(root) if root.is_dir() else None
    if bundled is None or draft:
        if bundled is not None:
            ui.say_wrapped(f"drafting anyway (--draft); `flashbuild build` and `flashbuild "
                           f"patch` use the bundled recipe `{bundled.recipe.name}` for this "
                           "tree unless given --recipe")
        return run_init(source, platform=platform, arch=arch, output=output, as_json=as_json,
                        check=check, force=force,
                        introspect=None if static else introspect_for_draft, plan=plan_steps)
    # The text scan (nothing run, as --static): enough to say what the recipe's steps fix.
    target = make_target(resolve_platform(platform), arch)
    result = with_bundled(scan_tree(root, target, ScanOptions(static=True)))
    lines = [*bundled_lines(result),
             "nothing drafted" + (f" and nothing written to {output}" if output else "")
             + ": the bundled recipe is what build and patch use; `--draft` drafts one "
             "anyway"]
    if as_json:
        r = result.recipe
        assert r is not None
        ui.emit_json({"ok": True, "output": None, "drafted": False,
                      "bundled": {"name": r.name, "why": r.why, "steps": r.steps,
                                  "fixes": [f"{f.rule} {f.path}:{f.line}" for f in
                                            result.findings if f.handled_step]},
                      "steps": [], "todos": 0, "lines": lines})
        return 0
    ui.say(lines[0])
    for line in lines[1:]:
        ui.literal(line)
    return 0
