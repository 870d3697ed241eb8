"""`flashbuild build`: blocking checks → stage + patch → backend (configure, compile) →
install → manifest.

`build()` is orchestration only: which build system runs is the backend's business
(building/backends/: cmake, setuptools), chosen by the recipe's `[build] backend` and checked
against the tree before anything runs. The patch goes into a staged mirror of the tree inside
the build folder (`<build>/src`, see staging.py), so the user's tree is never changed and each
build folder keeps its own patched files: switching arch and back recompiles nothing.
`--in-place` patches the tree itself, as the playbooks do (revertable with
`flashbuild patch --revert`).
Nothing installed is touched until compile has succeeded, so a compile error (BuildError with
the first error, the log path and its tail) or a Ctrl-C (Interrupted; Ninja's own state makes
the next run resume) leaves the previous install intact.

An unchanged re-run is a no-op: the patch engine rewrites nothing, the backend finds nothing to
do (CMake: configure hash + "ninja: no work to do"; setuptools: the tree and environment stamp),
and the install stamp matches so nothing is copied or pip-installed.
The options of the `flashbuild build` command are resolved in pipeline/command.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import posixpath
import re
import site
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from flashbuild import __version__
from flashbuild.arch import BuildTarget
from flashbuild.building import (
    archcheck,
    backends,
    builddir,
    cmake,
    progress,
    staging,
    treecheck,
    vcs,
)
from flashbuild.building.backends import Backend, BackendContext, BackendResult
from flashbuild.building.request import (
    BuildRequest,
    PatchOutcome,
    Step,
    StepTime,
    StreamRunner,
)
from flashbuild.console import plural
from flashbuild.detect.cache import file_fingerprint
from flashbuild.errors import BuildError, ToolchainError, UsageError
from flashbuild.installing import install as installing
from flashbuild.installing import shim
from flashbuild.installing.manifest import (
    MANIFEST_NAME,
    DynamicSmemSymbol,
    Manifest,
    PatchRecord,
)
from flashbuild.installing.manifest import Artifact as ManifestArtifact
from flashbuild.installing.manifest import BinaryImages as ManifestBinary
from flashbuild.installing.manifest import HostCompiler as ManifestHost
from flashbuild.installing.manifest import Toolkit as ManifestToolkit
from flashbuild.installing.resources import loader_shim
from flashbuild.platforms.contain import ContainedRunner
from flashbuild.proc import quote
from flashbuild.recipes.load import recipes_dir
from flashbuild.toolchain_facts import pypi_toolkit_requirement
from flashbuild.verifying.fatbin_headers import (
    BinaryFormatError,
    ImageKind,
    list_image_headers,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from rich.console import Console

    from flashbuild.building.artifacts import BuiltArtifact
    from flashbuild.building.backends import BackendResult
    from flashbuild.building.jobs import JobPlan
    from flashbuild.detect.cuda import Toolkit


@dataclass(frozen=True)
class BuildReport:
    build_dir: Path
    log: Path
    source_dir: Path
    """The user's tree."""
    cmake_source: Path
    """The folder the build system ran from (CMake's source folder, the setup.py's folder):
    in the mirror when staged."""
    backend: str
    """`cmake` or `setuptools`."""
    staging: staging.SyncReport | None
    """What syncing the mirror changed; None with `--in-place`."""
    configured: bool
    """False when the configure hash matched and CMake was not run."""
    ninja_no_work: bool
    edges: int
    """ninja edges run (0 on a no-op)."""
    artifacts: tuple[BuiltArtifact, ...]
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
            "backend": self.backend,
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
                       "note": s.note,
                       **({"parts": {name: round(sec, 4) for name, sec in s.parts}}
                          if s.parts else {})} for s in self.steps],
            "seconds": round(self.seconds, 4),
            "notes": list(self.notes),
        }


