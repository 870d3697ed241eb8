"""`flashbuild build`: blocking checks → patch → configure → compile → install.

Each step is a small function; `build()` runs them in order and returns a `BuildReport`.
The patch goes into a staged mirror of the tree inside the build folder (`<build>/src`, see
staging.py), so the user's tree is never changed and each build folder keeps its own patched
files: switching arch and back recompiles nothing. `--in-place` patches the tree itself, as
the playbooks do (revertable with `flashbuild patch --revert`).
Nothing installed is touched until compile has succeeded, so a compile error (BuildError with
the first error, the log path and its tail) or a Ctrl-C (Interrupted; ninja's own state makes
the next run resume) leaves the previous install intact.

An unchanged re-run is a no-op in well under a second: the patch engine rewrites nothing, the
configure hash matches so CMake is not started, ninja reports "no work to do", and the install
stamp matches so nothing is copied or pip-installed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import sysconfig
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Protocol

from flashbuild import __version__
from flashbuild.building import builddir, cmake, progress, staging
from flashbuild.building.jobs import (
    DEFAULT_JOB_BYTES,
    HostResources,
    JobPlan,
    plan_jobs,
    probe_host,
)
from flashbuild.building.launcher import Launcher, LauncherChoice, choose_launcher
from flashbuild.errors import BuildError, Interrupted, ToolchainError, UsageError
from flashbuild.installing import install as installing
from flashbuild.installing import shim
from flashbuild.installing.manifest import (
    MANIFEST_NAME,
    DynamicSmemSymbol,
    Manifest,
    PatchRecord,
)
from flashbuild.installing.manifest import Artifact as ManifestArtifact
from flashbuild.installing.manifest import HostCompiler as ManifestHost
from flashbuild.installing.manifest import Toolkit as ManifestToolkit

if TYPE_CHECKING:
    from packaging.version import Version
    from rich.console import Console

    from flashbuild.arch import ArchSpec
    from flashbuild.detect.cuda import Toolkit
    from flashbuild.platforms.base import Platform
    from flashbuild.proc import Completed
    from flashbuild.recipes.model import Recipe



class StreamRunner(Protocol):
    """What the build needs from the runner: `ProcessRunner`'s run, which and stream."""

    def run(self, argv: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 60.0, check: bool = True,
            input: str | None = None) -> Completed: ...

    def which(self, program: str, env: Mapping[str, str] | None = None) -> str | None: ...

    def stream(self, argv: Sequence[str | os.PathLike[str]], *, on_line: Callable[[str], None],
               log: IO[str] | None = None, env: Mapping[str, str] | None = None,
               cwd: Path | None = None, timeout: float | None = None) -> int: ...


@dataclass(frozen=True, kw_only=True)
class HostCompiler:
    """The host compiler nvcc uses: kind and version, for the build key and the manifest."""

    kind: str
    """`gcc`, `clang` or `msvc`."""
    version: str
    path: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.version}".strip()


@dataclass(frozen=True, kw_only=True)
class PatchOutcome:
    """What the build needs from the patch step (the lead adapts the engine's PatchReport)."""

    build_excludes: tuple[str, ...] = ()
    """Sources to leave out of the build (relative to the tree)."""
    applied: tuple[tuple[str, str], ...] = ()
    """(step id, sha256 of what it changed) per applied step, for the manifest."""
    changed_files: int = 0
    """Files this run wrote (0 on an unchanged re-run)."""
    patched: tuple[str, ...] = ()
    """Files that differ from the pristine tree (relative paths)."""


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    """Everything one build needs, already validated and resolved."""

    recipe: Recipe
    source_dir: Path
    """The tree (the recipe's source, or --source)."""
    staged: bool = True
    """Patch a mirror of the tree in the build folder (`<build>/src`) and build from it; the
    tree is never changed. False (`--in-place`): patch and build the tree itself."""
    arch: ArchSpec
    """Resolved: no `native` left."""
    toolkit: Toolkit
    """The toolkit doctor chose, or --cuda's."""
    cmake_toolkit_root: Path | None = None
    """A CMake-usable root for it (building.toolkit.cmake_toolkit_root); default its root."""
    platform: Platform
    host_compiler: HostCompiler
    env: Mapping[str, str]
    """The build environment (on Windows: with MSVC activated, see msvc.py)."""
    jobs: int | None = None
    """`--jobs N`; None = auto."""
    launcher: LauncherChoice = "auto"
    install: installing.InstallMode = "wheel"
    build_dir: Path | None = None
    """`--build-dir`: this exact folder instead of one keyed under the build root."""
    build_root: Path | None = None
    python: str = field(default_factory=lambda: sys.executable)
    cmake_defines: Mapping[str, str] = field(default_factory=dict)
    """The recipe's cmake options whose `when` matched."""
    cmake_args: tuple[str, ...] = ()
    cuda_flags: tuple[str, ...] = ()
    """Extra nvcc flags (e.g. the MSVC ones from msvc.py)."""
    cxx_flags: tuple[str, ...] = ()
    exclude_var: str | None = None
    """The recipe's [build] exclude_var."""
    output_dir_var: str | None = None
    """The recipe's [build] output_dir_var."""
    per_job_bytes: int = DEFAULT_JOB_BYTES
    cuda_job_pool_hook: bool = False
    """The project reads FLASHBUILD_NVCC_JOB_POOL and scopes the nvcc pool itself."""
    extra_dll_dirs: tuple[Path, ...] = ()
    """More folders for the shim (torch's lib when linked, PyPI nvidia/* folders in use)."""
    version: str = ""
    """Version of the installed distribution (default: the recipe's)."""


