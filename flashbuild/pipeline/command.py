"""The `flashbuild build` command: resolve the options (recipe, arch, toolkit, host compiler,
MSVC environment, the recipe's conditional options and environment) into a BuildRequest, run
`driver.build()`, print the result. The CLI calls `run_build` and nothing else."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from flashbuild import platforms
from flashbuild.arch import ArchSpec, BuildTarget, Image, Origin, Suffix, Target, parse_arch_spec
from flashbuild.building import builddir
from flashbuild.building.artifacts import parse_install_mode
from flashbuild.building.jobs import parse_jobs
from flashbuild.building.progress import MissingStdHeaders
from flashbuild.building.request import BuildRequest, HostCompiler, PatchOutcome, Step
from flashbuild.building.staging import source_walks
from flashbuild.console import Column, ui
from flashbuild.detect.pyenv import torch_version
from flashbuild.errors import ToolchainError, UsageError
from flashbuild.installing.install import recover_tree
from flashbuild.patching.engine import patch_tree
from flashbuild.pipeline.choose import add_to_draft, choose_for_patch, choose_recipe
from flashbuild.pipeline.driver import BuildReport, build, stage_rows
from flashbuild.platforms.contain import CMAKE_OFFLINE
from flashbuild.proc import ProcessRunner
from flashbuild.recipes.when import WhenContext, evaluate
from flashbuild.toolchain_facts import pypi_toolkit_requirement

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from flashbuild.arch import Arch
    from flashbuild.building.request import StreamRunner
    from flashbuild.detect.cuda import Toolkit, ToolkitSearch
    from flashbuild.pipeline.choose import Chosen
    from flashbuild.platforms.base import Platform
    from flashbuild.recipes.model import Recipe


def run_patch_command(*, path: Path | None, recipe: str | None, source: Path | None,
                      platform: str | None, arch: str | None, dry_run: bool, diff: bool,
                      explain: bool, revert: bool, as_json: bool, discard_edits: bool) -> int:
    """`flashbuild patch [PATH]`: the recipe chosen as build chooses it, said in one line
    (pipeline/choose.py `choose_for_patch`), then the patch stage."""
    from flashbuild.patching.report import run_patch  # noqa: PLC0415  # start-up
    # The target, parsed once here at the command's edge (a bad --arch stops before a recipe
    # is chosen); below, the `when` context takes it typed.
    spec = parse_arch_spec(arch) if arch is not None else None
    said: list[str] = []
    # Under --json the line is the document's `chosen` (stdout holds one JSON document).
    loaded, tree = choose_for_patch(recipe, one_tree(path, source, command="patch"),
                                    revert=revert, say=said.append if as_json else ui.say)
    return run_patch(recipe=loaded, tree=tree, platform=platform, arch=spec, dry_run=dry_run,
                     diff=diff, explain=explain, revert=revert, as_json=as_json,
                     discard_edits=discard_edits, chosen=" ".join(said))


def one_tree(path: Path | None, source: Path | None, *, command: str) -> Path | None:
    """`flashbuild build PATH` (or patch) and `--source PATH` name the same thing; both may
    be given only when they agree."""
    if path is not None and source is not None and path.resolve() != source.resolve():
        raise UsageError("two trees were given", evidence=f"PATH {path} and --source {source}",
                         fix=f"give the tree once: `flashbuild {command} PATH ...`")
    return path if path is not None else source


def run_build(*, recipe: str | None, source: Path | None, arch: str | None, cuda: Path | None,
              platform: str | None, jobs_text: str, launcher_text: str, install_text: str,
              build_dir: Path | None, as_json: bool, in_place: bool = False,
              contain: bool = False, deps: bool = True) -> int:
    """Resolve the options (recipe, arch, toolkit, host compiler, MSVC environment), then
    `build()`. Printed output and the JSON document are produced here, not in the CLI."""
    # One walk of the user's tree per run (the draft key, the submodule check and the mirror
    # sync share it): the walks were most of a no-op rebuild of a 2000-file tree.
    with source_walks():
        return _run_build(recipe=recipe, source=source, arch=arch, cuda=cuda,
                          platform=platform, jobs_text=jobs_text, launcher_text=launcher_text,
                          install_text=install_text, build_dir=build_dir, as_json=as_json,
                          in_place=in_place, contain=contain, deps=deps)


def _run_build(*, recipe: str | None, source: Path | None, arch: str | None,
               cuda: Path | None, platform: str | None, jobs_text: str, launcher_text: str,
               install_text: str, build_dir: Path | None, as_json: bool,
               in_place: bool, contain: bool, deps: bool) -> int:
    from flashbuild.building.launcher import parse_launcher  # noqa: PLC0415  # start-up
    from flashbuild.detect.cuda import python_site_packages  # noqa: PLC0415  # start-up
    jobs_n = parse_jobs(jobs_text)
    launcher_choice = parse_launcher(launcher_text)
    mode = parse_install_mode(install_text)
    plat = platforms.get(platform)
    if plat.name != platforms.current().name:
        raise UsageError(
            f"flashbuild cannot compile for {plat.name} on {platforms.current().name}",
            evidence="nvcc needs the target OS's host compiler (MSVC for windows)",
            fix=f"preview and compile-check the {plat.name} patch set with "
            f"`flashbuild patch --platform {plat.name} --dry-run`, and build on a {plat.name} "
            "machine or CI runner",
        )
    env = dict(os.environ)
    runner = ProcessRunner(echo=ui.command)
    target = resolve_target(arch, env=env, runner=runner)
    spec = target.spec
    cache_dir = plat.user_cache_dir(env)
    if source is not None and source.is_dir():
        # Before the tree is read: a killed in-place install left the package without its
        # __init__.py, and the draft then found no package (exit 4) on every later run.
        for restored in recover_tree(source):
            ui.say(f"restored {restored} (an earlier install was interrupted)")
    chosen = _choose(recipe, source, target=target, platform=plat.name, installing=mode != "none",
                     build_dir=build_dir, cache_dir=cache_dir)
    loaded, tree = chosen.recipe, chosen.tree
    spec, arch_note = tree_arch(loaded, spec)
    if arch_note:
        ui.say(arch_note)
    chosen_tk = choose_toolkit(env, runner, plat, cuda=cuda, cache_dir=cache_dir,
                               site_packages=python_site_packages(), targets=spec.archs)
    toolkit = chosen_tk.chosen
    ui.say(f"toolkit: {chosen_tk.summary}")
    host, build_env, cuda_flags, cxx_flags = host_environment(
        env, runner, plat, toolkit=toolkit, cache_dir=cache_dir, say=ui.say)
    from flashbuild.building.toolkit import (  # noqa: PLC0415  # start-up
        cmake_toolkit_root,
        stub_compiler,
    )

    cmake_root = cmake_toolkit_root(toolkit, cache_dir / "toolkits", plat,
                                    stub_with=stub_compiler(runner, host))
    ctx = WhenContext(platform=plat.name, arch=spec, cuda=toolkit.release,
                      compiler=host.kind, compiler_version=version_or_none(host.version),
                      torch=version_or_none(torch_version(python_site_packages()) or ""))
    loaded = artifacts_for(loaded, ctx)
    defines, args, recipe_env = recipe_settings(loaded, ctx, spec)

    request = BuildRequest(
        recipe=loaded, source_dir=tree, staged=not in_place, arch=spec, toolkit=toolkit,
        cmake_toolkit_root=cmake_root, pypi_home=chosen_tk.pypi_home,
        platform=plat, host_compiler=host, env=build_env, jobs=jobs_n, launcher=launcher_choice,
        install=mode, build_dir=build_dir, cmake_defines=defines,
        cmake_args=(*args, *(CMAKE_OFFLINE if contain else ())), contain=contain,
        install_requirements=deps and not contain, build_env=recipe_env,
        cuda_flags=cuda_flags, cxx_flags=cxx_flags,
        output_dir_var=loaded.build.output_dir_var, exclude_var=loaded.build.exclude_var,
        notes=(arch_note,) if arch_note else ())
    def checks() -> list[str]:
        return doctor_blockers(env, runner, plat, spec=spec, cuda=cuda, cache_dir=cache_dir)

    report, chosen = _build_amending_draft(request, chosen, ctx, lambda req: build(
        req, runner=runner, checks=checks, patch=_patcher(req.recipe, ctx), console=ui.err,
        show_progress=not as_json and ui.err.is_terminal, on_step=ui.say))
    if as_json:
        ui.emit_json({**report.to_json(), "recipe": chosen.to_json()})
    else:
        ui.say(f"build folder {report.build_dir}")
        if report.ninja_no_work:  # (a build that compiled named its log already)
            ui.say(f"log: {report.log}")
        ui.say_wrapped(f"{report.jobs.reason}; launcher: {report.launcher}")
        ui.table("seconds per stage", STAGE_COLUMNS, stage_rows(report.steps))
    return 0


def _patcher(recipe: Recipe, ctx: WhenContext) -> Callable[[Path], PatchOutcome]:
    """`patch(tree)` for driver.build: applies `recipe` for `ctx` to the tree it is given."""
    def patch(target: Path) -> PatchOutcome:
        report = patch_tree(recipe, target, ctx)
        return PatchOutcome(
            build_excludes=tuple(report.build_excludes),
            applied=tuple((s.id, s.sha256) for s in report.steps if s.matched),
            changed_files=len(report.files_written), patched=tuple(report.files_changed))
    return patch


def _build_amending_draft(request: BuildRequest, chosen: Chosen, ctx: WhenContext,
                          build_once: Callable[[BuildRequest], BuildReport],
                          ) -> tuple[BuildReport, Chosen]:
    """`build_once(request)`; when the recipe is flashbuild's own draft and the build failed
    on standard headers the tree's files forgot, the steps GCC's notes give go into the
    draft and the build runs again (ninja recompiles only what they change). Any other
    recipe is the user's: the error's paragraph shows the steps."""
    for rounds in range(HEADER_ROUNDS + 1):
        try:
            return build_once(request), chosen
        except MissingStdHeaders as exc:
            amended = add_to_draft(chosen, exc.steps) if rounds < HEADER_ROUNDS else None
            if amended is None:
                raise
            chosen = amended
            for step in exc.steps:
                ui.say_wrapped(f"GCC: {step.file} uses {step.name} without including "
                               f"<{step.header}>; added the step `{step.id}` to the draft "
                               f"({chosen.draft}) and building again")
            request = dataclasses.replace(request, recipe=artifacts_for(chosen.recipe, ctx))
    raise AssertionError("unreachable: the last round re-raises")


#: How many times a zero-config build adds the headers GCC names to its draft and builds
#: again; each time adds at least one step the draft did not have.
HEADER_ROUNDS = 8


#: The columns of the build's closing table (`driver.stage_rows`).
STAGE_COLUMNS = [Column("stage", key=True), Column("seconds", key=True, justify="right"),
                 Column("what it did")]


def _choose(recipe: str | None, source: Path | None, *, target: BuildTarget, platform: str,
            installing: bool, build_dir: Path | None, cache_dir: Path) -> Chosen:
    """The recipe and tree (pipeline/choose.py); a draft goes where the build folders go."""
    root = build_dir if build_dir is not None else (
        builddir.default_root(source, cache_dir=cache_dir) if source is not None else cache_dir)
    # The draft is checked for the images as SASS or PTX, as `recipe init --arch` drafts.
    drafted = ArchSpec(tuple(Target(t.arch, Image.SASS if t.sass else Image.PTX)
                             for t in target.spec.targets))
    return choose_recipe(recipe, source, arch=target.with_spec(drafted), platform=platform,
                         installing=installing, build_root=root, say=ui.say)


#: Doctor rules whose errors do not stop a build: they matter when the module runs (the
#: driver, an `a` target for another GPU in this machine) or only to torch's own extension
#: builder, which `flashbuild build` does not use. `msvc.version` judges the MSVC a
#: plain shell or setuptools would use (VS 2026's 19.50 on windows-latest, which CUDA <= 13.1
#: rejects); the build activates a toolset inside nvcc's window itself, and
#: msvc.pick_toolset raises its own error, before these checks, when none is installed.
NOT_BUILD_BLOCKERS = frozenset({"driver.older-than-toolkit", "target.a-other-sm",
                                "torch.cuda", "torch.broken", "torch.arch-missing",
                                "msvc.version"})


#: The doctor probes a build runs before it starts.
BUILD_PROBES = frozenset({"toolkits", "compilers", "host"})


def doctor_blockers(env: Mapping[str, str], runner: StreamRunner, plat: Platform, *,
                    spec: ArchSpec, cuda: Path | None, cache_dir: Path) -> list[str]:
    """Doctor's verdicts for this target that block a build, one line each (title + fix)."""
    from flashbuild.detect.cache import ProbeCache  # noqa: PLC0415  # start-up
    from flashbuild.detect.doctor import collect  # noqa: PLC0415  # start-up
    from flashbuild.detect.rules import Severity, evaluate  # noqa: PLC0415  # start-up

    # Only the probes whose rules can block a build: GPUs and Python/torch only feed
    # run-time verdicts, and a missing cmake/ninja is the build's own clear error. NVML
    # start-up and the torch probe would otherwise dominate a no-op rebuild.
    findings = collect(env, runner, plat, spec=spec, explicit=cuda,
                       cache=ProbeCache(cache_dir), only=BUILD_PROBES)
    return [f"{v.title} (fix: {v.fix})" if v.fix else v.title
            for v in evaluate(findings)
            if v.severity is Severity.ERROR and v.rule_id not in NOT_BUILD_BLOCKERS]


