"""The scikit-build-core backend: a pyproject.toml tree whose build backend is
`scikit_build_core.build`, which drives CMake itself.

flashbuild builds such a tree the way its users install it, `pip wheel` of the (staged,
patched) tree with this interpreter's pip, without build isolation (so the installed
scikit-build-core, CMake and Ninja run, and nothing is downloaded), and hands it what it
decides as scikit-build-core *config settings* (`-C<name>=<value>`; the names are
scikit-build-core's: docs/configuration.md, "Configuring CMake arguments and defines" and
"Other options", https://scikit-build-core.readthedocs.io/en/latest/configuration.html):

- `-Ccmake.define.CMAKE_CUDA_ARCHITECTURES=<--arch>` and the toolkit:
  `CMAKE_CUDA_COMPILER`, `CUDAToolkit_ROOT`, `CMAKE_MAKE_PROGRAM` (the Ninja flashbuild found);
- the compiler launcher (`CMAKE_CUDA_COMPILER_LAUNCHER` / `CMAKE_CXX_COMPILER_LAUNCHER`);
- the recipe's `[[build.options]]` defines, and its exclude variable;
- flashbuild's own CUDA / C++ flags appended to the pyproject's `CMAKE_CUDA_FLAGS` /
  `CMAKE_CXX_FLAGS` (config settings replace a define of the same name);
- `-Cbuild-dir=<build folder>/skbuild`: a persistent CMake build folder, so a re-run compiles
  only what changed, and so flashbuild can read its build.ninja to prove the arch.

The pyproject's own `[tool.scikit-build]` settings stay in force (pip passes both; config
settings win where they name the same key; `cmake.define` tables are merged). The environment
is the build's: the toolkit's `bin` first on PATH, `CUDACXX`, `CMAKE_GENERATOR=Ninja`,
`CMAKE_BUILD_PARALLEL_LEVEL` from the jobs plan, the recipe's `[[build.env]]`.

Afterwards the arch is checked in `<build-dir>/build.ninja` (archcheck.py, as for CMake), and
the wheel's binaries are its artifacts: extension modules (`*.cpython-*.so`, `*.abi3.so`,
`.pyd`) and shared libraries (`lib*.so`, `.dll`) at their paths inside the wheel. The wheel
is installed as it is plus the loader shim and the manifest (installing/install.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sysconfig
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild.building import archcheck, builddir, cmake, ipo, progress, staging, vcs
from flashbuild.building.artifacts import BuiltArtifact, copy_from_wheel
from flashbuild.building.backends import BackendContext, BackendResult, wrong_tree
from flashbuild.building.backends.cmake import arch_fix, torch_dir
from flashbuild.building.jobs import HostResources, JobPlan, plan_jobs, probe_host
from flashbuild.building.launcher import Launcher, build_server, choose_launcher, serving
from flashbuild.building.toolkit import cccl_include_dir
from flashbuild.detect import pinned
from flashbuild.errors import BuildError, ToolchainError, UsageError
from flashbuild.source import skbuild_settings

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import IO

    from packaging.requirements import Requirement

    from flashbuild.building.request import BuildRequest, StreamRunner
    from flashbuild.buildsystems import BackendName
    from flashbuild.recipes.model import Recipe
    from flashbuild.source.skbuild_settings import SkbuildSettings

#: The build folder's subfolders: CMake's (scikit-build-core's build-dir) and pip's wheels.
BUILD_SUBDIR = "skbuild"
DIST_SUBDIR = "dist-skbuild"
#: A module's file name: `<name>.cpython-311-x86_64-linux-gnu.so`, `<name>.abi3.so`,
#: `<name>.cp311-win_amd64.pyd`, `<name>.pyd`, `<name>.so`.
_MODULE = re.compile(r"^(?P<stem>[A-Za-z_]\w*)(?:\.[\w-]+)?\.(?:so|pyd)$")
_LIBRARY = re.compile(r"^(?:lib(?P<lib>[\w.+-]+?)\.so(?:\.[\d.]+)?|(?P<dll>[\w.+-]+)\.dll)$")


class SkbuildBackend:
    name: BackendName = "skbuild"

    def check_tree(self, tree: Path, recipe: Recipe) -> None:
        if not skbuild_settings.is_skbuild(tree):
            raise wrong_tree(recipe, tree, wanted="pyproject.toml built by scikit-build-core",
                             looked=f"{tree / 'pyproject.toml'} [build-system] build-backend")

    def preflight(self, request: BuildRequest, runner: StreamRunner) -> tuple[str, ...]:
        """A build without isolation needs the pyproject's build requirements installed for
        the interpreter that builds: install the missing ones with everything installed
        pinned, or say which are missing, before anything is staged."""
        if request.install == "inplace":
            raise UsageError(
                "--install inplace is not supported for scikit-build-core trees yet",
                evidence="the skbuild backend builds a wheel with pip; scikit-build-core's own "
                "in-place form is an editable install, which flashbuild does not drive",
                fix="use the default `--install wheel` (or `--install none` to only build)")
        settings = skbuild_settings.read_settings(request.source_dir)
        tools = _tools_found(request, runner)

        def unmet() -> list[tuple[Requirement, str]]:
            return unmet_requirements(settings.requires, installed_versions(
                request, runner, settings.requires), tools=tools)

        problems = unmet()
        notes: tuple[str, ...] = ()
        how = "so pip installs nothing (--no-deps)"
        if problems and request.install_requirements:
            # What pip's build isolation would have installed, into this environment instead,
            # with everything installed (torch) pinned: nothing already there moves.
            wanted = [str(req) for req, _ in problems]
            done = pinned.install_pinned(
                request.python, wanted, runner, request.env,
                memo=pinned.memo_file(request.platform, request.env))
            if done.ok:
                notes = (f"installed the build requirements {', '.join(wanted)} of "
                         f"{settings.project}, with every installed distribution pinned",)
                problems = unmet()
                how = "and pip installed them, but they are still not met"
            else:
                how = ("and pip could not install them with everything installed pinned: "
                       + (done.error.splitlines()[-1] if done.error else "no reason given"))
        if problems:
            wanted_all = " ".join(f'"{r}"' for r in settings.requires)
            lines = [line for _, line in problems]
            raise ToolchainError(
                f"the build requirements of {settings.project} are not all installed for "
                f"{request.python}",
                evidence="; ".join(lines) + " (pyproject.toml [build-system] requires; "
                f"flashbuild builds with --no-build-isolation, {how})",
                fix=f"`{request.python} -m pip install {wanted_all}`, then build again",
                details={"missing": lines})
        return notes

    def build(self, ctx: BackendContext) -> BackendResult:
        request = ctx.request
        settings = skbuild_settings.read_settings(ctx.tree)
        for line in settings.unsupported:
            ctx.notes.append(f"pyproject.toml [tool.scikit-build]: {line}")
        if settings.overrides:
            ctx.say("scikit-build-core overrides applied: " + "; ".join(settings.overrides))
        host = probe_host() if request.jobs is None else HostResources(1, 0)
        plan = plan_jobs(request.jobs, host, request.per_job_bytes)
        folder = ctx.folder.path
        logs = folder / "logs"
        logs.mkdir(exist_ok=True)
        log = logs / "build.log"
        dist = folder / DIST_SUBDIR
        build_dir = folder / BUILD_SUBDIR
        tools = cmake.find_tools(ctx.runner, request.env, request.platform)
        chosen = serving(choose_launcher(request.launcher, ctx.runner, request.env),
                         ctx.runner, request.env, ctx.notes)
        if chosen is not None and chosen.note:
            ctx.notes.append(chosen.note)
        defines = build_defines(request, settings, tools=tools, nvcc=ctx.nvcc,
                                launcher=chosen, excludes=ctx.outcome.build_excludes)
        no_ipo = ipo.without_ipo(ctx.tree, folder, ctx.runner, request.env,
                                 {**settings.defines, **defines})
        if no_ipo is not None:
            defines["CMAKE_PROJECT_INCLUDE"], message = no_ipo
            ctx.notes.append(message)
        argv = pip_argv(request.python, config_settings(defines, build_dir), dist)
        env = build_environment(request, folder, nvcc=ctx.nvcc, jobs=plan.ninja_jobs)
        (logs / "build-env.json").write_text(json.dumps(
            {"argv": argv, "cwd": str(ctx.tree),
             "env": {k: v for k, v in sorted(env.items()) if request.env.get(k) != v}},
            indent=1), encoding="utf-8")
        digest = _digest(argv, env, ctx.tree, request, identity=vcs.identity_key(folder))
        kept = _unchanged(folder, digest)
        if kept is not None:
            ctx.say("nothing to compile (the tree, the settings and the environment are "
                    "unchanged since the last build)")
            wheel, artifacts = kept
            return _result(ctx, settings, defines, argv, plan=plan, chosen=chosen, log=log,
                           wheel=wheel, artifacts=artifacts, no_work=True)
        if dist.is_dir():
            shutil.rmtree(dist)
        gate = ArchGate(ctx.runner, lambda: _check_arch(request, build_dir, env))
        with build_server(chosen, ctx.runner, env) as server_note:
            if server_note:
                ctx.notes.append(server_note)
                ctx.say(server_note)
            code, monitor = progress.run_tool(argv, runner=gate, env=env, log_path=log,
                                              cwd=ctx.tree, console=ctx.console,
                                              show_progress=ctx.show_progress,
                                              what="building (scikit-build-core)")
        if code != 0:
            # A configure that stopped on a toolkit component (ggml-cuda's CUDA::cublas) or
            # on a library nobody has (TBB) is said as the CMake backend says it.
            text = "\n".join(monitor.lines)
            raise cmake.missing_components_error(text, request, log) or \
                cmake.missing_package_error(text, log) or \
                progress.failure("building the scikit-build-core project failed", monitor,
                                   log, tree=ctx.tree, arch=request.arch,
                                   cuda=request.toolkit.release)
        if not gate.checked:
            _check_arch(request, build_dir, env)
        wheel = _the_wheel(dist, log)
        artifacts = wheel_artifacts(wheel, folder / "out", log)
        _check_recipe_artifacts(request, artifacts)
        _write_stamp(folder, digest, wheel, artifacts)
        return _result(ctx, settings, defines, argv, plan=plan, chosen=chosen, log=log,
                       wheel=wheel, artifacts=artifacts, no_work=monitor.no_work,
                       edges=monitor.edges, ptxas=monitor.ptxas)


def _result(ctx: BackendContext, settings: SkbuildSettings, defines: Mapping[str, str],
            argv: Sequence[str], *, plan: JobPlan, chosen: Launcher | None, log: Path,
            wheel: Path, artifacts: tuple[BuiltArtifact, ...], no_work: bool,
            edges: int = 0, ptxas: dict[str, list[str]] | None = None) -> BackendResult:
    return BackendResult(
        source_dir=(ctx.tree / settings.source_dir).resolve(), configured=False,
        no_work=no_work, edges=edges, log=log, artifacts=artifacts, plan=plan,
        launcher=chosen.name if chosen else "none", argv=tuple(argv),
        flags={"cuda": defines.get("CMAKE_CUDA_FLAGS", ""),
               "cxx": defines.get("CMAKE_CXX_FLAGS", ""), "cmake_defines": dict(defines),
               "skbuild": {"project": settings.project, "source_dir": settings.source_dir,
                           "pyproject_defines": settings.defines,
                           "overrides": list(settings.overrides)}},
        ptxas=ptxas or {}, wheel=wheel)


class ArchGate:
    """A runner that proves the arch between CMake's configure and the compile, both of which
    run inside pip: on CMake's "-- Build files have been written to" line (build.ninja is
    complete) it runs `check`, and a BuildError from it ends pip's process tree there, so a
    tree that hard-codes its own arch list fails in seconds, not after compiling it."""

    #: The line CMake prints once it has generated the build system.
    WRITTEN = "-- Build files have been written to"

    def __init__(self, runner: progress.ToolRunner, check: Callable[[], None]) -> None:
        self.runner = runner
        self.check = check
        self.checked = False

    def stream(self, argv: Sequence[str | os.PathLike[str]], *,
               on_line: Callable[[str], None], log: IO[str] | None = None,
               env: Mapping[str, str] | None = None, cwd: Path | None = None,
               timeout: float | None = None) -> int:
        def feed(line: str) -> None:
            on_line(line)
            if not self.checked and self.WRITTEN in line:
                self.checked = True
                self.check()

        return self.runner.stream(argv, on_line=feed, log=log, env=env, cwd=cwd,
                                  timeout=timeout)


# --- what flashbuild passes ---------------------------------------------------------------

def build_defines(request: BuildRequest, settings: SkbuildSettings, *, tools: cmake.Tools,
                  nvcc: Path, launcher: Launcher | None,
                  excludes: Sequence[str] = ()) -> dict[str, str]:
    """The CMake defines flashbuild passes as `cmake.define.*` config settings: the arch, the
    toolkit, the launcher, the recipe's options; flashbuild's flags after the pyproject's."""
    toolkit_root = Path(request.cmake_toolkit_root or request.toolkit.root)
    defines: dict[str, str] = {
        "CMAKE_CUDA_ARCHITECTURES": request.arch.cmake(),
        "CMAKE_CUDA_COMPILER": nvcc.as_posix(),
        "CUDAToolkit_ROOT": toolkit_root.as_posix(),
        "CUDA_TOOLKIT_ROOT_DIR": toolkit_root.as_posix(),  # FindCUDA's (cmake.configure_argv)
        "CMAKE_MAKE_PROGRAM": Path(tools.ninja).as_posix(),
    }
    if launcher is not None:
        defines["CMAKE_CXX_COMPILER_LAUNCHER"] = launcher.path.as_posix()
        if launcher.cuda:
            defines["CMAKE_CUDA_COMPILER_LAUNCHER"] = launcher.path.as_posix()
    if request.exclude_var is not None:
        defines[request.exclude_var] = ";".join(sorted(excludes))
    found_torch = torch_dir()
    if found_torch is not None and "Torch_DIR" not in settings.defines:
        # As the CMake backend passes them (cmake.configure_argv says why).
        defines["Torch_DIR"] = Path(found_torch).as_posix()
        defines["TORCH_CUDA_ARCH_LIST"] = request.arch.torch_informational()
    cccl = cccl_include_dir(toolkit_root)
    if cccl is not None and not cmake.cmake_gives_cccl(tools.cmake):
        defines["CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES"] = cccl.as_posix()
    defines.update(request.cmake_defines)
    for name, flags in (("CMAKE_CUDA_FLAGS", request.cuda_flags),
                        ("CMAKE_CXX_FLAGS", request.cxx_flags)):
        if flags:
            own = defines.get(name, settings.defines.get(name, ""))
            defines[name] = " ".join([own, *flags]).strip()
    # A recipe's `cmake_args` of the `-DNAME=VALUE` form become defines too.
    for arg in request.cmake_args:
        if arg.startswith("-D") and "=" in arg:
            key, value = arg[2:].split("=", 1)
            defines[key.split(":", 1)[0]] = value
    return defines