@dataclass(frozen=True)
class StepTime:
    name: str
    seconds: float
    skipped: bool = False
    note: str = ""


@dataclass(frozen=True)
class BuildReport:
    build_dir: Path
    log: Path
    source_dir: Path
    """The user's tree."""
    cmake_source: Path
    """The folder CMake configured from: in the mirror when staged."""
    staging: staging.SyncReport | None
    """What syncing the mirror changed; None with `--in-place`."""
    configured: bool
    """False when the configure hash matched and CMake was not run."""
    ninja_no_work: bool
    edges: int
    """ninja edges run (0 on a no-op)."""
    artifacts: tuple[installing.BuiltArtifact, ...]
    install: installing.InstallResult
    jobs: JobPlan
    launcher: str
    steps: tuple[StepTime, ...]
    notes: tuple[str, ...] = ()
    manifest: Manifest | None = None

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    def to_json(self) -> dict[str, object]:
        return {
            "ok": True,
            "build_dir": str(self.build_dir),
            "log": str(self.log),
            "source_dir": str(self.source_dir),
            "cmake_source": str(self.cmake_source),
            "staged": self.staging is not None,
            "staging": self.staging.to_json() if self.staging is not None else None,
            "configured": self.configured,
            "ninja_no_work": self.ninja_no_work,
            "edges": self.edges,
            "artifacts": [{"name": a.name, "kind": a.kind, "path": str(a.path)}
                          for a in self.artifacts],
            "install": self.install.to_json(),
            "jobs": {"ninja": self.jobs.ninja_jobs, "nvcc": self.jobs.nvcc_jobs,
                     "link": self.jobs.link_jobs, "reason": self.jobs.reason},
            "launcher": self.launcher,
            "steps": [{"name": s.name, "seconds": round(s.seconds, 4), "skipped": s.skipped,
                       "note": s.note} for s in self.steps],
            "seconds": round(self.seconds, 4),
            "notes": list(self.notes),
        }


Step = Callable[[str], None]


