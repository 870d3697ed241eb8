"""The `flashbuild ci init` stage: check the matrix, render the workflow, write it.

Nothing is written unless every check passes, and an existing file is replaced only with
`--force` (atomically: a temporary file beside it, then a rename).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import flashbuild
from flashbuild.building.backends import backend_for
from flashbuild.ci import workflow
from flashbuild.console import Column, plural, ui
from flashbuild.errors import FlashbuildError, UsageError
from flashbuild.proc import ProcessRunner
from flashbuild.recipes.load import load_recipe, recipes_dir

if TYPE_CHECKING:
    from collections.abc import Sequence

    from flashbuild.recipes.model import Recipe


def run_ci_init(*, recipe: str, arch: str, platform: str, cuda: str, python: str,
                runners: Sequence[str], source: Path | None, output: Path | None,
                force: bool, flashbuild_spec: str | None, torch: str | None,
                as_json: bool) -> int:
    loaded = load_recipe(recipe)
    tree = (source if source is not None else _default_tree(loaded)).resolve()
    if not tree.is_dir():
        raise UsageError(f"the tree {tree} is not a folder",
                         fix="pass --source the top folder of the tree's repository")
    target = (output if output is not None else tree / workflow.DEFAULT_OUTPUT).resolve()
    if target.exists() and not force:
        raise UsageError(f"{target} already exists",
                         evidence="flashbuild ci init never replaces a file unasked",
                         fix="pass --force to replace it, or -o another path")
    platforms = workflow.parse_platforms(platform)
    cudas = workflow.parse_versions(cuda, "cuda")
    pythons = workflow.parse_versions(python, "python")
    chosen_runners = workflow.parse_runners(runners, platforms)

    workflow.require_install(loaded)
    backend_for(loaded, tree)  # the tree is one the recipe's backend builds
    ref = workflow.recipe_reference(loaded, tree, recipes_dir())
    try:
        key = target.relative_to(tree).as_posix()
    except ValueError:  # written elsewhere for review: the key is where it will live
        key = (workflow.DEFAULT_OUTPUT.parent / target.name).as_posix()
    extra = [*(["--torch", torch] if torch else []),
             *(["--flashbuild-spec", flashbuild_spec] if flashbuild_spec else [])]
    plan = workflow.plan_workflow(
        recipe=loaded, recipe_ref=ref, arch=arch, platforms=platforms, cudas=cudas,
        pythons=pythons, runners=chosen_runners, flashbuild_spec=flashbuild_spec or "",
        torch=torch,
        cache_key_path=key,
        command=workflow.command_line(recipe=ref, arch=arch, platforms=platforms, cudas=cudas,
                                      pythons=pythons, runners=chosen_runners, extra=extra))
    if not flashbuild_spec:  # looked up after the matrix checks, so those speak first
        plan = replace(plan, flashbuild_spec=default_flashbuild_spec(
            Path(flashbuild.__file__).resolve().parent.parent))
    text = workflow.render(plan)
    _write(target, text)
    if as_json:
        ui.emit_json({"ok": True, "output": str(target), "recipe": plan.recipe,
                      "arch": plan.arch_value, "artifacts": plan.artifacts(),
                      "matrix": [{"platform": e.platform, "runner": e.runner, "cuda": e.cuda,
                                  "python": e.python, "toolkit": e.toolkit}
                                 for e in plan.entries]})
    else:
        ui.say(f"wrote {target}")
        ui.table(f"{plural(len(plan.entries), 'job')} building wheels, and a release job",
                 MATRIX_COLUMNS, matrix_rows(plan))
        if len(cudas) > 1:
            ui.say_wrapped("a setup.py tree's wheel gets a local version per CUDA and torch "
                           "(e.g. +cu130torch2.13) unless the tree sets one; a CMake tree's "
                           "carries its archs and CUDA (+sm90a.cu130). Two wheels of one file "
                           "name stop the release step; every wheel is in the `wheels` "
                           "artifact")
    return 0


def default_flashbuild_spec(source: Path, runner: ProcessRunner | None = None) -> str:
    """Where the jobs get flashbuild without --flashbuild-spec: the exact source this
    `ci init` runs from, a git URL pinned to its commit. flashbuild is not on PyPI (the name
    is unclaimed: `flashbuild==VERSION` would fail, or install a stranger's package), so
    without a git checkout that has a remote there is nothing safe to default to."""
    run = runner or ProcessRunner()
    try:
        url = run.run(["git", "-C", str(source), "config", "--get", "remote.origin.url"],
                      check=False, timeout=10).stdout.strip()
        head = run.run(["git", "-C", str(source), "rev-parse", "--show-toplevel", "HEAD"],
                       check=False, timeout=10).stdout.split()
    except FlashbuildError:  # no git on PATH: the same as no checkout
        url, head = "", []
    # The checkout must be flashbuild's own, not a repository that merely holds the venv
    # flashbuild was installed into.
    top, commit = (Path(head[0]), head[1]) if len(head) == 2 else (None, "")
    own = top is not None and top.resolve() == source.resolve()
    if not url or not own or not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise UsageError(
            f"flashbuild runs from {source}, which is not a git checkout with a remote, so "
            "the jobs have no source of this flashbuild to install",
            evidence="flashbuild is not published on PyPI, and a job must install the same "
            "flashbuild that checked the matrix",
            fix="pass --flashbuild-spec, e.g. 'flashbuild @ git+https://HOST/flashbuild@COMMIT' "
            "or the URL of a wheel the jobs can download")
    if url.startswith("git@") and ":" in url:  # scp-like `git@host:owner/repo.git`
        host, _, path = url.removeprefix("git@").partition(":")
        url = f"https://{host}/{path}"
    return f"flashbuild @ git+{url}@{commit}"


def _default_tree(recipe: Recipe) -> Path:
    """The tree without --source: a recipe file's own `[source] path` (as `flashbuild build
    --recipe FILE` finds it: `recipe init -o TREE/flashbuild.toml` writes `path = "."`), else
    the current folder (a bundled recipe names no tree of the user's)."""
    file = recipe.file
    if file is None or file.resolve().parent == recipes_dir().resolve():
        return Path.cwd()
    return recipe.source_root()


#: The columns of the matrix table `ci init` prints (`matrix_rows`).
MATRIX_COLUMNS = [Column("os (runner)", key=True), Column("arch", key=True),
                  Column("cuda", key=True), Column("torch", key=True),
                  Column("python", key=True)]


def matrix_rows(plan: workflow.CiPlan) -> list[list[str]]:
    """One row per job: the runner (its OS), the GPU archs, the CUDA release and where it comes
    from, the torch build it installs (its CUDA index, and the version when pinned; `-` for a
    tree that needs none), the Python."""
    arch = plan.arch_value.replace(";", " ")
    pinned = plan.torch_spec.removeprefix("torch")
    rows = []
    for entry in plan.entries:
        index = entry.torch_index.rstrip("/").rsplit("/", 1)[-1]
        torch = " ".join(filter(None, (pinned, index))) if entry.torch_index else "-"
        rows.append([entry.runner, arch, f"{entry.cuda} {entry.toolkit}", torch, entry.python])
    return rows


def _write(target: Path, text: str) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(text.encode("utf-8"))
            tmp.replace(target)
        finally:  # a failed write or rename leaves nothing beside the target
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the workflow to {target}",
                         evidence=exc.strerror or str(exc),
                         fix="pass -o a file in a folder you can write to") from exc
