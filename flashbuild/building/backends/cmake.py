"""The CMake backend: configure with Ninja (only when the configure inputs changed), check the
arch the project really chose, compile, find the recipe's artifacts.

The CMake command lines themselves (tool discovery, `-D` defines, job pools, the configure
hash) are in building/cmake.py.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild import interrupts
from flashbuild.building import archcheck, artifacts, builddir, cmake, cmake_seed, ipo, progress
from flashbuild.building.backends import BackendContext, BackendResult, wrong_tree
from flashbuild.building.jobs import HostResources, JobPlan, plan_jobs, probe_host
from flashbuild.building.launcher import Launcher, build_server, choose_launcher, serving
from flashbuild.building.toolkit import cccl_include_dir
from flashbuild.errors import BuildError, Interrupted, UsageError
from flashbuild.source.cmake_archlists import literal_arch_lists

if TYPE_CHECKING:
    from collections.abc import Sequence

    from flashbuild.building.builddir import BuildDir
    from flashbuild.building.request import BuildRequest, Step, StreamRunner
    from flashbuild.buildsystems import BackendName
    from flashbuild.recipes.model import Recipe
    from flashbuild.source.cmake_fileapi import CacheEntry


class CMakeBackend:
    name: BackendName = "cmake"

    def check_tree(self, tree: Path, recipe: Recipe) -> None:
        lists = tree / recipe.build.cmake_source / "CMakeLists.txt"
        if not lists.is_file():
            raise wrong_tree(recipe, tree, wanted="CMakeLists.txt", looked=str(lists))
        untargeted = [a.name for a in recipe.artifact if not a.target]
        if untargeted:
            raise UsageError(
                f"the recipe `{recipe.name}` names no CMake target for artifact(s) "
                f"{', '.join(untargeted)}",
                evidence="the cmake backend builds the targets the [[artifact]] tables name",
                fix="add `target = \"<cmake target>\"` to each [[artifact]]",
            )

    def preflight(self, request: BuildRequest, runner: StreamRunner) -> tuple[str, ...]:
        """CMake needs nothing beyond doctor's checks."""
        return ()

    def build(self, ctx: BackendContext) -> BackendResult:
        request = ctx.request
        tools = cmake.find_tools(ctx.runner, request.env, request.platform)
        setup = _setup(ctx, tools)
        _forget_other_source(setup, notes=ctx.notes, say=ctx.say)
        configured = cmake.needs_configure(setup.folder.path, setup.digest)
        configure_start = time.monotonic()
        if configured:
            ctx.say(f"configuring {setup.folder.path}")
            _configure(setup, ctx.runner)
        configure_seconds = time.monotonic() - configure_start if configured else 0.0
        _check_arch(setup, request)
        log = setup.logs / "build.log"
        argv = cmake.build_argv(tools, setup.folder.path, setup.plan.ninja_jobs,
                                request.recipe.build.targets)
        with build_server(setup.launcher, ctx.runner, setup.env) as server_note:
            if server_note:
                ctx.notes.append(server_note)
                ctx.say(server_note)
            code, monitor = progress.run_tool(argv, runner=ctx.runner, env=setup.env,
                                              log_path=log, console=ctx.console,
                                              show_progress=ctx.show_progress)
        if code != 0:
            raise progress.failure("compiling failed", monitor, log, tree=ctx.tree,
                                   arch=request.arch, cuda=request.toolkit.release)
        ext = artifacts.ext_suffix(request.python, ctx.runner, request.env)
        defines = dict(a[2:].split("=", 1) for a in setup.argv
                       if a.startswith("-D") and "=" in a)
        return BackendResult(
            source_dir=setup.source_dir, configured=configured, no_work=monitor.no_work,
            edges=monitor.edges, log=log,
            artifacts=find_artifacts(request, setup.output_dir, ext,
                                     source_dir=setup.source_dir), plan=setup.plan,
            launcher=setup.launcher.name if setup.launcher else "none", argv=tuple(setup.argv),
            flags={"cuda": defines.get("CMAKE_CUDA_FLAGS", ""),
                   "cxx": defines.get("CMAKE_CXX_FLAGS", ""), "cmake_defines": defines},
            ptxas=monitor.ptxas, configure_seconds=configure_seconds)