def config_settings(defines: Mapping[str, str], build_dir: Path) -> list[str]:
    """`-C` options for pip (scikit-build-core's config-settings spelling)."""
    out = [f"-Ccmake.define.{name}={value}" for name, value in defines.items()]
    out.append(f"-Cbuild-dir={build_dir.as_posix()}")
    return out


def pip_argv(python: str, settings: Sequence[str], dist: Path) -> list[str]:
    return [python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-input",
            "--disable-pip-version-check", "-v", *settings, "-w", str(dist), "."]


def build_environment(request: BuildRequest, folder: Path, *, nvcc: Path,
                      jobs: int) -> dict[str, str]:
    env = builddir.with_ascii_temp(request.env, folder, request.platform)
    root = Path(request.cmake_toolkit_root or request.toolkit.root)
    path_key = next((k for k in env if k.upper() == "PATH"), "PATH")
    env[path_key] = os.pathsep.join([str(root / "bin"), env.get(path_key, "")]).rstrip(
        os.pathsep)
    env["CUDA_HOME"] = env["CUDA_PATH"] = str(root)
    env["CUDACXX"] = str(nvcc)
    env["CMAKE_GENERATOR"] = "Ninja"
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs)
    env["NINJA_STATUS"] = cmake.NINJA_STATUS
    env.update(request.build_env)
    return env