def artifacts_for(recipe: Recipe, ctx: WhenContext) -> Recipe:
    """The recipe with only the `[[artifact]]` tables whose `when` matches this build; the
    CMake target of an artifact left out is left out of `[build] targets` too (a project
    defines some targets only for some archs, and ninja stops on an unknown one)."""

    kept = tuple(a for a in recipe.artifact if evaluate(a.when, ctx).matched)
    if len(kept) == len(recipe.artifact):
        return recipe
    dropped = {a.target for a in recipe.artifact if a not in kept and a.target}
    dropped -= {a.target for a in kept}
    build = dataclasses.replace(
        recipe.build, targets=tuple(t for t in recipe.build.targets if t not in dropped))
    return dataclasses.replace(recipe, artifact=kept, build=build)


def recipe_settings(recipe: Recipe, ctx: WhenContext, spec: ArchSpec,
                    ) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """The recipe's `[[build.options]]` (CMake defines and arguments) and `[[build.env]]`
    whose `when` matches, in order, with the arch and toolkit placeholders rendered."""
    values = {**spec.placeholders(), **toolkit_placeholders(ctx.cuda)}
    defines: dict[str, str] = {}
    args: list[str] = []
    env: dict[str, str] = {}
    for option in recipe.build.options:
        if evaluate(option.when, ctx).matched:
            defines.update({k: _render(f"define.{k}", v, values)
                            for k, v in option.define.items()})
            args += option.args
    for table in recipe.build.env:
        if evaluate(table.when, ctx).matched:
            env.update({k: _render(f"set.{k}", v, values) for k, v in table.set.items()})
    return defines, args, env