def stage_rows(steps: Sequence[StepTime]) -> list[list[str]]:
    """The build's closing table: stage, seconds, what it did. A step with stages of its own
    (CMake's configure, then the compile) shows those; the last row is the total."""
    rows: list[list[str]] = []
    for step in steps:
        note = "skipped" if step.skipped and not step.note else step.note
        if step.parts:
            rows += [[name, f"{seconds:.1f}", note if name == step.name else ""]
                     for name, seconds in step.parts]
        else:
            rows.append([step.name, f"{step.seconds:.1f}", note])
    rows.append(["total", f"{sum(s.seconds for s in steps):.1f}", ""])
    return rows


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
    notes: list[str] = list(request.notes)

    # 1. what the recipe lacks, the backend against the tree, doctor's blocking checks
    t0 = time.monotonic()
    _require_install_table(request)
    backend = backends.backend_for(request.recipe, request.source_dir)
    # Trees that cannot build as they are: said before anything is staged or compiled.
    treecheck.refuse_missing_submodules(request.source_dir, platform=request.platform.name,
                                        archs=request.arch.archs)
    treecheck.refuse_unreadable_version(request.source_dir,
                                        {**request.env, **request.build_env})
    blockers = list(checks()) if checks is not None else []
    if blockers:
        raise ToolchainError(
            f"{plural(len(blockers), 'problem')} "
            f"{'blocks' if len(blockers) == 1 else 'block'} this build",
            evidence="\n".join(f"- {b}" for b in blockers),
            fix="fix each one (`flashbuild doctor --arch ...` shows the details and fixes)",
            details={"blockers": blockers},
        )
    nvcc = _nvcc(request.toolkit, request.cmake_toolkit_root)
    _validate_arch(request, nvcc, runner)
    env = {**request.env, **request.build_env}
    archcheck.check_host_compiler(env, request.build_env, chosen=request.host_compiler.path,
                                  which=lambda name: runner.which(name, env),
                                  user_value=request.env.get("NVCC_CCBIN"))
    for note in backend.preflight(request, runner):
        notes.append(note)
        say(note)
    steps.append(StepTime("checks", time.monotonic() - t0))

    # 2. patch (a mirror of the tree in the build folder, or with --in-place the tree)
    t0 = time.monotonic()
    folder = _folder(request, nvcc, notes=notes, say=say)
    tree, outcome, synced = _patch(request, folder, patch, runner=runner, say=say)
    steps.append(StepTime("patch", time.monotonic() - t0, skipped=patch is None,
                          note=f"{outcome.changed_files} file(s) changed" +
                          (f"; mirror {synced.summary()}" if synced is not None else "")))
    if outcome.changed_files:
        say(f"patched {plural(outcome.changed_files, 'file')}")

    # 3. configure and compile, by the recipe's backend
    t0 = time.monotonic()
    contained = _contained(request, runner, say)
    ctx = BackendContext(
        request=request, folder=folder, tree=tree, outcome=outcome,
        nvcc=nvcc, runner=contained or runner, console=console, show_progress=show_progress,
        say=say, notes=notes)
    built = _backend_build(backend, ctx, contained)
    backend_seconds = time.monotonic() - t0
    steps.append(StepTime("compile", backend_seconds, skipped=built.no_work,
                          note="no work to do" if built.no_work else
                          f"{built.edges} step(s)" + ("; configured" if built.configured
                                                      else ""),
                          parts=(("configure", built.configure_seconds),
                                 ("compile", backend_seconds - built.configure_seconds))
                          if built.configured else ()))
    say("nothing to compile" if built.no_work else
        f"compiled {plural(built.edges, 'step')} with {backend.name}; log: {built.log}")

    # 4. install
    t0 = time.monotonic()
    built = dataclasses.replace(built, artifacts=place_artifacts(request, built.artifacts))
    artifacts = built.artifacts
    dll_dirs = shim.dll_dirs([*request.toolkit.dll_dirs, *request.extra_dll_dirs,
                              *(_wheel_dll_dirs(artifacts)
                                if request.platform.registers_dll_dirs else ())])
    preload, import_torch = (
        _wheel_preloads(artifacts, runner, env, folder.path / PRELOAD_FILE)
        if _preloads(request) else ((), False))
    ptxas = progress.merge_ptxas(folder.path / "logs" / "ptxas.json", built.ptxas)
    manifest = build_manifest(request, outcome, built, dll_dirs, ptxas_info=ptxas,
                              preload=preload, import_torch=import_torch)
    install_plan = _install_plan(request, built, dll_dirs, manifest, folder.path, tree=tree)
    if synced is not None and request.install == "inplace" and _patches_package(request,
                                                                                 outcome):
        notes.append("--install inplace puts the binaries into the source tree, whose package "
                     "files are not patched (the build patched its mirror); use the default "
                     "wheel install, or --in-place, to install the patched package files")
    result = installing.install(install_plan, runner, request.env)
    # What the user should act on, said as the build ends (and kept in the report's notes).
    closing = [*result.warnings,
               *(_gpus_here(manifest, install_plan.name, request.env,
                            shim=install_plan.package is not None)
                 if request.install != "none" else ()),
               *(_placeholder_notes(artifacts, request) if not built.no_work else ())]
    notes += closing
    steps.append(StepTime("install", time.monotonic() - t0, skipped=result.skipped,
                          note=str(result.location or "")))
    if result.location is not None and not result.skipped:
        say(f"installed ({result.mode}) into {result.location}")
        for note in result.notes:
            say(note)
    for note in closing:
        say(note)
    return BuildReport(
        build_dir=folder.path, log=built.log, source_dir=request.source_dir.resolve(),
        cmake_source=built.source_dir, backend=backend.name, staging=synced,
        configured=built.configured, ninja_no_work=built.no_work,
        edges=built.edges, artifacts=artifacts, install=result, jobs=built.plan,
        launcher=built.launcher, steps=tuple(steps), notes=tuple(notes), manifest=manifest)