def build(request: BuildRequest, *, runner: StreamRunner,
          checks: Callable[[], Sequence[str]] | None = None,
          patch: Callable[[Path], PatchOutcome] | None = None,
          console: Console | None = None, show_progress: bool = False,
          on_step: Step | None = None) -> BuildReport:
    """Run the whole build. `checks` returns doctor's blocking verdicts (one line each);
    `patch(tree)` applies the recipe for this target to `tree` (the build folder's mirror,
    or the source tree with `staged=False`) and returns what the build needs of it."""
    say: Step = on_step or (lambda _msg: None)
    steps: list[StepTime] = []
    notes: list[str] = []

    # 1. doctor's blocking checks (and what the recipe lacks), before anything compiles
    t0 = time.monotonic()
    _require_install_table(request)
    blockers = list(checks()) if checks is not None else []
    if blockers:
        raise ToolchainError(
            f"{len(blockers)} problem(s) block this build",
            evidence="\n".join(f"- {b}" for b in blockers),
            fix="fix each one (`flashbuild doctor --arch ...` shows the details and fixes)",
            details={"blockers": blockers},
        )
    tools = cmake.find_tools(runner, request.env, request.platform)
    nvcc = _nvcc(request.toolkit, request.cmake_toolkit_root)
    _validate_arch(request, nvcc, runner)
    steps.append(StepTime("checks", time.monotonic() - t0))

    # 2. patch (a mirror of the tree in the build folder, or with --in-place the tree)
    t0 = time.monotonic()
    folder = _folder(request, nvcc, notes=notes, say=say)
    tree, outcome, synced = _patch(request, folder, patch, say=say)
    steps.append(StepTime("patch", time.monotonic() - t0, skipped=patch is None,
                          note=f"{outcome.changed_files} file(s) changed" +
                          (f"; mirror {synced.summary()}" if synced is not None else "")))
    if outcome.changed_files:
        say(f"patched {outcome.changed_files} file(s)")

    # 3. configure (only when its inputs changed)
    t0 = time.monotonic()
    setup = _setup(request, folder, tree, tools, nvcc, outcome=outcome, runner=runner,
                   notes=notes)
    _forget_other_source(setup, notes=notes, say=say)
    configured = cmake.needs_configure(folder.path, setup.digest)
    if configured:
        say(f"configuring {folder.path}")
        _configure(setup, runner)
    steps.append(StepTime("configure", time.monotonic() - t0, skipped=not configured))

    # 4. compile
    t0 = time.monotonic()
    log = setup.logs / "build.log"
    monitor = _compile(setup, tools, log, runner, request.recipe.build.targets,
                       console=console, show_progress=show_progress)
    steps.append(StepTime("compile", time.monotonic() - t0, skipped=monitor.no_work,
                          note="no work to do" if monitor.no_work else
                          f"{monitor.edges} step(s)"))
    say("nothing to compile (ninja: no work to do)" if monitor.no_work else
        f"compiled {monitor.edges} step(s); log: {log}")

    # 5. install
    t0 = time.monotonic()
    ext = ext_suffix(request.python, runner, request.env)
    artifacts = find_artifacts(request, setup.output_dir, ext)
    dll_dirs = shim.dll_dirs([*request.toolkit.dll_dirs, *request.extra_dll_dirs,
                              *(_wheel_dll_dirs(artifacts)
                                if request.platform.registers_dll_dirs else ())])
    ptxas = progress.merge_ptxas(setup.folder.path / "logs" / "ptxas.json", monitor.ptxas)
    manifest = build_manifest(request, outcome, artifacts, dll_dirs, argv=setup.argv,
                              ptxas_info=ptxas)
    install_plan = _install_plan(request, artifacts, dll_dirs, manifest, folder.path,
                                 tree=tree)
    if synced is not None and request.install == "inplace" and _patches_package(request,
                                                                                 outcome):
        notes.append("--install inplace puts the binaries into the source tree, whose package "
                     "files are not patched (the build patched its mirror); use the default "
                     "wheel install, or --in-place, to install the patched package files")
    result = installing.install(install_plan, runner, request.env)
    steps.append(StepTime("install", time.monotonic() - t0, skipped=result.skipped,
                          note=str(result.location or "")))
    if result.location is not None and not result.skipped:
        say(f"installed ({result.mode}) into {result.location}")
    return BuildReport(
        build_dir=folder.path, log=log, source_dir=request.source_dir.resolve(),
        cmake_source=setup.source_dir, staging=synced,
        configured=configured, ninja_no_work=monitor.no_work,
        edges=monitor.edges, artifacts=artifacts, install=result, jobs=setup.plan,
        launcher=setup.launcher.name if setup.launcher else "none", steps=tuple(steps),
        notes=tuple(notes),
        manifest=manifest)


# --- steps -------------------------------------------------------------------------------