def toolkit_placeholders(cuda: Version | None) -> dict[str, str]:
    """`{cuda_major}` and `{cuda_version}` of the toolkit the build uses; none when its
    release is unknown (a value that uses one then stops the build, see `_render`)."""
    if cuda is None:
        return {}
    return {"cuda_major": str(cuda.major), "cuda_version": f"{cuda.major}.{cuda.minor}"}


def _render(where: str, text: str, values: dict[str, str]) -> str:
    try:
        return text.format_map(values)
    except KeyError as exc:
        # The recipe loader accepts only known placeholders: what is missing is a value this
        # build cannot give (the toolkit's release, when `nvcc --version` did not say it).
        raise UsageError(
            f"the recipe's `{where} = {text!r}` uses {{{exc.args[0]}}}, which this build "
            "cannot fill: the CUDA toolkit's release is unknown (`nvcc --version` did not "
            "print it). Pass `--cuda DIR` with a toolkit whose nvcc reports its release, or "
            "write the value in the recipe") from None


def tree_arch(recipe: Recipe, spec: ArchSpec) -> tuple[ArchSpec, str]:
    """--arch as the tree builds it, and the line that says so (empty when unchanged). A
    recipe whose `[build] arch_suffix` says the tree compiles the `a` (or `f`) variant itself
    turns `--arch sm_120` into `sm_120a` here, once, so the arch check, the manifest, the
    loader shim and verify all see the binary's real target; without it the arch check
    refuses the build and names the `--arch` to type (archcheck.variant_of_request)."""
    if recipe.build.arch_suffix is None:
        return spec, ""
    built = spec.with_suffix(Suffix(recipe.build.arch_suffix))
    changed = [t.arch for t in built.targets if t not in spec.targets]
    if not changed:
        return spec, ""
    runs = "; ".join(
        f"{a.sm} SASS runs only on compute capability {a.major}.{a.minor} GPUs, no other"
        if a.suffix is Suffix.ARCH else
        f"{a.sm} SASS runs on compute capability {a.major}.{a.minor} and later {a.major}.x"
        for a in changed)
    kind = "arch-specific" if changed[0].suffix is Suffix.ARCH else "family"
    return built, (f"--arch {spec.label} is built as {built.label}: the recipe "
                   f"`{recipe.name}` says the tree compiles the {kind} variant itself; "
                   f"{runs}")