def torch_dir() -> str | None:
    """torch's CMake package folder (`<torch>/share/cmake/Torch`, what
    `torch.utils.cmake_prefix_path` points at) for this interpreter's torch, found without
    importing it; None without torch. A CMakeLists.txt that says `find_package(Torch)`
    expects the user to pass it (torchmcubes: "Could not find a package configuration file
    provided by \"Torch\""); flashbuild does, as it passes pybind11's."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        found = Path(folder) / "share" / "cmake" / "Torch"
        if (found / "TorchConfig.cmake").is_file():
            return str(found)
    return None


def pybind11_dir() -> str | None:
    try:
        import pybind11  # noqa: PLC0415  # optional
    except ImportError:  # pragma: no cover - pybind11 is a dependency
        return None
    return str(pybind11.get_cmake_dir())


@dataclass(frozen=True)
class _Setup:
    """The prepared build folder and the configure command for it."""

    folder: BuildDir
    source_dir: Path
    """What CMake configures from."""
    plan: JobPlan
    launcher: Launcher | None
    output_dir: Path
    argv: list[str]
    env: dict[str, str]
    digest: str
    logs: Path
    toolkit_root: Path
    """The toolkit CMake is given (CUDAToolkit_ROOT)."""
    request: BuildRequest
    """What the build was asked (the toolkit and interpreter a fix names)."""


def _setup(ctx: BackendContext, tools: cmake.Tools) -> _Setup:
    request, folder = ctx.request, ctx.folder
    host = probe_host() if request.jobs is None else HostResources(1, 0)
    plan = plan_jobs(request.jobs, host, request.per_job_bytes)
    chosen = serving(choose_launcher(request.launcher, ctx.runner, request.env), ctx.runner,
                     request.env, ctx.notes)
    if chosen is not None and chosen.note:
        ctx.notes.append(chosen.note)
    output_dir = folder.path / "out"
    source_dir = (ctx.tree / request.recipe.build.cmake_source).resolve()
    options = dict(request.cmake_defines)
    no_ipo = ipo.without_ipo(source_dir, folder.path, ctx.runner, request.env, options)
    if no_ipo is not None:
        options["CMAKE_PROJECT_INCLUDE"], message = no_ipo
        ctx.notes.append(message)
    inputs = cmake.ConfigureInputs(
        source_dir=source_dir,
        build_dir=folder.path, output_dir=output_dir, nvcc=ctx.nvcc,
        toolkit_root=request.cmake_toolkit_root or request.toolkit.root,
        arch=request.arch, python=request.python, pybind11_dir=pybind11_dir(),
        torch_dir=torch_dir(),
        output_dir_var=request.output_dir_var, options=options,
        excludes=ctx.outcome.build_excludes, exclude_var=request.exclude_var,
        launcher=chosen.path if chosen else None, launch_cuda=chosen.cuda if chosen else True,
        pools=cmake.JobPools(plan.nvcc_jobs, plan.link_jobs, request.cuda_job_pool_hook),
        cuda_flags=request.cuda_flags, cxx_flags=request.cxx_flags,
        extra_args=request.cmake_args,
        cccl_dir=cccl_include_dir(Path(request.cmake_toolkit_root or request.toolkit.root)))
    argv = cmake.configure_argv(tools, inputs)
    env = {**builddir.with_ascii_temp(request.env, folder.path, request.platform),
           **request.build_env, "NINJA_STATUS": cmake.NINJA_STATUS}
    logs = folder.path / "logs"
    logs.mkdir(exist_ok=True)
    return _Setup(folder, source_dir, plan, chosen, output_dir, argv, env,
                  cmake.configure_hash(argv, env, request.platform), logs,
                  request.cmake_toolkit_root or request.toolkit.root, request)


def _forget_other_source(setup: _Setup, *, notes: list[str], say: Step) -> None:
    """Drop a CMake cache made for another source folder (the tree itself before staged builds,
    or a switch between staged and `--in-place` in one `--build-dir`): CMake refuses it ("does
    not match the source ... used to generate cache"), so it configures afresh instead."""
    build_dir = setup.folder.path
    cached = cmake.read_cache_value(build_dir, "CMAKE_HOME_DIRECTORY")
    if cached is None or _same_dir(Path(cached), setup.source_dir):
        return
    (build_dir / "CMakeCache.txt").unlink()
    shutil.rmtree(build_dir / "CMakeFiles", ignore_errors=True)
    cmake.forget_configure(build_dir)
    message = (f"{build_dir} was configured from {cached}; it is configured again from "
               f"{setup.source_dir} (everything recompiles once)")
    notes.append(message)
    say(message)


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.is_dir() and a.samefile(b))
    except OSError:
        return False