def _nvcc(toolkit: Toolkit, cmake_root: Path | None = None) -> Path:
    """The nvcc CMake must be given. For the PyPI wheel layout that is the copy inside the
    CMake-usable root: nvcc finds its profile, and through it the libraries to link, from its
    own real path, so the wheel's own nvcc fails CMake's compiler check (FACTS.md)."""
    if toolkit.nvcc is None:
        raise ToolchainError(
            f"the CUDA toolkit at {toolkit.root} has no nvcc",
            evidence=f"{toolkit.root}/bin holds no nvcc executable",
            fix="install the compiler (`pip install \"cuda-toolkit[nvcc,cudart,cccl,crt,nvvm]"
            "==13.0.2\"`) or point --cuda at a full toolkit",
        )
    if cmake_root is not None and Path(cmake_root) != Path(toolkit.root):
        shaped = Path(cmake_root) / "bin" / Path(toolkit.nvcc).name
        if shaped.is_file():
            return shaped
    return toolkit.nvcc


def _validate_arch(request: BuildRequest, nvcc: Path, runner: StreamRunner) -> None:
    if request.arch.native or not request.arch.targets:
        raise UsageError(
            "no target arch to build for",
            evidence="`native` needs a GPU to resolve, and none was found" if
            request.arch.native else "no --arch was given and no GPU was found",
            fix="name the target, e.g. `--arch sm120` (RTX 50xx) or `--arch sm_90a` (H100)",
        )
    codes = request.toolkit.codes or cmake.list_gpu_codes(nvcc, runner, request.env)
    cmake.validate_arch(request.arch, codes, nvcc)


def _pybind11_dir() -> str | None:
    try:
        import pybind11
    except ImportError:  # pragma: no cover - pybind11 is a dependency
        return None
    return str(pybind11.get_cmake_dir())


@dataclass(frozen=True)
class _Setup:
    """The prepared build folder and the configure command for it."""

    folder: builddir.BuildDir
    source_dir: Path
    """What CMake configures from."""
    plan: JobPlan
    launcher: Launcher | None
    output_dir: Path
    argv: list[str]
    env: dict[str, str]
    digest: str
    logs: Path


def _folder(request: BuildRequest, nvcc: Path, *, notes: list[str],
            say: Step) -> builddir.BuildDir:
    key = builddir.BuildKey(
        recipe=request.recipe.name, arch=request.arch.cmake(), platform=request.platform.name,
        toolkit=f"{nvcc}|{request.toolkit.version}|{request.toolkit.fingerprint}",
        host_compiler=str(request.host_compiler))
    folder = builddir.prepare(key, nvcc, root=_build_root(request), explicit=request.build_dir,
                              source_dir=request.source_dir)
    if folder.reason:
        notes.append(folder.reason)
        say(folder.reason)
    return folder


def _build_root(request: BuildRequest) -> Path:
    """`--build-root`, else next to the tree, else (a tree inside an installed wheel or a
    read-only folder) under the per-user cache."""
    return request.build_root or builddir.default_root(
        request.source_dir, cache_dir=request.platform.user_cache_dir(request.env))


def _patch(request: BuildRequest, folder: builddir.BuildDir,
           patch: Callable[[Path], PatchOutcome] | None, *,
           say: Step) -> tuple[Path, PatchOutcome, staging.SyncReport | None]:
    """Patch the build folder's mirror of the tree (or the tree itself when not staged);
    return the tree to build from, the patch outcome and what syncing the mirror did."""
    run = patch if patch is not None else (lambda _tree: PatchOutcome())
    if not request.staged:
        return request.source_dir.resolve(), run(request.source_dir.resolve()), None
    # Another build folder under the build root may sit inside the tree: never mirror those.
    staged = staging.stage(request.source_dir, folder.path, run, skip=[_build_root(request)])
    if staged.sync.changed:
        say(f"staged the tree in {staged.mirror} ({staged.sync.summary()})")
    return staged.mirror, staged.patched, staged.sync


