"""`flashbuild scan` asks the build: introspection first, then the scan with its tree model.

The scan stage (scanning/scan.py) reads text; what the tree compiles for this configuration is
known to its build system. Unless `--static`, and when the target platform is this machine's,
this module

1. chooses the recipe the build would use for the tree: the bundled recipe whose `[identity]`
   matches it (pipeline/choose.py), else a plain recipe for the tree's backend (a top-level
   CMakeLists.txt or setup.py, as the scan reads it) with no patches and no options. It never
   drafts one: drafting scans;
2. introspects the tree with it (pipeline/introspect.py: a CMake configure into the build
   root's scratch folder, or setup.py in record mode on a copy there; nothing compiled, the
   tree only read; an unchanged tree reuses the stored model);
3. scans with the model (`scan_tree(..., model=...)`).

Where introspection cannot run (another platform, no toolkit, no torch, a configure error, a
setup.py that raises, hangs or reaches for the network, no build files), one line says so and
why, and the scan reads the text as `--static` would decide what is compiled (the real
preprocessor still runs where it can). The scan's `truth` line carries the same reason.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from flashbuild import buildsystems, platforms
from flashbuild.console import plural, ui
from flashbuild.pipeline.choose import bundled_match, with_bundled
from flashbuild.recipes.load import parse_recipe
from flashbuild.scanning.report import run_scan
from flashbuild.scanning.scan import build_system, scan_tree

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from flashbuild.recipes.model import Recipe
    from flashbuild.scanning.findings import ScanOptions, ScanResult, ScanTarget, Stage
    from flashbuild.source.treemodel import Introspection

#: Seconds a configure or a setup.py record may take before the scan falls back (a build
#: script that hangs must not hang the scan for the build's own 300 s).
TIMEOUT_S = 120.0


def scan_with_build(root: Path, target: ScanTarget, opts: ScanOptions, *,
                    say: Callable[[str], None] | None = None,
                    stage: Stage | None = None) -> ScanResult:
    """Scan `root` for `target` with the configured build's model where it can be had (see the
    module docstring); `say` gets the one line that says which, `stage` what the scan starts
    doing (the introspection, then the scan's own stages)."""
    if opts.static or not root.is_dir():
        return scan_tree(root, target, opts, stage=stage)  # (no folder: the scan's own error)
    outcome = introspect_for_scan(root.resolve(), target, stage=stage)
    if outcome.model is None or outcome.fallback:
        reason = outcome.fallback
        if say is not None:
            say(f"static reading: introspection could not run ({reason})")
        result = scan_tree(root, target, opts, stage=stage)
        return replace(result, truth=f"static reading of the build files (introspection "
                       f"fell back: {reason}); {result.truth}")
    model = outcome.model
    if say is not None:
        how = "reused: the tree is unchanged" if outcome.cached else \
            f"{outcome.seconds:.1f} s"
        say(f"introspection: {model.via}, {plural(len(model.targets), 'target')} ({how})")
        for note in model.notes:
            say(f"introspection: {note}")
    return scan_tree(root, target, opts, model=model, stage=stage)


def introspect_for_scan(root: Path, target: ScanTarget, *,
                        stage: Stage | None = None) -> Introspection:
    """The model of the build the scan's target would get on this machine, or the one-line
    reason there is none. A model whose setup.py raised, or reached for the network, is no
    model of the build: it is a fallback too."""
    from flashbuild.pipeline.introspect import introspect  # noqa: PLC0415  # start-up
    from flashbuild.source.treemodel import Introspection  # noqa: PLC0415  # start-up

    here = platforms.current().name
    if target.platform != here:
        return Introspection(model=None, fallback=f"introspection configures for this machine "
                             f"({here}); the target is {target.platform}")
    recipe = recipe_for_scan(root)
    if recipe is None:
        return Introspection(model=None, fallback="no build files: no CMakeLists.txt and no "
                             "setup.py at the top of the tree")
    spec = target.spec
    if stage is not None:
        stage("introspecting the build "
              f"({buildsystems.get(recipe.build.backend).introspection_label})")
    outcome = introspect(recipe, root, spec, platform=target.platform, timeout=TIMEOUT_S,
                         bindings=False)
    model = outcome.model
    if model is None:
        return outcome
    if model.exception is None:
        # A setup.py that tried the network and went on without it (a prebuilt binary it
        # could not fetch, then a build from source) still recorded the build: a model.
        return outcome
    if model.network:
        call = model.network[0]
        return replace(outcome, model=None, fallback=(
            f"setup.py reached for the network ({call.call} {call.target} at {call.where}), "
            f"which introspection refuses, and stopped: {model.exception}"))
    return replace(outcome, model=None,
                   fallback=f"setup.py raised {model.exception} when run as the build runs it")


def recipe_for_scan(root: Path) -> Recipe | None:
    """The bundled recipe that matches the tree, else a plain recipe for its backend (no
    patches, no options: the arch comes from the scan's target); None without build files."""
    bundled = bundled_match(root)
    if bundled is not None:
        return bundled.recipe
    system = build_system(root)
    if system is None:
        return None
    name = re.sub(r"[^a-z0-9-]+", "-", root.name.lower()).strip("-") or "tree"
    return parse_recipe(f'[recipe]\nname = "{name}"\n[source]\npath = "."\n'
                        f'[build]\nbackend = "{system.name}"\n', None)


def scan_command(source: Path, *, platform: str | None, arch: str, as_json: bool,
                 sarif: Path | None, include_vendored: bool, jobs: int | None, force: bool,
                 static: bool, compile_units: bool) -> int:
    """`flashbuild scan`: the scan stage's command (scanning/report.py `run_scan`) with the
    scan that asks the build first."""
    def scanner(root: Path, target: ScanTarget, opts: ScanOptions) -> ScanResult:
        # A status line while the scan works (the introspection and the preprocessor passes
        # take tens of seconds on a big tree), gone before the report prints. The bundled
        # recipe build and patch would use (pipeline/choose.py): its edits, and what the build
        # does by itself (scan.mark_handled), are not errors of the scan.
        with ui.activity() as stage:
            return with_bundled(scan_with_build(root, target, opts, say=ui.say_wrapped,
                                                stage=stage))

    return run_scan(source, platform=platform, arch=arch, as_json=as_json, sarif=sarif,
                    include_vendored=include_vendored, jobs=jobs, force=force, static=static,
                    compile_units=compile_units, scanner=scanner)