# --- steps -------------------------------------------------------------------------------

def _nvcc(toolkit: Toolkit, cmake_root: Path | None = None) -> Path:
    """The nvcc CMake must be given. For the PyPI wheel layout that is the copy inside the
    CMake-usable root: nvcc finds its profile, and through it the libraries to link, from its
    own real path, so the wheel's own nvcc fails CMake's compiler check (FACTS.md)."""
    if toolkit.nvcc is None:
        raise ToolchainError(
            f"the CUDA toolkit at {toolkit.root} has no nvcc",
            evidence=f"{toolkit.root}/bin holds no nvcc executable",
            fix=f"install the compiler (`pip install \"{pypi_toolkit_requirement()}\"`) or "
            "point --cuda at a full toolkit",
        )
    if cmake_root is not None and Path(cmake_root) != Path(toolkit.root):
        shaped = Path(cmake_root) / "bin" / Path(toolkit.nvcc).name
        if shaped.is_file():
            return shaped
    return toolkit.nvcc


def _backend_build(backend: Backend, ctx: BackendContext,
                   contained: ContainedRunner | None) -> BackendResult:
    """`backend.build`; under --contain a failure says the build had no network."""
    try:
        return backend.build(ctx)
    except BuildError as exc:
        if contained is None:
            raise
        raise BuildError(
            f"built with --contain (no network): {exc.what.rstrip('.: ')}",
            evidence=(exc.evidence + "\n" if exc.evidence else "") + "--contain ran the "
            f"configure and compile with {contained.containment.summary}: no host can be "
            "reached, pip runs with --no-build-isolation and no index (PIP_NO_INDEX), git "
            "only from local files, CMake's FetchContent disconnected",
            fix="if the build downloads something (CMake `file(DOWNLOAD)`, FetchContent, "
            "pip, git), put it into the tree (or a local path the build reads) first, or "
            "build without --contain; otherwise: " + (exc.fix or "read the log"),
            details=exc.details) from exc


def _contained(request: BuildRequest, runner: StreamRunner,
               say: Step) -> ContainedRunner | None:
    """The runner of a `--contain` build (platforms/contain.py), said in one line."""
    if not request.contain:
        return None
    containment = request.platform.containment()
    say(f"--contain: the configure and compile run with {containment.summary}; pip with "
        "--no-build-isolation and no index")
    return ContainedRunner(runner, containment)


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