def _setup(request: BuildRequest, folder: builddir.BuildDir, tree: Path, tools: cmake.Tools,
           nvcc: Path, *, outcome: PatchOutcome, runner: StreamRunner,
           notes: list[str]) -> _Setup:
    host = probe_host() if request.jobs is None else HostResources(1, 0)
    plan = plan_jobs(request.jobs, host, request.per_job_bytes)
    chosen = choose_launcher(request.launcher, runner, request.env)
    if chosen is not None and chosen.note:
        notes.append(chosen.note)
    output_dir = folder.path / "out"
    source_dir = (tree / request.recipe.build.cmake_source).resolve()
    inputs = cmake.ConfigureInputs(
        source_dir=source_dir,
        build_dir=folder.path, output_dir=output_dir, nvcc=nvcc,
        toolkit_root=request.cmake_toolkit_root or request.toolkit.root,
        arch=request.arch, python=request.python, pybind11_dir=_pybind11_dir(),
        output_dir_var=request.output_dir_var, options=request.cmake_defines,
        excludes=outcome.build_excludes, exclude_var=request.exclude_var,
        launcher=chosen.path if chosen else None, launch_cuda=chosen.cuda if chosen else True,
        pools=cmake.JobPools(plan.nvcc_jobs, plan.link_jobs, request.cuda_job_pool_hook),
        cuda_flags=request.cuda_flags, cxx_flags=request.cxx_flags,
        extra_args=request.cmake_args)
    argv = cmake.configure_argv(tools, inputs)
    env = {**request.env, "NINJA_STATUS": cmake.NINJA_STATUS}
    logs = folder.path / "logs"
    logs.mkdir(exist_ok=True)
    return _Setup(folder, source_dir, plan, chosen, output_dir, argv, env,
                  cmake.configure_hash(argv, env), logs)


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
    lines: list[str] = []
    with progress.open_log(log_path) as log:
        log.write(f"# {' '.join(setup.argv)}\n")
        code = runner.stream(setup.argv, on_line=lines.append, log=log, env=setup.env,
                             cwd=build_dir)
    if code != 0:
        first = progress.first_error(lines)
        raise BuildError(
            "CMake configure failed",
            evidence=(first.context if first else "") + f"\nlog: {log_path}\n" +
            "\n".join(lines[-20:]),
            fix="read the first error above; the full log is kept at the path shown",
            details={"log": str(log_path), "first_error": first.line if first else None},
        )
    cmake.record_configure(build_dir, setup.digest, setup.argv)


def _compile(setup: _Setup, tools: cmake.Tools, log_path: Path, runner: StreamRunner,
             targets: Sequence[str], *, console: Console | None,
             show_progress: bool) -> progress.NinjaMonitor:
    monitor = progress.NinjaMonitor()
    argv = cmake.build_argv(tools, setup.folder.path, setup.plan.ninja_jobs, targets)
    try:
        with progress.open_log(log_path) as log:
            log.write(f"# {' '.join(argv)}\n")
            log.flush()
            if console is not None and show_progress:
                with progress.live_progress(monitor, console, enabled=True):
                    code = runner.stream(argv, on_line=monitor.feed, log=log, env=setup.env)
            else:
                code = runner.stream(argv, on_line=monitor.feed, log=log, env=setup.env)
    except KeyboardInterrupt:
        raise Interrupted(
            "the build was interrupted",
            evidence=f"ninja stopped at step {monitor.done}/{monitor.total}; log: {log_path}",
            fix="run the same command again: ninja resumes where it stopped, and the previous "
            "install was not touched",
            details={"log": str(log_path)},
        ) from None
    if code != 0:
        first = progress.first_error(monitor.lines)
        raise BuildError(
            f"compiling failed{': ' + first.line if first else ''}",
            evidence=((first.context + "\n\n") if first else "") + f"log: {log_path}\n"
            "--- last lines ---\n" + monitor.tail(20),
            fix="fix the first error shown (later errors often follow from it); the "
            "previous install is untouched and the full log is kept",
            details={"log": str(log_path), "first_error": first.line if first else None,
                     "failed": first.failed_edge if first else None},
        )
    return monitor


def find_artifacts(request: BuildRequest, output_dir: Path,
                   ext: str) -> tuple[installing.BuiltArtifact, ...]:
    """The recipe's artifacts in the output folder: a module is `<name><ext>`, a plugin the
    platform's shared library (`lib<name>.so`, `<name>.dll`)."""
    found: list[installing.BuiltArtifact] = []
    for art in request.recipe.artifact:
        if art.kind == "module":
            names = [f"{art.name}{ext}"]
        else:
            suffix = request.platform.shared_lib_suffix
            names = [f"lib{art.name}{suffix}", f"{art.name}{suffix}"]
        match = next((output_dir / n for n in names if (output_dir / n).is_file()), None)
        if match is None and request.output_dir_var is None:
            # The project chose its own output folders (possibly inside its sources, which
            # here means the staged mirror): take the newest such file in the build folder;
            # a stale binary linked in from the source tree is older than this build's.
            build_folder = output_dir.parent
            candidates = [p for n in names for p in build_folder.rglob(n) if p.is_file()]
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
        found.append(installing.BuiltArtifact(match, art.kind, art.name))
    return tuple(found)