def resolve_target(arch: str | None, *, env: Mapping[str, str],
                   runner: StreamRunner) -> BuildTarget:
    """The command's one target, resolved here at its edge: `--arch` (parsed once), else the
    GPUs found (`native`). A recipe's arch_suffix refines it later (tree_arch), unparsed."""
    spec = parse_arch_spec(arch) if arch else ArchSpec(native=True)
    if not spec.native:
        return BuildTarget(spec, Origin.FLAG)
    from flashbuild.detect.gpu import probe_gpus  # noqa: PLC0415  # start-up

    caps = [g.capability for g in probe_gpus(env, runner).gpus]
    return BuildTarget(spec.resolve_native(caps, typed=arch is not None),
                       Origin.FLAG if spec.targets else Origin.GPU)


def choose_toolkit(env: Mapping[str, str], runner: StreamRunner, plat: Platform, *,
                   cuda: Path | None, cache_dir: Path, site_packages: Sequence[Path],
                   targets: tuple[Arch, ...]) -> ChosenToolkit:
    """The toolkit for `targets`, chosen as `flashbuild doctor` chooses (detect.cuda.choose):
    whether it can compile them is doctor's toolkit rules' to say, in the build's checks."""
    from flashbuild.detect.cache import ProbeCache  # noqa: PLC0415  # start-up
    from flashbuild.detect.cuda import find_toolkits  # noqa: PLC0415  # start-up

    search = find_toolkits(env, runner, plat, explicit=cuda, site_packages=site_packages,
                           cache=ProbeCache(cache_dir), targets=targets)
    if search.chosen is None:
        home = search.pypi_home
        raise ToolchainError(
            "no CUDA toolkit with nvcc was found",
            evidence=search.reason + (f"; --cuda {cuda}" if cuda else ""),
            fix=f"pip install \"{pypi_toolkit_requirement()}\" (or flashbuild[cuda])"
            + (f", which puts nvcc into {home}" if home else "")
            + ", install CUDA from NVIDIA, or point --cuda at a toolkit root",
        )
    return ChosenToolkit(search.chosen, search)