# --- build requirements ---------------------------------------------------------------------

def installed_versions(request: BuildRequest, runner: StreamRunner,
                       requires: Sequence[Requirement]) -> dict[str, str]:
    """The installed version of each requirement's distribution, for the interpreter that
    builds (absent: not installed)."""
    return pinned.installed_versions(request.python, [r.name for r in requires], runner,
                                     request.env)


#: Requirements that are tools, not Python packages, to scikit-build-core: it uses a `cmake`
#: and a `ninja` found on PATH as readily as the PyPI wheels (it only asks pip for them when
#: none is found), and flashbuild hands it the ones it found.
_TOOLS = frozenset({"cmake", "ninja"})


def _tools_found(request: BuildRequest, runner: StreamRunner) -> bool:
    try:
        cmake.find_tools(runner, request.env, request.platform)
    except ToolchainError:
        return False
    return True


def unmet_requirements(requires: Sequence[Requirement], installed: Mapping[str, str], *,
                       tools: bool = False) -> list[tuple[Requirement, str]]:
    """Each build requirement that is absent or of a version it excludes, with a line saying
    which (a requirement whose marker does not hold here is not needed; with `tools`, CMake
    and Ninja were found as programs, and their PyPI packages are not needed)."""
    problems = []
    for req in requires:
        if req.marker is not None and not req.marker.evaluate():
            continue
        if tools and req.name.lower() in _TOOLS and req.name not in installed:
            continue
        version = installed.get(req.name)
        if version is None:
            problems.append((req, f"{req} is not installed"))
        elif req.specifier and not req.specifier.contains(version, prereleases=True):
            problems.append((req, f"{req.name} {version} is installed, {req} is required"))
    return problems