def _wheel_dll_dirs(artifacts: Sequence[installing.BuiltArtifact]) -> list[Path]:
    """Folders of the active environment (torch's `lib`, PyPI `nvidia/*`) holding libraries
    the built binaries import, read from their own import tables."""
    import site

    from flashbuild.verifying.binaries import read_link_info
    from flashbuild.verifying.fatbin import BinaryFormatError

    needed: set[str] = set()
    for artifact in artifacts:
        try:
            needed.update(read_link_info(artifact.path).needed)
        except BinaryFormatError:
            continue  # verify reports an unreadable binary; install need not guess
    return shim.folders_for_imports(needed, [Path(p) for p in site.getsitepackages()])


def ext_suffix(python: str, runner: StreamRunner, env: Mapping[str, str]) -> str:
    """The extension suffix of the interpreter the module is built for (CMake's FindPython
    reads the same value); this interpreter's needs no process."""
    if python == sys.executable or Path(python).resolve() == Path(sys.executable).resolve():
        return str(sysconfig.get_config_var("EXT_SUFFIX"))
    done = runner.run([python, "-c", "import sysconfig; print(sysconfig.get_config_var("
                       "'EXT_SUFFIX'))"], env=env, timeout=60)
    return done.stdout.strip().splitlines()[-1]


def build_manifest(request: BuildRequest, outcome: PatchOutcome,
                   artifacts: Sequence[installing.BuiltArtifact], dll_dirs: Sequence[str], *,
                   argv: Sequence[str], ptxas_info: str | None) -> Manifest:
    """The manifest beside the module. No timestamps: an unchanged re-run must produce the
    same bytes (so it installs nothing)."""
    defines = dict(a[2:].split("=", 1) for a in argv if a.startswith("-D") and "=" in a)
    tk = request.toolkit
    return Manifest(
        flashbuild=__version__,
        recipe=request.recipe.name,
        platform=request.platform.name,
        archs=request.arch.cmake(),
        toolkit=ManifestToolkit(root=str(tk.root),
                                version=str(tk.release or tk.version or "unknown")),
        host_compiler=ManifestHost(kind=request.host_compiler.kind,
                                   version=request.host_compiler.version,
                                   path=request.host_compiler.path),
        patches=tuple(PatchRecord(id=pid, sha256=digest) for pid, digest in outcome.applied),
        flags={"cuda": defines.get("CMAKE_CUDA_FLAGS", ""),
               "cxx": defines.get("CMAKE_CXX_FLAGS", ""),
               "cmake_defines": defines,
               "build_excludes": list(outcome.build_excludes)},
        artifacts=tuple(ManifestArtifact(path=a.path.name, kind=a.kind) for a in artifacts),
        dll_dirs=tuple(dll_dirs),
        exports=tuple(request.recipe.verify.exports),
        dynamic_smem_symbols=tuple(
            DynamicSmemSymbol(kernel=kernel, symbol=symbol)
            for kernel, symbol in sorted(request.recipe.verify.dynamic_smem.items())),
        ptxas_info=ptxas_info,
    )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _require_install_table(request: BuildRequest) -> None:
    if request.recipe.install is None and request.install != "none":
        raise UsageError(
            f"the recipe `{request.recipe.name}` has no [install] table",
            evidence=f"--install {request.install} needs the package name and its folder",
            fix="add [install] package/package_dir to the recipe, or use `--install none`",
        )


def _install_plan(request: BuildRequest, artifacts: tuple[installing.BuiltArtifact, ...],
                  dll_dirs: tuple[str, ...], manifest: Manifest,
                  work_dir: Path, *, tree: Path) -> installing.InstallPlan:
    _require_install_table(request)
    spec = request.recipe.install
    package = spec.package if spec else request.recipe.name
    # The wheel takes the package's Python files from the tree that was built (the patched
    # mirror when staged); `inplace` puts the binaries where the user imports from: the tree.
    base = request.source_dir if request.install == "inplace" else tree
    package_dir = (base / spec.package_dir).resolve() if spec else work_dir
    return installing.InstallPlan(
        mode=request.install, package=package, package_dir=package_dir, artifacts=artifacts,
        dll_dirs=dll_dirs, manifest_name=MANIFEST_NAME,
        manifest=manifest.dump().encode(),
        python=request.python, distribution=package,
        version=request.version or _wheel_version(request), work_dir=work_dir)