def _folder(request: BuildRequest, nvcc: Path, *, notes: list[str],
            say: Step) -> builddir.BuildDir:
    key = builddir.BuildKey(
        recipe=request.recipe.name, arch=request.arch.cmake(), platform=request.platform.name,
        toolkit=f"{nvcc}|{request.toolkit.version}|{request.toolkit.fingerprint}",
        host_compiler=str(request.host_compiler), source=str(request.source_dir.resolve()),
        python=str(request.python))
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
           patch: Callable[[Path], PatchOutcome] | None, *, runner: StreamRunner,
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
    # A setup.py (or CMake file) that asks git for its version must get the tree's answer.
    vcs.link_git(request.source_dir, staged.mirror, folder.path, staged.patched.patched,
                 runner=runner, env=request.env)
    return staged.mirror, staged.patched, staged.sync



def _wheel_dll_dirs(artifacts: Sequence[BuiltArtifact]) -> list[Path]:
    """Folders of the active environment (torch's `lib`, PyPI `nvidia/*`) holding libraries
    the built binaries import, read from their own import tables (Windows only)."""
    # Imported here: binaries.py loads pyelftools and pefile (~100 ms), which a Linux build,
    # the no-op re-run above all, never needs.
    from flashbuild.verifying.binaries import read_link_info  # noqa: PLC0415  # start-up

    needed: set[str] = set()
    for artifact in artifacts:
        try:
            needed.update(read_link_info(artifact.path).needed)
        except BinaryFormatError:
            continue  # verify reports an unreadable binary; install need not guess
    return shim.folders_for_imports(needed, [Path(p) for p in site.getsitepackages()])


#: The build folder's record of the last `_wheel_preloads` answer, with the binaries it read.
PRELOAD_FILE = "preload.json"


def _preloads(request: BuildRequest) -> bool:
    """Whether a loader shim will load wheel libraries first: Linux, and a package to carry
    the shim (none for `--install none` or top-level modules only)."""
    spec = request.recipe.install
    return request.platform.preloads_wheel_libraries and request.install != "none" and \
        spec is not None and spec.package is not None


def _wheel_preloads(artifacts: Sequence[BuiltArtifact], runner: StreamRunner,
                    env: Mapping[str, str], record: Path) -> tuple[tuple[str, ...], bool]:
    """(the PyPI CUDA wheels' libraries (`nvidia/cu13/lib/libcublas.so.13`) that binaries
    which are not torch extensions need and would not find, whether a torch extension needs
    torch's own libraries and would not find them): the loader shim imports torch, then
    loads the libraries (Linux). A torch extension's CUDA libraries are left out: `import
    torch` loads the ones torch was built with. A package whose `__init__.py` imports torch
    first needs no shim for that, but one whose modules are imported by name (`from
    simple_knn._C import f`, its `__init__.py` empty) fails with `libc10.so: cannot open
    shared object file` without it. Read from the binaries' dynamic sections once per
    change of the binaries (`record`: an unchanged re-run reads no ELF); where the wheel
    libraries lie is looked up on every build (a wheel installed since the last one counts)."""
    sites = [Path(p) for p in site.getsitepackages()]
    key = [file_fingerprint(a.path) for a in artifacts]
    names: list[str] | None = None
    torch = False
    try:
        saved = json.loads(record.read_text(encoding="utf-8"))
        if saved.get("key") == key:
            names = [str(n) for n in saved["unresolved"]]
            torch = saved["torch"] is True
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        names = None
    if names is None:
        names, torch = _unresolved(artifacts, runner, env)
        with contextlib.suppress(OSError):
            record.write_text(json.dumps({"key": key, "unresolved": names, "torch": torch}),
                              encoding="utf-8")
    return (tuple(str(p) for p in shim.wheel_libraries(names, sites)) if names else (),
            torch)