def _configure(setup: _Setup, runner: StreamRunner) -> None:
    build_dir = setup.folder.path
    log_path = setup.logs / "configure.log"
    cmake.forget_configure(build_dir)
    seeded = cmake_seed.seed(build_dir, setup.argv, setup.env, runner=runner,
                             platform=setup.request.platform)
    cmake.start_configure(build_dir)
    lines: list[str] = []
    try:
        with progress.open_log(log_path) as log:
            log.write(f"# {' '.join(setup.argv)}\n# {seeded.line()}\n")
            code = runner.stream(setup.argv, on_line=lines.append, log=log, env=setup.env,
                                 cwd=build_dir)
    except (KeyboardInterrupt, Interrupted):
        raise Interrupted(
            f"the build was interrupted by {interrupts.describe()} (CMake configure)",
            evidence=f"every process it started was ended; log: {log_path}",
            fix="run the same command again: it configures afresh; the previous install was "
            "not touched",
            details={"log": str(log_path)},
        ) from None
    if code < 0:  # killed by a signal: its files may be half-written (the marker stays)
        raise BuildError(
            f"CMake configure was killed by {cmake.killed_by(-code)}",
            evidence=f"the build folder {build_dir} holds what it wrote until then; log: "
            f"{log_path}\n" + "\n".join(lines[-10:]),
            fix=cmake.killed_fix(-code) + "; the next build sets this folder aside and configures "
            "afresh",
            details={"log": str(log_path), "signal": -code})
    cmake.end_configure(build_dir)
    if code != 0:
        text = "\n".join(lines)
        missing = cmake.missing_components_error(text, setup.request, log_path) or \
            cmake.missing_package_error(text, log_path)
        if missing is not None:
            raise missing
        policy = cmake.policy_minimum_needed(text)
        if policy is not None:
            name, value, why = policy
            raise BuildError(
                f"CMake configure failed: {why}",
                evidence=f"{setup.argv[0]} refused the project's cmake_minimum_required; "
                f"log: {log_path}",
                fix=f"add to the recipe: [[build.options]] define = {{ {name} = \"{value}\" }} "
                "(what CMake's message asks for; `recipe init` drafts it), or build with "
                "CMake 3.x",
                details={"log": str(log_path), "define": f"{name}={value}"})
        first = progress.first_error(lines)
        raise BuildError(
            "CMake configure failed",
            evidence=(first.context if first else "") + f"\nlog: {log_path}\n" +
            "\n".join(lines[-20:]),
            fix="read the first error above; the full log is kept at the path shown",
            details={"log": str(log_path), "first_error": first.line if first else None},
        )
    cmake.record_configure(build_dir, setup.digest, setup.argv)


def _check_arch(setup: _Setup, request: BuildRequest) -> None:
    """Compare the arch flags CMake generated with --arch (see archcheck.py). A project that
    computes its own arch (`GPU_ARCH` from nvidia-smi or a default) is caught here, before
    anything compiles."""
    build_ninja = setup.folder.path / "build.ninja"
    flags = archcheck.ninja_arch_flags(build_ninja)
    entries = cmake.cache_entries(setup.folder.path, contains="ARCH")
    shown = [f"{e.name}={e.value}" for e in entries if not e.name.startswith(("CMAKE_", "_"))]
    archcheck.check(
        flags, request.arch, where=build_ninja,
        env_flags=archcheck.environment_flags(setup.env, request.build_env),
        extra_evidence=f"CMake cache: {', '.join(shown)}" if shown else "",
        fix=arch_fix(entries, request.source_dir))


