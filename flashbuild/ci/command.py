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
from flashbuild.arch import parse_arch_spec
from flashbuild.building.backends import backend_for
from flashbuild.ci import estimate, workflow
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
                as_json: bool, max_job_hours: float | None = None,
                unit_seconds: float | None = None, linux_image: str | None = None) -> int:
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
    image = workflow.parse_linux_image(linux_image or workflow.DEFAULT_LINUX_IMAGE)
    budget_s, per_unit = check_estimate_options(max_job_hours, unit_seconds)

    workflow.require_install(loaded)
    backend_for(loaded, tree)  # the tree is one the recipe's backend builds
    spec = parse_arch_spec(arch)
    units = estimate.read_units(tree, backend=loaded.build.backend, archs=spec.archs,
                                platform=platforms[0])
    ref = workflow.recipe_reference(loaded, tree, recipes_dir())
    try:
        key = target.relative_to(tree).as_posix()
    except ValueError:  # written elsewhere for review: the key is where it will live
        key = (workflow.DEFAULT_OUTPUT.parent / target.name).as_posix()
    extra = [*(["--torch", torch] if torch else []),
             *(["--flashbuild-spec", flashbuild_spec] if flashbuild_spec else []),
             *(["--max-job-hours", f"{max_job_hours:g}"] if max_job_hours is not None else []),
             *(["--unit-seconds", f"{unit_seconds:g}"] if unit_seconds is not None else []),
             *(["--linux-image", linux_image] if linux_image else [])]
    plan = workflow.plan_workflow(
        recipe=loaded, recipe_ref=ref, arch=spec, platforms=platforms, cudas=cudas,
        pythons=pythons, runners=chosen_runners, flashbuild_spec=flashbuild_spec or "",
        torch=torch, units=units, unit_seconds=per_unit, budget_s=budget_s,
        cache_key_path=key, linux_image=image,
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
                                  "python": e.python, "toolkit": e.toolkit,
                                  "arch": e.arch_value, "image": e.image,
                                  "policy": e.policy,
                                  "estimate_seconds": round(e.estimate_s)}
                                 for e in plan.entries],
                      "estimate": _estimate_json(plan)})
    else:
        ui.say(f"wrote {target}")
        ui.table(f"{plural(len(plan.entries), 'job')} building wheels, and a release job",
                 MATRIX_COLUMNS, matrix_rows(plan))
        for line in estimate_lines(plan):
            ui.say_wrapped(line)
        if "linux" in platforms:
            ui.say_wrapped(
                f"linux: built in the PyPA {image.name} image (release {image.release}, "
                f"pinned by digest), the wheel tagged {image.policy} by `flashbuild repair` "
                "(torch, CUDA and the driver never bundled)"
                if image is not None else
                "linux: built on the runner itself (--linux-image none): wheels tagged "
                "linux_x86_64, which PyPI refuses, needing the runner's glibc")
        if len(cudas) > 1 or len(plan.arch_groups) > 1:
            ui.say_wrapped("a setup.py tree's wheel gets a local version of its archs, CUDA "
                           "and torch (e.g. +sm90a.cu130torch2.13) unless the tree sets one; a "
                           "CMake tree's carries its archs and CUDA (+sm90a.cu130). Two wheels "
                           "of one file "
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


def check_estimate_options(max_job_hours: float | None, unit_seconds: float | None
                           ) -> tuple[float, float]:
    """(the compile budget of a job in seconds, the core-seconds per unit per arch)."""
    if max_job_hours is None:
        max_job_hours = estimate.DEFAULT_BUDGET_HOURS
    if not 0 < max_job_hours <= estimate.JOB_CAP_HOURS:
        raise UsageError(
            f"`--max-job-hours {max_job_hours:g}` is not a budget a GitHub job can have",
            evidence=f"GitHub cancels a job on a hosted runner after "
            f"{estimate.JOB_CAP_HOURS:g} h",
            fix=f"pass hours above 0 and at most {estimate.JOB_CAP_HOURS:g} (default "
            f"{estimate.DEFAULT_BUDGET_HOURS:g}: an hour for installs, verify and the "
            "estimate's error)")
    if unit_seconds is not None and not unit_seconds > 0:
        raise UsageError(f"`--unit-seconds {unit_seconds:g}` is not a compile time",
                         fix="pass the core-seconds one unit takes for one arch, e.g. a "
                         "measured build's wall time x busy cores / (units x archs)")
    per_unit = unit_seconds if unit_seconds is not None else estimate.SECONDS_PER_UNIT_ARCH
    return max_job_hours * 3600, per_unit


def estimate_lines(plan: workflow.CiPlan) -> list[str]:
    """What the estimates rest on, whether the matrix was split by arch, and whether the
    Python axis collapsed (abi3), each as a line under the table."""
    est = plan.estimate
    if est is None:
        return []
    units = est.units
    lines = [f"estimate: {units.how}; {est.unit_seconds:.0f} core-seconds per unit per arch "
             f"on a {estimate.RUNNER_VCPUS}-vCPU runner (docs/ci.md, 'Jobs that fit the "
             f"6-hour cap'); budget {est.budget_s / 3600:g} h a job"]
    groups = plan.arch_groups
    if len(groups) > 1:
        lines.append(
            f"split: all of --arch in one job is estimated past the budget, so each "
            f"coordinate is {len(groups)} jobs, one wheel per arch group "
            f"({', '.join(workflow.arch_label(g) for g in groups)}); a user installs the "
            "wheel of their GPU's group")
    if est.collapsed:
        lines.append(f"python collapsed: {est.collapsed}")
    elif units.abi_note:
        lines.append(f"python not collapsed: {units.abi_note}")
    return lines


def _estimate_json(plan: workflow.CiPlan) -> dict[str, object] | None:
    est = plan.estimate
    if est is None:
        return None
    return {"cuda_units": est.units.cuda, "host_units": est.units.host, "how": est.units.how,
            "unit_seconds": est.unit_seconds, "budget_seconds": est.budget_s,
            "arch_groups": [workflow.arch_value(g) for g in plan.arch_groups],
            "python_collapsed": est.collapsed}


#: The columns of the matrix table `ci init` prints (`matrix_rows`).
MATRIX_COLUMNS = [Column("os (runner)", key=True), Column("arch"),
                  Column("cuda", key=True), Column("torch", key=True),
                  Column("python", key=True), Column("h:mm", justify="right")]


def matrix_rows(plan: workflow.CiPlan) -> list[list[str]]:
    """One row per job: the runner (its OS), the GPU archs it builds, the CUDA release and
    where it comes from, the torch build it installs (its CUDA index, and the version when
    pinned; `-` for a tree that needs none), the Python (`3.11+` for an abi3 wheel that
    serves the later ones too), the estimated compile time (`h:mm`)."""
    # `2.9.1` for a pin (the column is one of six in 80): a specifier stays as written.
    pinned = plan.torch_spec.removeprefix("torch").removeprefix("==")
    collapsed = plan.estimate is not None and bool(plan.estimate.collapsed)
    rows = []
    for entry in plan.entries:
        index = entry.torch_index.rstrip("/").rsplit("/", 1)[-1]
        torch = " ".join(filter(None, (pinned, index))) if entry.torch_index else "-"
        rows.append([entry.runner, entry.arch_value.replace(";", " "),
                     f"{entry.cuda} {entry.toolkit}", torch,
                     entry.python + ("+" if collapsed else ""),
                     estimate.clock(entry.estimate_s) if plan.estimate else "-"])
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