def _unresolved(artifacts: Sequence[BuiltArtifact], runner: StreamRunner,
                env: Mapping[str, str]) -> tuple[list[str], bool]:
    """(what the binaries that are not torch extensions would not find, whether a torch
    extension would not find torch's own libraries)."""
    # Imported here: pyelftools and pefile cost ~100 ms, which a no-op re-run never pays.
    from flashbuild.verifying import binaries  # noqa: PLC0415  # start-up

    plain: list[binaries.LinkInfo] = []
    torch_ext: list[binaries.LinkInfo] = []
    for artifact in artifacts:
        try:
            info = binaries.read_link_info(artifact.path)
        except BinaryFormatError:
            continue  # verify reports an unreadable binary; install need not guess
        linked = any(binaries.TORCH_LIB.match(name) for name in info.needed)
        (torch_ext if linked else plain).append(info)
    cache = binaries.ld_cache(runner, env) if plain or torch_ext else {}
    names = binaries.unresolved(plain, cache=cache) if plain else []
    torch = bool(torch_ext) and any(binaries.TORCH_LIB.match(name) for name in
                                    binaries.unresolved(torch_ext, cache=cache))
    return names, torch


def _binary_images(request: BuildRequest, artifacts: Sequence[BuiltArtifact],
                   ) -> tuple[ManifestBinary, ...]:
    """The GPU images each built binary holds, read from its fatbin headers: the loader shim
    compares them with the GPUs present at import. A binary that cannot be read is left out
    (verify reports it); a host-only one holds nothing to check."""
    out = []
    for artifact in artifacts:
        try:
            found = list_image_headers(artifact.path)
        except BinaryFormatError:
            continue
        sass = tuple(i.name for i in found.images if i.kind is ImageKind.SASS)
        ptx = tuple(i.name for i in found.images if i.kind is ImageKind.PTX)
        if sass or ptx:
            out.append(ManifestBinary(path=_manifest_path(request, artifact), sass=sass, ptx=ptx))
    return tuple(out)


def _gpus_here(manifest: Manifest, package: str, env: Mapping[str, str], *,
               shim: bool = True) -> list[str]:
    """A note when this machine's GPUs cannot run what was built (a build for sm_120 on an
    H100): importing the package here raises the loader shim's ImportError, which is right,
    but should not surprise the user who just built it. Top-level modules without a package
    have no shim: the note says the kernels fail at their first launch instead. No driver,
    no note."""
    listed = loader_shim.nvml_gpus()
    if not listed:
        return []
    gpus, certain = loader_shim.visible_gpus(listed, env)
    images = {b.path: b.images for b in manifest.binaries}
    verdict = loader_shim.judge(images, gpus, certain=certain, package=package)
    if verdict.error is None:
        return []
    held = ", ".join(dict.fromkeys(i for b in manifest.binaries for i in b.images))
    if not shim:
        return [f"this machine's {'; '.join(g.describe() for g in gpus)} cannot run this "
                f"build ({held}): `import {package}` here succeeds (no package carries the "
                "loader shim's GPU check) and its first kernel launch fails with \"no kernel "
                "image is available\""]
    return [f"this machine's {'; '.join(g.describe() for g in gpus)} cannot run this build "
            f"({held}): `import {package}` here raises ImportError (the loader shim's GPU "
            f"check; {loader_shim.CHECK_VARIABLE}=0 imports it anyway, and verify turns the "
            "check off by itself)"]


def _placeholder_notes(artifacts: Sequence[BuiltArtifact], request: BuildRequest) -> list[str]:
    """What verify's placeholder check will say, said when the build ends: kernels whose code
    for a target only traps (an `#if __CUDA_ARCH__` branch the target takes), so a build that
    compiled and links is not mistaken for working kernels. Read only after a build that
    compiled something (an unchanged re-run said it already)."""
    # Imported here: the cubin reader loads pyelftools (~80 ms), which the no-op re-run, the
    # build the user repeats most, never needs.
    from flashbuild.verifying import placeholders  # noqa: PLC0415  # start-up

    per_arch: dict[str, list[placeholders.PlaceholderKernels]] = {}
    for artifact in artifacts:
        try:
            report = placeholders.placeholder_report(
                artifact.path, [t.arch for t in request.arch.targets])
        except BinaryFormatError:
            continue  # verify reports an unreadable binary
        for entry in report:
            per_arch.setdefault(entry.arch, []).append(entry)
    notes = []
    for arch, entries in per_arch.items():
        summed = placeholders.arch_placeholders(entries)
        names = [k.short for k in summed.placeholders]
        if not names:
            continue
        every = summed.verdict is placeholders.Verdict.ALL
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        verdict = "every kernel" if every else f"{len(names)} of {len(summed.judged)} kernels"
        fails = summed.verdict in (placeholders.Verdict.ALL, placeholders.Verdict.MOST)
        units = ("" if every else f"; in {summed.dead_units} of {summed.units} compiled units "
                 "every kernel traps")
        notes.append(f"{verdict} compiled for {arch} only trap{'s' if every else ''} there "
                     f"(a placeholder branch of `#if __CUDA_ARCH__`): {shown}{units}; "
                     f"`flashbuild verify` {'fails' if fails else 'warns'} on it")
    return notes