def arch_fix(entries: Sequence[CacheEntry], source_dir: Path | None = None) -> str:
    """The fix for a CMake tree that chose its own arch: hand --arch to the cache variable
    that holds it. Only a variable that can hold an arch is suggested (cmake.arch_variables),
    never a BOOL such as FlashRT's FA2_ARCH_NATIVE_ONLY, which `{arch_numbers}` would only
    switch. With no such variable, a literal list the CMake files write themselves (a
    target's CUDA_ARCHITECTURES property, `set(CMAKE_CUDA_ARCHITECTURES 80)`) is named by
    file:line with the recipe step that makes it read --arch."""
    candidates = cmake.arch_variables(entries)
    literal = literal_arch_lists(source_dir) if source_dir and not candidates else []
    if literal:
        first = literal[0]
        more = (f" ({len(literal) - 1} more such line(s): "
                + ", ".join(f"{s.file}:{s.line}" for s in literal[1:4])
                + (", ..." if len(literal) > 4 else "") + ")") if len(literal) > 1 else ""
        return (f"{first.file}:{first.line} writes its own arch list (`{first.text}`), over "
                "the CMAKE_CUDA_ARCHITECTURES flashbuild passes from --arch; make it read "
                "--arch with a recipe step: `[[patch]] id = \"arch-from-flag\" transform = "
                f"\"replace-block\"` with `[patch.params] file = {_toml_str(first.file)}`, "
                f"`anchor = {_toml_str(first.text)}`, `block = {_toml_str(first.replacement)}`"
                f"{more}, then build again")
    if candidates:
        where = "the project's own variable(s) " + ", ".join(
            f"{e.name}={e.value}" for e in candidates)
        name = candidates[0].name
    else:
        where = ("a variable or CUDA_ARCHITECTURES property the project sets itself (NAME "
                 "below: the variable its CMakeLists reads the arch from)")
        name = "NAME"
    return (f"the CMakeLists chooses its arch from {where}: hand --arch to it in the recipe, "
            f"e.g. `[[build.options]] define = {{ {name} = \"{{arch_numbers}}\" }}` "
            "(placeholders: {arch_numbers} = 120, {arch_codes} = 120a, {cmake_archs} = "
            "120a-real), then build again")


def _toml_str(text: str) -> str:
    """`text` as a TOML literal string ('...'), or a basic one when it holds a quote."""
    return f"'{text}'" if "'" not in text else json.dumps(text)


def find_artifacts(request: BuildRequest, output_dir: Path, ext: str, *,
                   source_dir: Path | None = None) -> tuple[artifacts.BuiltArtifact, ...]:
    """The recipe's artifacts in the output folder: a module is `<name><ext>`, a plugin the
    platform's shared library (`lib<name>.so`, `<name>.dll`). A project that writes them into
    its own sources (a library next to the package that loads it with ctypes) has them in
    `source_dir`: the staged mirror inside the build folder, or the tree with `--in-place`."""
    found: list[artifacts.BuiltArtifact] = []
    for art in request.recipe.artifact:
        if art.kind == "module":
            # Python also imports a module from `<name>.so` / `<name>.pyd` and, on Linux,
            # `<name>.abi3.so` (importlib.machinery.EXTENSION_SUFFIXES): a C-API module built
            # as a plain SHARED library (libKMCUDA's `libKMCUDA.so`), a stable-ABI one.
            plain = "." + ext.rsplit(".", 1)[-1]
            names = list(dict.fromkeys([f"{art.name}{ext}", *(
                [f"{art.name}.abi3{plain}"] if plain == ".so" else []), f"{art.name}{plain}"]))
        else:
            suffix = request.platform.shared_lib_suffix
            names = [f"lib{art.name}{suffix}", f"{art.name}{suffix}"]
        match = next((output_dir / n for n in names if (output_dir / n).is_file()), None)
        if match is None and request.output_dir_var is None:
            # The project chose its own output folders (possibly inside its sources, which
            # here means the staged mirror): take the newest such file in the build folder;
            # a stale binary linked in from the source tree is older than this build's.
            build_folder = output_dir.parent
            roots = [build_folder]
            if source_dir is not None and not source_dir.resolve().is_relative_to(
                    build_folder.resolve()):
                roots.append(source_dir)
            candidates = [p for root in roots for n in names for p in root.rglob(n)
                          if p.is_file()]
            match = max(candidates, key=lambda p: p.stat().st_mtime, default=None)
        if match is None:
            present = sorted(p.name for p in output_dir.glob("*")) if output_dir.is_dir() else []
            raise BuildError(
                f"the build did not produce the {art.kind} `{art.name}`",
                evidence=f"looked for {', '.join(names)} in {output_dir}; it holds: "
                f"{', '.join(present) or 'nothing'}",
                fix="check the recipe's [[artifact]] names and its [build] output_dir_var (the "
                "CMake variable the project reads for where to write its binaries)",
            )
        found.append(artifacts.BuiltArtifact(match, art.kind, art.name))
    return tuple(found)