@dataclass(frozen=True)
class ChosenToolkit:
    """The toolkit a build uses, with the search it was chosen from (for what it says)."""

    chosen: Toolkit
    search: ToolkitSearch

    @property
    def summary(self) -> str:
        return self.search.summary

    @property
    def pypi_home(self) -> Path | None:
        return self.search.pypi_home


def host_environment(env: Mapping[str, str], runner: StreamRunner, plat: Platform, *,
                      toolkit: Toolkit, cache_dir: Path, say: Step,
                      ) -> tuple[HostCompiler, dict[str, str], tuple[str, ...], tuple[str, ...]]:
    """The host compiler, the environment to build in (MSVC activated on Windows) and the
    extra flags for it."""
    from flashbuild.building import msvc  # noqa: PLC0415  # start-up
    from flashbuild.detect.cache import ProbeCache  # noqa: PLC0415  # start-up
    from flashbuild.detect.compilers import host_window, probe_host_compilers  # noqa: PLC0415  # start-up
    from flashbuild.pipeline.cxx_runtime import static_libstdcxx  # noqa: PLC0415  # start-up

    found = probe_host_compilers(env, runner, plat, cache=ProbeCache(cache_dir))
    if found.family == "msvc":
        window = host_window(toolkit.host_config, toolkit.release)
        activated = msvc.activate(env, runner, found.visual_studios, window, found.active_msvc)
        say(f"MSVC: {activated.source}")
        flags = msvc.msvc_flags(toolkit.release, None)
        version = str(activated.msc_ver or "unknown")
        return (HostCompiler(kind="msvc", version=version), activated.env, flags.cuda,
                flags.cxx)
    gxx = found.gxx
    if gxx is None:
        raise ToolchainError(
            "no C++ host compiler (g++) was found",
            evidence="; ".join(found.problems) or "g++ is not on PATH",
            fix="install g++ (Debian/Ubuntu: `apt-get install g++`), or set CUDAHOSTCXX",
        )
    kind = "clang" if "clang" in gxx.name else "gcc"
    warning = static_libstdcxx(plat.environ(env), runner, ProbeCache(cache_dir))
    if warning:
        say(f"warning: {warning}")
    return (HostCompiler(kind=kind, version=str(gxx.version or "unknown"), path=gxx.path),
            dict(env), (), ())


def version_or_none(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None