def rebuild_command(request: BuildRequest) -> str:
    """The command the loader shim names when the GPU present has no image (`{arch}` and
    `{source}` left for it to fill: a wheel may be imported where the tree is not): the tree,
    and the recipe when it was the user's own file."""
    source = request.source_dir.resolve()
    recipe = request.recipe.file.resolve() if request.recipe.file is not None else None
    bundled = recipe is not None and recipe.parent == recipes_dir().resolve()
    if bundled and request.recipe.source_root() == source:
        return "flashbuild build --arch {arch}"  # the bundled recipe's own tree (csrc)
    if bundled or recipe is None:
        return "flashbuild build {source} --arch {arch}"
    return f"flashbuild build {{source}} --recipe {quote([str(recipe)])} --arch {{arch}}"


def build_manifest(request: BuildRequest, outcome: PatchOutcome, built: BackendResult,
                   dll_dirs: Sequence[str], *, ptxas_info: str | None,
                   preload: Sequence[str] = (), import_torch: bool = False) -> Manifest:
    """The manifest beside the module. No timestamps: an unchanged re-run must produce the
    same bytes (so it installs nothing)."""
    tk = request.toolkit
    return Manifest(
        flashbuild=__version__,
        recipe=request.recipe.name,
        platform=request.platform.name,
        archs=tuple(BuildTarget(request.arch).names()),
        toolkit=ManifestToolkit(root=str(tk.root),
                                version=str(tk.release or tk.version or "unknown")),
        host_compiler=ManifestHost(kind=request.host_compiler.kind,
                                   version=request.host_compiler.version,
                                   path=request.host_compiler.path),
        patches=tuple(PatchRecord(id=pid, sha256=digest) for pid, digest in outcome.applied),
        flags={**built.flags, "backend": request.recipe.build.backend,
               "build_excludes": list(outcome.build_excludes)},
        artifacts=tuple(ManifestArtifact(path=_manifest_path(request, a), kind=a.kind,
                                         gpu_code=a.gpu_code)
                        for a in built.artifacts),
        top_level=tuple(installing.top_level_names(built.artifacts)),
        dll_dirs=tuple(dll_dirs),
        preload=tuple(preload),
        import_torch=import_torch,
        exports=tuple(request.recipe.verify.exports),
        kernels=tuple(request.recipe.verify.kernels),
        dynamic_smem_symbols=tuple(
            DynamicSmemSymbol(kernel=kernel, symbol=symbol)
            for kernel, symbol in sorted(request.recipe.verify.dynamic_smem.items())),
        ptxas_info=ptxas_info,
        binaries=_binary_images(request, built.artifacts),
        torch_version=built.torch_version,
    )


#: Where the manifest of an install without a package lies, for relative paths: the wheel's
#: `.dist-info` folder, one level below the import root like a package folder.
_DIST_INFO = "dist.dist-info"


def _manifest_path(request: BuildRequest, artifact: BuiltArtifact) -> str:
    """The artifact's path relative to the manifest's folder: the package folder, or the
    wheel's `.dist-info` without a package (`../rotary_emb.cpython-312-….so`)."""
    spec = request.recipe.install
    if not artifact.relpath or spec is None:
        return artifact.path.name
    folder = spec.package.replace(".", "/") if spec.package is not None else _DIST_INFO
    return posixpath.relpath(artifact.relpath, folder)