def _patches_package(request: BuildRequest, outcome: PatchOutcome) -> bool:
    """Whether the patch changed a file of the installed package's folder."""
    spec = request.recipe.install
    if spec is None:
        return False
    package = PurePosixPath(str(spec.package_dir).replace("\\", "/"))
    return any(PurePosixPath(f).is_relative_to(package) for f in outcome.patched)


def _wheel_version(request: BuildRequest) -> str:
    # A local version label says what the binary is for: 1+sm90a.cu130.
    archs = ".".join(f"sm{t.arch.code}{t.arch.suffix}" for t in request.arch.targets)
    cuda = request.toolkit.release
    label = archs + (f".cu{cuda.major}{cuda.minor}" if cuda is not None else "")
    return f"{request.recipe.recipe.version}+{label}"


# --- the `flashbuild build` command ---------------------------------------------------------

def run_build(*, recipe: str | None, source: Path | None, arch: str | None, cuda: Path | None,
              platform: str | None, jobs_text: str, launcher_text: str, install_text: str,
              build_dir: Path | None, as_json: bool, in_place: bool = False) -> int:
    """Resolve the options (recipe, arch, toolkit, host compiler, MSVC environment), then
    `build()`. Printed output and the JSON document are produced here, not in the CLI."""
    import site

    from flashbuild import platforms
    from flashbuild.arch import parse_arch_spec
    from flashbuild.building.jobs import parse_jobs
    from flashbuild.building.launcher import parse_launcher
    from flashbuild.console import ui
    from flashbuild.patching.engine import patch_tree
    from flashbuild.proc import ProcessRunner
    from flashbuild.recipes.load import load_recipe
    from flashbuild.recipes.when import WhenContext, evaluate

    jobs_n = parse_jobs(jobs_text)
    launcher_choice = parse_launcher(launcher_text)
    mode = installing.parse_install_mode(install_text)
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
    loaded = load_recipe(recipe or "csrc")
    tree = loaded.source_root(source)
    spec = _resolve_arch(parse_arch_spec(arch) if arch else parse_arch_spec("native"), env,
                         runner)
    cache_dir = plat.user_cache_dir(env)
    toolkit = _choose_toolkit(env, runner, plat, cuda=cuda, cache_dir=cache_dir,
                              site_packages=[Path(p) for p in site.getsitepackages()])
    host, build_env, cuda_flags, cxx_flags = _host_environment(
        env, runner, plat, toolkit=toolkit, cache_dir=cache_dir, say=ui.step)
    from flashbuild.building.toolkit import cmake_toolkit_root

    cmake_root = cmake_toolkit_root(toolkit, cache_dir / "toolkits", plat)
    ctx = WhenContext(platform=plat.name, arch=spec, cuda=toolkit.release,
                      compiler=host.kind, compiler_version=_version_or_none(host.version))
    defines: dict[str, str] = {}
    args: list[str] = []
    for option in loaded.build.options:
        if evaluate(option.when, ctx).matched:
            defines.update(option.define)
            args += option.args

    def patch(target: Path) -> PatchOutcome:
        report = patch_tree(loaded, target, ctx)
        return PatchOutcome(
            build_excludes=tuple(report.build_excludes),
            applied=tuple((s.id, s.sha256) for s in report.steps if s.matched),
            changed_files=len(report.files_written), patched=tuple(report.files_changed))

    request = BuildRequest(
        recipe=loaded, source_dir=tree, staged=not in_place, arch=spec, toolkit=toolkit,
        cmake_toolkit_root=cmake_root,
        platform=plat, host_compiler=host, env=build_env, jobs=jobs_n, launcher=launcher_choice,
        install=mode, build_dir=build_dir, cmake_defines=defines, cmake_args=tuple(args),
        cuda_flags=cuda_flags, cxx_flags=cxx_flags,
        output_dir_var=loaded.build.output_dir_var, exclude_var=loaded.build.exclude_var)
    def checks() -> list[str]:
        return doctor_blockers(env, runner, plat, spec=spec, cuda=cuda, cache_dir=cache_dir)

    report = build(request, runner=runner, checks=checks, patch=patch, console=ui.err,
                   show_progress=not as_json and ui.err.is_terminal, on_step=ui.step)
    if as_json:
        ui.emit_json(report.to_json())
    else:
        ui.step(f"build folder {report.build_dir} (log: {report.log}); "
                f"{report.jobs.reason}; launcher: {report.launcher}; "
                f"{report.seconds:.2f} s")
    return 0