# --- results --------------------------------------------------------------------------------

def _check_arch(request: BuildRequest, build_dir: Path, env: Mapping[str, str]) -> None:
    """The arch flags CMake generated (in scikit-build-core's build-dir) against --arch."""
    build_ninja = build_dir / "build.ninja"
    if not build_ninja.is_file():
        return  # not a Ninja build: nothing to read (the verify step still checks the SASS)
    entries = cmake.cache_entries(build_dir, contains="ARCH")
    shown = [f"{e.name}={e.value}" for e in entries if not e.name.startswith(("CMAKE_", "_"))]
    archcheck.check(
        archcheck.ninja_arch_flags(build_ninja), request.arch, where=build_ninja,
        env_flags=archcheck.environment_flags(env, request.build_env),
        extra_evidence=f"CMake cache: {', '.join(shown)}" if shown else "",
        fix=arch_fix(entries, request.source_dir))


def _the_wheel(dist: Path, log: Path) -> Path:
    wheels = sorted(dist.glob("*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise BuildError("pip finished without writing a wheel",
                         evidence=f"{dist} holds no .whl; log: {log}",
                         fix="read the log: scikit-build-core may build nothing for this "
                         "configuration")
    return wheels[-1]


def classify(name: str) -> tuple[str, str] | None:
    """(kind, artifact name) for a binary's file name in a wheel, or None for other files:
    `_C.abi3.so` → (module, _C); `libfoo_cuda.so` → (plugin, foo_cuda)."""
    lib = _LIBRARY.match(name)
    if lib is not None:
        return "plugin", lib["lib"] or lib["dll"]
    mod = _MODULE.match(name)
    if mod is not None:
        return "module", mod["stem"]
    return None


def wheel_artifacts(wheel: Path, out: Path, log: Path) -> tuple[BuiltArtifact, ...]:
    """Copy the wheel's binaries to `out/` (verify and the manifest read them), each with its
    path inside the wheel; a module's name is its dotted import name (`skcuda._skcuda`)."""
    found: list[BuiltArtifact] = []
    copied = copy_from_wheel(wheel, out, lambda inner: ".data" not in inner.parts[0]
                             and classify(inner.name) is not None)
    for inner, dest in copied:
        kind_name = classify(inner.name)
        assert kind_name is not None  # `keep` took only what classify names
        kind, name = kind_name
        dotted = ".".join([*inner.parent.parts, name]) if kind == "module" else name
        found.append(BuiltArtifact(dest, "module" if kind == "module" else "plugin",
                                   dotted, relpath=inner.as_posix()))
    if not found:
        raise BuildError(
            f"pip built {wheel.name} without any extension module or shared library",
            evidence=f"the wheel holds no .so/.pyd/.dll (log: {log}); the CMakeLists may "
            "build its native code only when a cache variable says so, or install() it "
            "elsewhere",
            fix="set the project's switch in the recipe's `[[build.options]] define` (it "
            "reaches CMake as a `cmake.define` config setting), and check its install() "
            "rules", details={"wheel": str(wheel)})
    return tuple(found)


def _check_recipe_artifacts(request: BuildRequest, built: Sequence[BuiltArtifact]) -> None:
    names = {a.name for a in built} | {a.name.rsplit(".", 1)[-1] for a in built}
    missing = [a.name for a in request.recipe.artifact if a.name not in names]
    if missing:
        raise BuildError(
            f"the wheel scikit-build-core built has no {', '.join(missing)}",
            evidence=f"it holds: {', '.join(sorted(a.name for a in built))}",
            fix="check the recipe's [[artifact]] names against the CMakeLists' install() "
            "rules (a scikit-build-core recipe may leave [[artifact]] out: the wheel's "
            "binaries are the artifacts)")



# --- introspection ----------------------------------------------------------------------------

def introspection_request(request: BuildRequest, scratch: Path) -> BuildRequest:
    """The request CMake introspection configures with for a scikit-build-core tree: the
    pyproject's `cmake.source-dir`, `cmake.define`s and `cmake.args` (under the recipe's own
    options, which win, as config settings do), and the `SKBUILD_*` variables
    scikit-build-core gives every configure (`introspection_defines`)."""
    settings = skbuild_settings.read_settings(request.source_dir)
    recipe = request.recipe
    build = replace(recipe.build, cmake_source=settings.source_dir)
    return replace(request, recipe=replace(recipe, build=build),
                   cmake_defines={**introspection_defines(settings, scratch),
                                  **request.cmake_defines},
                   cmake_args=(*settings.args, *request.cmake_args))


def introspection_defines(settings: SkbuildSettings, scratch: Path) -> dict[str, str]:
    """The pyproject's defines after the variables scikit-build-core sets for a wheel build
    (a CMakeLists that reads `SKBUILD_PROJECT_NAME` or `SKBUILD_SABI_COMPONENT` configures as
    it does under pip). The install folders point into `scratch`: introspection installs
    nothing."""
    wheel = scratch / "skbuild-wheel"
    platlib = wheel / "platlib"
    abi3 = bool(re.fullmatch(r"cp3\d+", settings.py_api))
    variables = {
        "SKBUILD": "2", "SKBUILD_CORE_VERSION": _skbuild_version(),
        "SKBUILD_PROJECT_NAME": settings.project, "SKBUILD_PROJECT_VERSION": settings.version,
        "SKBUILD_PROJECT_VERSION_FULL": settings.version, "SKBUILD_STATE": "wheel",
        "SKBUILD_PLATLIB_DIR": platlib.as_posix(),
        **{f"SKBUILD_{part.upper()}_DIR": (wheel / part).as_posix()
           for part in ("data", "headers", "scripts", "metadata", "null")},
        "SKBUILD_SOABI": "abi3" if abi3 else _soabi(),
        "SKBUILD_SABI_COMPONENT": "Development.SABIModule" if abi3 else "",
        "SKBUILD_SABI_VERSION": f"3.{settings.py_api[3:]}" if abi3 else "",
        "CMAKE_BUILD_TYPE": settings.build_type,
        "CMAKE_INSTALL_PREFIX": (platlib / settings.install_dir).as_posix(),
    }
    return {**variables, **settings.defines}


def _skbuild_version() -> str:
    try:
        return metadata.version("scikit-build-core")
    except metadata.PackageNotFoundError:
        return "0"


def _soabi() -> str:
    return str(sysconfig.get_config_var("SOABI") or "")


# --- the no-op stamp ------------------------------------------------------------------------

STAMP = "skbuild-stamp.json"
#: Environment variables whose value changes what pip, scikit-build-core or CMake do.
_ENV_PREFIXES = ("CMAKE_", "CUDA", "SKBUILD_", "NVCC", "FLASHBUILD_")
_ENV_NAMES = frozenset({"PATH", "PYTHONPATH", "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS",
                        "INCLUDE", "LIB", "CPLUS_INCLUDE_PATH", "CMAKE_ARGS"})


def _digest(argv: Sequence[str], env: Mapping[str, str], tree: Path, request: BuildRequest,
            *, identity: str = "") -> str:
    """What the wheel depends on: the command (config settings included), the environment
    that reaches the build, and every file of the tree by size and mtime."""
    h = hashlib.sha256(identity.encode())
    lookup = request.platform.environ(env)
    names = {k for k in env if k.upper().startswith(_ENV_PREFIXES)} | _ENV_NAMES | \
        set(request.build_env)
    h.update(json.dumps([list(argv), sorted((k, lookup[k]) for k in names if k in lookup)])
             .encode())
    scanned = staging.scan(tree)
    for rel in sorted(scanned.files):
        st = scanned.files[rel]
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _unchanged(folder: Path, digest: str) -> tuple[Path, tuple[BuiltArtifact, ...]] | None:
    """The wheel and artifacts of the last build when its stamp matches and its files are
    still there; else None."""
    try:
        data = json.loads((folder / STAMP).read_text(encoding="utf-8"))
        if data["digest"] != digest:
            return None
        wheel = Path(data["wheel"])
        artifacts = tuple(BuiltArtifact(Path(a["path"]), a["kind"], a["name"],
                                        relpath=a["relpath"]) for a in data["artifacts"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not wheel.is_file() or not artifacts or not all(a.path.is_file() for a in artifacts):
        return None
    return wheel, artifacts


def _write_stamp(folder: Path, digest: str, wheel: Path,
                 artifacts: Sequence[BuiltArtifact]) -> None:
    payload = {"digest": digest, "wheel": str(wheel),
               "artifacts": [{"path": str(a.path), "kind": a.kind, "name": a.name,
                              "relpath": a.relpath} for a in artifacts]}
    (folder / STAMP).write_text(json.dumps(payload, indent=1), encoding="utf-8")