def place_artifacts(request: BuildRequest,
                    artifacts: Sequence[BuiltArtifact]) -> tuple[BuiltArtifact, ...]:
    """Each artifact with where it sits below the import root, when that is not the package
    folder: a module `[install] top_level` names goes to the root under its file name (a
    setuptools build already says where pip put each module)."""
    spec = request.recipe.install
    tops = set(spec.top_level) if spec is not None else set()
    return tuple(dataclasses.replace(a, relpath=a.path.name)
                 if not a.relpath and a.kind == "module" and a.name in tops else a
                 for a in artifacts)


def _require_install_table(request: BuildRequest) -> None:
    if request.recipe.install is None and request.install != "none":
        raise UsageError(
            f"the recipe `{request.recipe.name}` has no [install] table",
            evidence=f"--install {request.install} needs the package name and its folder, "
            "or the top-level modules",
            fix="add [install] package/package_dir to the recipe (or `top_level = "
            "[\"<module>\"]` for extension modules with no package), or use `--install none`",
        )


def _install_plan(request: BuildRequest, built: BackendResult,
                  dll_dirs: tuple[str, ...], manifest: Manifest,
                  work_dir: Path, *, tree: Path) -> installing.InstallPlan:
    _require_install_table(request)
    spec = request.recipe.install
    # The wheel takes the package's Python files from the tree that was built (the patched
    # mirror when staged); `inplace` puts the binaries where the user imports from: the tree.
    base = request.source_dir if request.install == "inplace" else tree
    if spec is None:  # --install none
        package: str | None = request.recipe.name
        package_dir: Path | None = work_dir
    else:
        package = spec.package
        package_dir = (base / spec.package_dir).resolve() if spec.package_dir else None
    return installing.InstallPlan(
        mode=request.install, package=package, package_dir=package_dir,
        artifacts=built.artifacts, prebuilt=built.wheel,
        dll_dirs=dll_dirs, preload=manifest.preload, import_torch=manifest.import_torch,
        manifest_name=MANIFEST_NAME,
        install_requirements=request.install_requirements,
        manifest=manifest.dump().encode(), tree=base.resolve(),
        python=request.python, distribution=spec.name if spec else request.recipe.name,
        version=request.version or _wheel_version(request), work_dir=work_dir,
        local_version=_repack_label(request, built),
        images=tuple((b.path, b.images) for b in manifest.binaries),
        rebuild=rebuild_command(request), source=str(request.source_dir.resolve()),
        jit=tuple((a.jit, a.name) for a in built.artifacts if a.jit))


def _patches_package(request: BuildRequest, outcome: PatchOutcome) -> bool:
    """Whether the patch changed a file of the installed package's folder."""
    spec = request.recipe.install
    if spec is None or spec.package_dir is None:
        return False
    package = PurePosixPath(str(spec.package_dir).replace("\\", "/"))
    return any(PurePosixPath(f).is_relative_to(package) for f in outcome.patched)


def _repack_label(request: BuildRequest, built: BackendResult) -> str:
    """The local version a setup.py tree's own wheel gets when its version has none
    (`sm90a.cu130torch2.13`): release assets are one flat list, and two arch groups (`ci
    init` splits a slow matrix by arch), CUDA or torch builds of one version would otherwise
    share a file name (issue 31)."""
    cuda = request.toolkit.release
    last = f"cu{cuda.major}{cuda.minor}" if cuda is not None else ""
    torch = re.match(r"(\d+)\.(\d+)", built.torch_version)
    if torch:
        last += f"torch{torch[1]}.{torch[2]}"
    return ".".join(filter(None, [*_arch_parts(request), last]))


def _arch_parts(request: BuildRequest) -> list[str]:
    """`sm90a`, `sm120` … : the targets as local version segments."""
    return [f"sm{t.arch.code}{t.arch.suffix}" for t in request.arch.targets]


def _wheel_version(request: BuildRequest) -> str:
    # A local version label says what the binary is for: 1+sm90a.cu130.
    archs = ".".join(_arch_parts(request))
    cuda = request.toolkit.release
    label = archs + (f".cu{cuda.major}{cuda.minor}" if cuda is not None else "")
    return f"{request.recipe.recipe.version}+{label}"


# --- the `flashbuild build` command ---------------------------------------------------------