#: Doctor rules whose errors do not stop a build: they matter when the module runs (the
#: driver, an `a` target for another GPU in this machine) or only to torch's own extension
#: builder, which `flashbuild build` does not use. `msvc.outside-window` judges the MSVC a
#: plain shell or setuptools would use (VS 2026's 19.50 on windows-latest, which CUDA <= 13.1
#: rejects); the build activates a toolset inside nvcc's window itself, and
#: msvc.pick_toolset raises its own error, before these checks, when none is installed.
NOT_BUILD_BLOCKERS = frozenset({"driver.older-than-toolkit", "target.a-other-sm",
                                "torch.cuda-mismatch", "torch.broken", "torch.arch-missing",
                                "msvc.outside-window"})


#: The doctor probes a build runs before it starts.
BUILD_PROBES = frozenset({"toolkits", "compilers", "host"})


def doctor_blockers(env: Mapping[str, str], runner: StreamRunner, plat: Platform, *,
                    spec: ArchSpec, cuda: Path | None, cache_dir: Path) -> list[str]:
    """Doctor's verdicts for this target that block a build, one line each (title + fix)."""
    from flashbuild.detect.cache import ProbeCache
    from flashbuild.detect.doctor import collect
    from flashbuild.detect.rules import Severity, evaluate

    # Only the probes whose rules can block a build: GPUs and Python/torch only feed
    # run-time verdicts, and a missing cmake/ninja is the build's own clear error. NVML
    # start-up and the torch probe would otherwise dominate a no-op rebuild.
    findings = collect(env, runner, plat, spec=spec, explicit=cuda,
                       cache=ProbeCache(cache_dir), only=BUILD_PROBES)
    return [f"{v.title} (fix: {v.fix})" if v.fix else v.title
            for v in evaluate(findings)
            if v.severity is Severity.ERROR and v.rule_id not in NOT_BUILD_BLOCKERS]


def _resolve_arch(spec: ArchSpec, env: Mapping[str, str], runner: StreamRunner) -> ArchSpec:
    if not spec.native:
        return spec
    from flashbuild.detect.gpu import probe_gpus

    caps = [g.capability for g in probe_gpus(env, runner).gpus]
    return spec.resolve_native(caps)


def _choose_toolkit(env: Mapping[str, str], runner: StreamRunner, plat: Platform, *,
                    cuda: Path | None, cache_dir: Path, site_packages: list[Path]) -> Toolkit:
    from flashbuild.detect.cache import ProbeCache
    from flashbuild.detect.cuda import find_toolkits

    search = find_toolkits(env, runner, plat, explicit=cuda, site_packages=site_packages,
                           cache=ProbeCache(cache_dir))
    if search.chosen is None:
        raise ToolchainError(
            "no CUDA toolkit with nvcc was found",
            evidence=search.reason + (f"; --cuda {cuda}" if cuda else ""),
            fix="pip install \"cuda-toolkit[nvcc,cudart,cccl,crt,nvvm]==13.0.2\" (or flashbuild"
            "[cuda]), install CUDA from NVIDIA, or point --cuda at a toolkit root",
        )
    return search.chosen


def _host_environment(env: Mapping[str, str], runner: StreamRunner, plat: Platform, *,
                      toolkit: Toolkit, cache_dir: Path, say: Step,
                      ) -> tuple[HostCompiler, dict[str, str], tuple[str, ...], tuple[str, ...]]:
    """The host compiler, the environment to build in (MSVC activated on Windows) and the
    extra flags for it."""
    from flashbuild.building import msvc
    from flashbuild.detect.cache import ProbeCache
    from flashbuild.detect.compilers import host_window, probe_host_compilers

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
    return (HostCompiler(kind=kind, version=str(gxx.version or "unknown"), path=gxx.path),
            dict(env), (), ())


def _version_or_none(text: str) -> Version | None:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None
