"""The setuptools backend: a setup.py tree built with torch.utils.cpp_extension.

It builds a wheel of the (staged, patched) tree through the tree's PEP 517 backend, its
`build_wheel` hook alone (resources/pep517_wheel.py; `pip wheel` ran setup.py a second time for
the metadata), in this interpreter with no build isolation, so the torch the extension is
compiled against is the installed one, in an environment flashbuild composes:

- `CUDA_HOME` / `CUDA_PATH` = the toolkit flashbuild chose (the CMake-shaped root of a PyPI
  toolkit, whose `lib64` holds the `libcudart.so` torch links), its `bin` first on PATH;
- `TORCH_CUDA_ARCH_LIST` from `--arch` in torch's spelling, `MAX_JOBS` from the memory-aware
  jobs plan, `NVCC_THREADS` where the setup.py reads it, the recipe's `[[build.env]]`;
- the build hook (resources/sitecustomize.py) on PYTHONPATH, which replaces whatever arch
  flags the setup.py hard-codes with `--arch`'s `-gencode` flags and appends the flags MSVC
  needs on Windows (with DISTUTILS_USE_SDK=1, so torch uses the MSVC flashbuild activated).

Afterwards it reads torch's generated build.ninja to prove the arch (archcheck.py), and finds
the extension modules in the wheel. `--install inplace` runs `setup.py build_ext --inplace`
instead, as the FlashMLA guide does, and hands the modules over at their paths in the tree.

An unchanged re-run does no work: the tree's files (size, mtime), the command and the
environment are hashed into a stamp beside the wheel, and setup.py is not run when it matches.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sysconfig
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from flashbuild.building import archcheck, builddir, progress, staging, vcs
from flashbuild.building.artifacts import BuiltArtifact, copy_from_wheel, ext_suffix
from flashbuild.building.backends import (
    BackendContext,
    BackendResult,
    uses_cpp_extension,
    wrong_tree,
)
from flashbuild.building.jobs import HostResources, plan_jobs, probe_host
from flashbuild.building.launcher import (
    Launcher,
    build_server,
    choose_launcher,
    rates,
    rates_note,
    read_stats,
    serving,
    setuptools_env,
)
from flashbuild.building.toolkit import cccl_include_dir
from flashbuild.buildsystems.base import read_text
from flashbuild.detect import pinned
from flashbuild.errors import BuildError, ToolchainError
from flashbuild.source import setuppy, skbuild_settings
from flashbuild.source.reach import gitmodule_paths

if TYPE_CHECKING:
    from collections.abc import Mapping

    from packaging.version import Version

    from flashbuild.arch import ArchSpec
    from flashbuild.building.request import BuildRequest, StreamRunner
    from flashbuild.buildsystems import BackendName
    from flashbuild.platforms.base import Platform
    from flashbuild.recipes.model import Recipe

HOOK_DIR = Path(__file__).resolve().parent / "resources"
STAMP = "setuptools-stamp.json"
#: Lines a setup.py prints when it tries to fetch something during the build (causal-conv1d
#: and flash-attention download a prebuilt wheel unless their FORCE_BUILD switch is set;
#: others `git clone` CUTLASS).
_DOWNLOAD = re.compile(
    r"network access is off during the build|transport '\w+' not allowed|"
    r"Guessing wheel URL|Raw wheel path|urllib\.error|URLError|HTTPError|"
    r"Failed to establish a new connection|Could not resolve host|git clone\b|"
    r"Temporary failure in name resolution", re.IGNORECASE)
_WINDOWS_SDK = "DISTUTILS_USE_SDK"


class SetuptoolsBackend:
    name: BackendName = "setuptools"

    def check_tree(self, tree: Path, recipe: Recipe) -> None:
        if recipe.build.jit:
            # The extensions come from the tree's run-time load() calls, through setup():
            # any setuptools build (a setup.py, or setup.cfg / pyproject.toml only) takes them.
            missing = [f for f in recipe.build.jit if not (tree / f).is_file()]
            if missing:
                raise wrong_tree(recipe, tree, wanted=f"the `jit` file(s) {', '.join(missing)}",
                                 looked=", ".join(str(tree / f) for f in missing))
            files = [e.name for e in os.scandir(tree) if e.is_file()]
            if setuppy.setuptools_packaged(files, lambda rel: read_text(tree / rel)):
                return
            raise wrong_tree(recipe, tree, wanted="a setuptools build (setup.py, setup.cfg or "
                             "a pyproject.toml with setuptools' backend)",
                             looked=str(tree / "pyproject.toml"))
        if not uses_cpp_extension(tree):
            raise wrong_tree(recipe, tree, wanted="setup.py using torch.utils.cpp_extension",
                              looked=str(tree / "setup.py"))

    def preflight(self, request: BuildRequest, runner: StreamRunner) -> tuple[str, ...]:
        check_torch_cuda(probe_torch(request, runner), request)
        return absent_build_requirements(request, runner)

    def build(self, ctx: BackendContext) -> BackendResult:
        request = ctx.request
        torch = probe_torch(request, ctx.runner)
        host = probe_host() if request.jobs is None else HostResources(1, 0)
        plan = plan_jobs(request.jobs, host, request.per_job_bytes)
        folder = ctx.folder.path
        logs = folder / "logs"
        logs.mkdir(exist_ok=True)
        log = logs / "build.log"
        dist = folder / "dist-setuptools"
        report = logs / "hook.jsonl"
        env = build_environment(request, ctx.tree, jobs=plan.ninja_jobs, hook_report=report,
                                build_temp=_build_temp(request, folder), folder=folder)
        launcher, launched = _launch(ctx, env)
        inplace = request.install == "inplace"
        argv = (_inplace_argv(request, ctx.tree) if inplace else
                # The backend's build_wheel hook alone (resources/pep517_wheel.py): `pip wheel`
                # ran the tree's setup.py twice, for the metadata and for the wheel.
                [request.python, str(HOOK_DIR / "pep517_wheel.py"), str(dist)])
        digest = _digest(argv, env, ctx.tree, torch, request.platform,
                         identity=vcs.identity_key(folder))
        previous = _read_stamp(folder)
        wheel: Path | None = None
        if previous is not None and previous.get("digest") == digest:
            wheel = Path(str(previous["wheel"])) if previous.get("wheel") else None
            listed = previous.get("modules")
            kept = [Path(str(p)) for p in listed] if isinstance(listed, list) else []
            if (wheel is None or wheel.is_file()) and kept and all(p.is_file() for p in kept):
                ctx.say("nothing to compile (the tree, its environment and torch are "
                        "unchanged since the last build)")
                return BackendResult(
                    source_dir=ctx.tree, configured=False, no_work=True, edges=0, log=log,
                    artifacts=_artifacts(request, kept, ctx.tree if inplace else None,
                                         _device_extensions(report, ctx.tree), jit_modules(report)),
                    plan=plan, argv=tuple(argv), flags=_flags(env, request), wheel=wheel,
                    torch_version=torch["version"])
        report.unlink(missing_ok=True)
        # One sccache server through the whole build (launcher.build_server: a long unit
        # outlived the default idle timeout and missed the cache).
        with build_server(launcher, ctx.runner, env) as server_note:
            if server_note:
                ctx.notes.append(server_note)
                ctx.say(server_note)
            before = read_stats(launcher, ctx.runner, env) if launcher is not None else None
            # What flashbuild set, to reproduce the build by hand (`env $(...) python ...`).
            (logs / "build-env.json").write_text(json.dumps(
                {"argv": argv, "cwd": str(ctx.tree),
                 "env": {k: v for k, v in sorted(env.items()) if request.env.get(k) != v}},
                indent=1), encoding="utf-8")
            if dist.is_dir():
                shutil.rmtree(dist)
            Path(env["FLASHBUILD_VERSION_FILE"]).unlink(missing_ok=True)  # one version per run
            code, monitor = progress.run_tool(argv, runner=ctx.runner, env=env, log_path=log,
                                              cwd=ctx.tree, console=ctx.console,
                                              show_progress=ctx.show_progress,
                                              what="building (setup.py)")
            # Before the exit code: a CUDAExtension without device code is the cause to name
            # even when the build then failed (at the link, for want of what it never compiled).
            host_only = _check_device_code(report, log, ctx.tree)
            if launcher is not None and launcher.name == "sccache":
                # Before the exit code too: a failed link (a CPU torch) still compiled.
                note = rates_note(launcher, rates(before, read_stats(launcher, ctx.runner, env)))
                ctx.notes.append(note)
                ctx.say(note)
        if code != 0:
            raise too_long(report, request, folder) or _jit_failure(
                request, report, failed=True) or \
                _failure(monitor, log, ctx.tree, request.arch, request.toolkit.release)
        _check_arch(request, ctx.tree, env, report)
        if inplace:
            modules = _inplace_modules(ctx.tree, report, request, ctx.runner)
        else:
            wheel = _the_wheel(dist, log)
            modules = _extract_modules(wheel, folder / "out", log)
        _write_stamp(folder, digest, wheel, modules)
        for note in _hook_notes(read_hook_report(report), request, host_only):
            ctx.notes.append(note)
            ctx.say(note)
        return BackendResult(
            source_dir=ctx.tree, configured=False, no_work=False, edges=monitor.edges, log=log,
            artifacts=_artifacts(request, modules, ctx.tree if inplace else None,
                                 _device_extensions(report, ctx.tree),
                                 jit_modules(report)), plan=plan,
            argv=tuple(argv), flags=_flags(env, request), ptxas=monitor.ptxas, wheel=wheel,
            torch_version=torch["version"], launcher=launched)


def _launch(ctx: BackendContext, env: dict[str, str]) -> tuple[Launcher | None, str]:
    """Put `--launcher` in front of cpp_extension's compiles (launcher.setuptools_env);
    the launcher and what it reaches, for the report."""
    request = ctx.request
    launcher = serving(choose_launcher(request.launcher, ctx.runner, request.env), ctx.runner,
                       request.env, ctx.notes)
    if launcher is None:
        return None, "none"
    extra, launched = setuptools_env(launcher, nvcc=ctx.nvcc,
                                     wrapper_dir=ctx.folder.path / "launcher", env=env,
                                     msvc_host=request.platform.msvc_host)
    env.update(extra)
    if request.platform.msvc_host:
        ctx.notes.append(f"{launcher.name} reaches nvcc only: torch's ninja rule runs a bare "
                         "`cl` for the C++ files, which CXX does not change")
    return launcher, launched


# --- torch ----------------------------------------------------------------------------------

#: Build requirements that are programs to the build as much as packages: one found on PATH
#: does the job (torch's BuildExtension runs `ninja`, a setup.py that runs CMake `cmake`).
_TOOLS = ("cmake", "ninja")


def absent_build_requirements(request: BuildRequest, runner: StreamRunner) -> tuple[str, ...]:
    """The pyproject's `[build-system] requires` that this Python lacks altogether (`packaging`,
    `wheel`, `build`): pip's build isolation would have installed them, flashbuild builds
    without it. Installed with everything installed pinned (detect/pinned.py), or named in a
    note. torch is never one of them (the installed torch is the one to build against), and a
    version the installed one does not meet is left as it is: pip without isolation does not
    check versions either, and most such pins (`setuptools<79`) build all the same."""
    wanted = [r for r in skbuild_settings.build_requirements(request.source_dir)
              if canonicalize_name(r.name) != "torch"
              and (r.marker is None or r.marker.evaluate())
              and not (canonicalize_name(r.name) in _TOOLS
                       and runner.which(canonicalize_name(r.name), request.env))]
    if not wanted:
        return ()
    have = pinned.installed_versions(request.python, [r.name for r in wanted], runner,
                                     request.env)
    absent = [str(r) for r in wanted if r.name not in have]
    if not absent:
        return ()
    if request.install_requirements:
        done = pinned.install_pinned(
            request.python, absent, runner, request.env,
            memo=pinned.memo_file(request.platform, request.env))
        if done.ok and not done.held:
            return (f"installed the build requirements {', '.join(absent)} "
                    "(pyproject.toml [build-system] requires), with every installed "
                    "distribution pinned",)
        if done.ok:
            absent = [r for r in absent if r not in done.requirements]
            why = "; ".join(done.held)
        else:
            why = ("pip could not install them with everything installed pinned: "
                   + (done.error.splitlines()[-1] if done.error else "no reason given"))
    else:
        why = "--no-deps"
    shown = " ".join(f'"{r}"' for r in absent)
    return (f"the build requirements {', '.join(absent)} (pyproject.toml [build-system] "
            f"requires) are not installed ({why}); the build goes on without them, as pip "
            f"without build isolation would; if it fails for one: `{request.python} -m pip "
            f"install {shown}`",)


def probe_torch(request: BuildRequest, runner: StreamRunner) -> dict[str, str]:
    """torch's version and CUDA version as the interpreter that builds sees them: its
    `torch/version.py`, found without importing torch (a no-op rebuild must stay fast, and a
    broken torch must not take flashbuild down with it; detect/pyenv.py reads it the same way)."""
    from flashbuild.detect.pyenv import parse_torch_version_file  # noqa: PLC0415  # start-up

    # preflight and build each ask for the same request: the second answer is the first one
    # (a Python start-up, ~35 ms, of a no-op rebuild). Kept by identity, never across requests.
    for asked, by, answer in _LAST_TORCH:
        if asked is request and by is runner:
            return dict(answer)
    code = ("import importlib.util; s = importlib.util.find_spec('torch'); "
            "print(s.origin if s and s.origin else '')")
    done = runner.run([request.python, "-c", code], env=request.env, timeout=120, check=False)
    origin = done.stdout.strip().splitlines()[-1] if done.ok and done.stdout.strip() else ""
    version_py = Path(origin).parent / "version.py" if origin else None
    try:
        fields = (parse_torch_version_file(version_py.read_text(encoding="utf-8"))
                  if version_py is not None else {})
    except OSError:
        fields = {}
    except ValueError as exc:  # not UTF-8 (UnicodeDecodeError), or not Python
        raise ToolchainError(
            f"torch's version file {version_py} cannot be read",
            evidence=f"{type(exc).__name__}: {exc}; torch/version.py is the UTF-8 Python file "
            "torch's installer writes, and Python could not import it either",
            fix=f"reinstall torch: `{request.python} -m pip install --force-reinstall torch` "
            "(with the index URL of your CUDA build)") from exc
    if not fields.get("__version__"):
        raise ToolchainError(
            "torch is not installed for the Python that builds this setup.py project",
            evidence=f"{request.python} finds no torch package"
            + (f" (no readable {version_py})" if version_py else ""),
            fix="install the torch the extension is for into this environment first, e.g. "
            "`pip install torch --index-url https://download.pytorch.org/whl/cu130`; "
            "flashbuild builds without build isolation so that exactly that torch is used",
        )
    found = {"version": str(fields["__version__"]), "cuda": str(fields.get("cuda") or "")}
    _LAST_TORCH[:] = [(request, runner, found)]
    return dict(found)


#: The last answer and whom it was for (at most one).
_LAST_TORCH: list[tuple[object, object, dict[str, str]]] = []


def check_torch_cuda(torch: Mapping[str, str], request: BuildRequest) -> None:
    """torch.utils.cpp_extension refuses an nvcc whose CUDA major differs from torch's: say so
    before the build, with the fix (FACTS.md)."""
    release = request.toolkit.release
    if not torch["cuda"]:
        raise ToolchainError(
            f"the installed torch {torch['version']} is a CPU-only build",
            evidence="torch.version.cuda is None: torch.utils.cpp_extension cannot build CUDA "
            "extensions against it",
            fix="install a CUDA build of torch whose CUDA major matches nvcc "
            f"({release or 'the chosen toolkit'}), e.g. `pip install torch --index-url "
            "https://download.pytorch.org/whl/cu130`",
        )
    major = torch["cuda"].split(".")[0]
    if release is not None and major != str(release.major):
        raise ToolchainError(
            f"torch {torch['version']} is built for CUDA {torch['cuda']}, but nvcc is "
            f"{release}",
            evidence="torch.utils.cpp_extension stops when the CUDA majors differ",
            fix=f"install a torch built for CUDA {release.major} (e.g. the cu{release.major}"
            f"{release.minor} wheels), or point --cuda at a CUDA {major}.x toolkit",
        )


# --- the environment ------------------------------------------------------------------------

def build_environment(request: BuildRequest, tree: Path, *, jobs: int, hook_report: Path,
                      build_temp: Path | None, folder: Path | None = None) -> dict[str, str]:
    """The environment setup.py runs in (see the module docstring); with `folder` (the build
    folder), an ASCII TEMP inside it where nvcc needs one (`builddir.with_ascii_temp`)."""
    env = dict(request.env) if folder is None else \
        builddir.with_ascii_temp(request.env, folder, request.platform)
    root = Path(request.cmake_toolkit_root or request.toolkit.root)
    path_key = next((k for k in env if k.upper() == "PATH"), "PATH")
    env[path_key] = os.pathsep.join([str(root / "bin"), env.get(path_key, "")]).rstrip(
        os.pathsep)
    env["CUDA_HOME"] = env["CUDA_PATH"] = str(root)
    _add_cccl(env, request, root)
    env["TORCH_CUDA_ARCH_LIST"] = request.arch.torch_informational()
    # The tree's own torch.cuda questions are answered for the target (the hook's
    # _present_gpu): the machine that builds need not have the GPU it builds for.
    if request.arch.targets:
        first = request.arch.targets[0].arch
        env["FLASHBUILD_TARGET_CC"] = f"{first.major}.{first.minor}"
    env["MAX_JOBS"] = str(jobs)
    # `cmake --build` without -j (CMake >= 3.12 reads it): a setup.py that runs CMake itself
    # then builds as many at a time as torch's own ninja would.
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(jobs))
    # Several extensions at once where there are cores for it (the hook's FLASHBUILD_EXT_LANES):
    # four jobs a lane, at most four lanes; below eight jobs one extension at a time, as torch
    # builds them.
    env["FLASHBUILD_EXT_LANES"] = str(max(1, min(4, jobs // 4)))
    if _reads(tree, "NVCC_THREADS"):
        env["NVCC_THREADS"] = env.get("NVCC_THREADS", "2")
    env["NINJA_STATUS"] = "[%f/%t] "
    gencode = request.arch.gencode()
    env["FLASHBUILD_GENCODE"] = json.dumps(
        [f"{a}={b}" for a, b in zip(gencode[::2], gencode[1::2], strict=True)])
    nvcc_flags = [*request.cuda_flags]
    if request.platform.msvc_host:
        # torch >= 2.7 headers in .cu files need USE_CUDA with MSVC (C2872 "'std': ambiguous
        # symbol"; SageAttention #101, pytorch #148317); BuildExtension must use the MSVC
        # flashbuild activated instead of activating its own.
        nvcc_flags.append("-DUSE_CUDA")
        env[_WINDOWS_SDK] = "1"
    env["FLASHBUILD_NVCC_FLAGS"] = json.dumps(nvcc_flags)
    env["FLASHBUILD_CXX_FLAGS"] = json.dumps(list(request.cxx_flags))
    env["FLASHBUILD_HOOK_REPORT"] = str(hook_report)
    if request.recipe.build.jit:
        env["FLASHBUILD_JIT"] = json.dumps(list(request.recipe.build.jit))
    env["FLASHBUILD_VERSION_FILE"] = str(hook_report.with_name("version.txt"))
    # No downloads during the build (the hook refuses Python's connections; git may only
    # use local transports), so a fetching setup.py stops at once and is named.
    env["FLASHBUILD_OFFLINE"] = "1"
    env.setdefault("GIT_ALLOW_PROTOCOL", "file")
    if build_temp is not None:
        env["FLASHBUILD_BUILD_TEMP"] = str(build_temp)
    if request.platform.path_limit is not None:
        env["FLASHBUILD_PATH_LIMIT"] = str(request.platform.path_limit)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HOOK_DIR), env.get("PYTHONPATH", ""))
                                        if p)
    env.update(request.build_env)
    return env


def _add_cccl(env: dict[str, str], request: BuildRequest, root: Path) -> None:
    """Give host-compiled sources CUDA 13's CCCL folder (toolkit.cccl_include_dir), through
    the variable the host compiler reads system include folders from (CPLUS_INCLUDE_PATH,
    MSVC's INCLUDE), appended: it is searched after every `-I`/`/I` of the command line, so a
    tree's own CUTLASS or CCCL copy still wins, GCC treats it as a system folder (no warnings
    from CCCL's headers), and nvcc's host passes, which get the folder already, see it once.
    The extension's include_dirs would be the other place; they are `-I` folders, so a
    `-Werror` tree would fail on CCCL's own warnings."""
    cccl = cccl_include_dir(root)
    if cccl is None:
        return
    var = request.platform.host_include_var
    key = next((k for k in env if k.upper() == var.upper()), var)
    folders = [p for p in env.get(key, "").split(request.platform.pathsep) if p]
    if str(cccl) not in folders:
        env[key] = request.platform.pathsep.join([*folders, str(cccl)])


def _reads(tree: Path, name: str) -> bool:
    try:
        return name in (tree / "setup.py").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _build_temp(request: BuildRequest, folder: Path) -> Path | None:
    """On Windows, torch's objects go under `build_temp/<absolute source path>`; a short
    build_temp keeps those paths under 260 characters. Elsewhere setuptools' default is kept."""
    if request.platform.path_limit is None:
        return None
    return folder / "t"


def _inplace_argv(request: BuildRequest, tree: Path) -> list[str]:
    if not (tree / "setup.py").is_file():
        # A setup.cfg or pyproject.toml tree (`[build] jit`): setuptools' own stand-in.
        return [request.python, "-c", setuppy.STAND_IN_SETUP, "build_ext", "--inplace"]
    return [request.python, "setup.py", "build_ext", "--inplace"]


def _flags(env: Mapping[str, str], request: BuildRequest) -> dict[str, object]:
    """The manifest's record of the flags and the environment the build ran with."""
    shown = sorted(_REPORTED_ENV | set(request.build_env))
    return {"cuda": " ".join(json.loads(env["FLASHBUILD_GENCODE"])
                             + json.loads(env["FLASHBUILD_NVCC_FLAGS"])),
            "cxx": " ".join(json.loads(env["FLASHBUILD_CXX_FLAGS"])),
            "env": {k: env[k] for k in shown if k in env}}


_REPORTED_ENV = frozenset({"CUDA_HOME", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "NVCC_THREADS",
                           _WINDOWS_SDK, "CPLUS_INCLUDE_PATH"})


# --- results --------------------------------------------------------------------------------

def read_hook_report(path: Path) -> list[dict[str, object]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            records.append(data)
    return records


def _check_arch(request: BuildRequest, tree: Path, env: Mapping[str, str],
                report: Path) -> None:
    """torch's build.ninja (one per build, under build_temp) carries the nvcc flags of every
    object: they must ask for exactly --arch's SASS. And what the recipe's `jit` files were
    to give was built (`_jit_failure`)."""
    error = _jit_failure(request, report)
    if error is not None:
        raise error
    temp = env.get("FLASHBUILD_BUILD_TEMP")
    roots = [Path(temp)] if temp else sorted((tree / "build").glob("temp*"))
    ninjas = [p for root in roots for p in root.rglob("build.ninja")] if roots else []
    fresh = [p for p in ninjas if "cuda_cflags" in p.read_text(encoding="utf-8",
                                                               errors="replace")]
    if not fresh and not [r for r in read_hook_report(report) if "removed" in r]:
        return  # no CUDA extension was compiled: _extract_modules says what was built
    for ninja in fresh:
        archcheck.check(
            archcheck.ninja_arch_flags(ninja), request.arch, where=ninja,
            env_flags=archcheck.environment_flags(env, request.build_env),
            fix="the setup.py passes arch flags flashbuild could not replace (outside "
            "BuildExtension's extra_compile_args): set the project's own arch switch in the "
            "recipe's [[build.env]] (e.g. `FLASH_ATTN_CUDA_ARCHS = \"{arch_numbers}\"`) or "
            "patch its gencode list with a [[patch]] step")


def _hook_notes(records: list[dict[str, object]], request: BuildRequest,
                host_only: str | None) -> list[str]:
    """What the build hook did that the user should hear of, one note each: host-only CUDA
    extensions, a version computed twice, torch.cuda questions answered for the target, arch
    flags replaced."""
    notes = [host_only] if host_only else []
    frozen = next((r for r in records if "version_frozen" in r), None)
    if frozen is not None:
        notes.append(f"the setup.py computed its version twice and got two answers "
                     f"({frozen['version_frozen']}, then {frozen['version_computed']}: a "
                     "time-based fallback); the first one was kept for every step of the build")
    if any("ninja_turned_on" in r for r in records):
        notes.append("the setup.py turns ninja off (use_ninja=False), which compiles one unit "
                     "at a time: built with ninja instead, as many at a time as --jobs "
                     "(FLASHBUILD_SETUP_NINJA=0 in [[build.env]] keeps it off)")
    for record in records:
        if "jobs_raised" in record:
            notes.append(f"the setup.py ran `{record['jobs_raised']} …` with -j "
                         f"{record.get('from')} ({record.get('where')}); it ran with "
                         f"{record.get('to')} jobs, flashbuild's plan for this machine "
                         "(--jobs; FLASHBUILD_OWN_JOBS=0 in [[build.env]] keeps the tree's)")
    asked = [f"{r['gpu_presented']}() ({r.get('where')})" for r in records
             if "gpu_presented" in r]
    if asked:
        notes.append(f"the setup.py asked {', '.join(dict.fromkeys(asked))}: it was answered "
                     f"for the target GPU ({request.arch.label}), whatever this machine has")
    for record in records:
        old = record.get("std_removed")
        if isinstance(old, list) and old:
            notes.append(f"{record.get('extension')}: removed the setup.py's "
                         f"{' '.join(str(o) for o in old)}: torch's headers need "
                         f"C++{str(record.get('std_needed'))[2:]} or later, which torch's "
                         "build adds itself")
        moved = record.get("pre_included")
        if isinstance(moved, list) and moved:
            notes.append(f"{record.get('extension')}: the setup.py's `-Xcompiler -include,"
                         f"{moved[0]}` became nvcc's own `--pre-include {moved[0]}`"
                         f"{' (and ' + str(len(moved) - 1) + ' more)' if len(moved) > 1 else ''}"
                         ": through -Xcompiler, nvcc 13 has the host compiler read the header "
                         "twice (libstdc++ then redefines std::__terminate)")
        raw = record.get("removed")
        removed = [str(r) for r in raw] if isinstance(raw, list) else []
        if removed:
            notes.append(f"{record.get('extension')}: replaced the setup.py's own arch flags "
                         f"({' '.join(removed[:6])}{' …' if len(removed) > 6 else ''}) with "
                         f"--arch {request.arch.label}")
    return notes


def _check_device_code(report: Path, log: Path, tree: Path) -> str | None:
    """A CUDAExtension (it links cudart) whose sources hold no .cu file compiles no device
    code. When another extension does, the host-only one is a real shape (torch_cluster's
    `_version_cuda` calls the CUDA runtime from C++ and needs cudart, not kernels); so it is
    when the tree holds no CUDA source at all (torch-batch-svd calls cuSOLVER from C++): the
    note returned says so. When no extension compiles device code and the tree has .cu files,
    the build skipped them (a glob that matched nothing, a switch): an error here, since the
    wheel would hold nothing to prove the arch by."""
    records = read_hook_report(report)
    empty = list({str(r.get("extension")): r for r in records
                  if r.get("no_device_code")}.values())  # (a build_ext run twice)
    if not empty:
        return None
    names = ", ".join(f"`{r.get('extension')}`" for r in empty)
    if _plain_only(records):
        # setuptools' own build_ext: no CUDAExtension was declared, so nothing is refused.
        # Host code only when it holds no CUDA source and the tree none either; else (a
        # compiler taught `.cu`, objects it links in) verify decides.
        return _host_only_note(names) if _plain_host_only(records, tree) else None
    with_code = [str(r.get("extension")) for r in records
                 if "removed" in r and not r.get("no_device_code")]
    if with_code:
        return (f"{names}: CUDA extension(s) with host code only (no .cu source; they link the "
                f"CUDA runtime); the device code is in {', '.join(f'`{n}`' for n in with_code)}")
    cuda_sources = _cuda_sources(tree)
    # A submodule not checked out may be where the kernels are: then "no .cu" proves nothing.
    unchecked = _unchecked_submodules(tree)
    if not cuda_sources and not unchecked:
        return _host_only_note(names)
    shown = []
    for record in empty:
        sources = record.get("sources")
        listed = ", ".join(str(s) for s in sources) if isinstance(sources, list) else ""
        shown.append(f"{record.get('extension')}: {listed or 'no sources'}")
    raise BuildError(
        f"the setup.py declares {names} a CUDA extension (CUDAExtension) but gives it no CUDA "
        "source (.cu), and no other extension of the build has one: the build compiled no "
        "device code for --arch",
        evidence=f"sources: {'; '.join(shown)}; " + (
            f"the tree's CUDA sources not compiled: {', '.join(cuda_sources[:4])}"
            f"{' …' if len(cuda_sources) > 4 else ''}" if cuda_sources else
            f"submodules not checked out: {', '.join(unchecked[:4])}") + f"; log: {log}",
        fix="check the setup.py's source list for this configuration (a glob that matched "
        "nothing, a switch such as SKIP_CUDA_BUILD or a missing submodule, set in the recipe's "
        "[[build.env]]); an extension that really holds only host code is a CppExtension",
        details={"extensions": [str(r.get("extension")) for r in empty], "log": str(log)},
    )


def _cuda_sources(tree: Path, limit: int = 8) -> list[str]:
    """Up to `limit` .cu files of the (staged) tree, tree-relative; hidden folders and build
    outputs are not the tree's."""
    found: list[str] = []
    for folder, dirs, files in os.walk(tree):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("build",
                                                                                  "__pycache__"))
        found += sorted(Path(folder, f).relative_to(tree).as_posix() for f in files
                        if f.endswith(".cu"))
        if len(found) >= limit:
            break
    return found[:limit]


def _the_wheel(dist: Path, log: Path) -> Path:
    wheels = sorted(dist.glob("*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise BuildError(
            "the build finished without writing a wheel",
            evidence=f"{dist} holds no .whl; log: {log}",
            fix="read the log: the setup.py may build nothing for this configuration",
        )
    return wheels[-1]


def _extract_modules(wheel: Path, out: Path, log: Path) -> list[Path]:
    """Copy the wheel's extension modules to `out/` (verify and the manifest read them)."""
    found = [dest for _inner, dest in copy_from_wheel(
        wheel, out, lambda inner: inner.suffix in (".so", ".pyd"))]
    if not found:
        raise BuildError(
            f"the build made {wheel.name} without any extension module",
            evidence=f"the wheel holds no .so/.pyd (log: {log}); a setup.py often skips its "
            "CUDA extension when a switch says so (e.g. a SKIP_CUDA_BUILD variable) or when it "
            "finds no CUDA",
            fix="set the project's switch that forces the CUDA build in the recipe's "
            "[[build.env]] (e.g. `CAUSAL_CONV1D_FORCE_BUILD = \"TRUE\"`), and check that "
            "CUDA_HOME points at the toolkit (`flashbuild doctor`)",
            details={"wheel": str(wheel)},
        )
    return found


def _inplace_modules(tree: Path, report: Path, request: BuildRequest,
                     runner: StreamRunner) -> list[Path]:
    """The modules `build_ext --inplace` wrote into the tree: one per extension the hook saw
    (`pkg.sub._C` → `pkg/sub/_C<EXT_SUFFIX>`), and any the recipe names."""
    suffix = ext_suffix(request.python, runner, request.env)
    names = [str(r["extension"]) for r in read_hook_report(report) if "extension" in r]
    names += [a.name for a in request.recipe.artifact if a.kind == "module"]
    found = []
    for name in dict.fromkeys(names):
        path = tree.joinpath(*name.split(".")).with_name(name.split(".")[-1] + suffix)
        if path.is_file():
            found.append(path)
    if not found:
        raise BuildError(
            "build_ext --inplace finished without writing an extension module",
            evidence=f"looked for {', '.join(names) or 'the extensions setup.py declares'} "
            f"with suffix {suffix} in {tree}",
            fix="set the project's switch that forces the CUDA build in the recipe's "
            "[[build.env]], or use the default `--install wheel`",
        )
    return found


def _host_only_note(names: str) -> str:
    return (f"{names}: host code only, and the tree has no CUDA source (.cu) at all: the "
            "module calls CUDA (its runtime or libraries) from C++ and holds no device code, "
            "so nothing in it depends on --arch")


def _plain_only(records: list[dict[str, object]]) -> bool:
    """Whether every extension the hook saw was built by setuptools' own build_ext."""
    exts = [r for r in records if "extension" in r]
    return bool(exts) and all(r.get("plain") for r in exts)


def _plain_host_only(records: list[dict[str, object]], tree: Path) -> bool:
    """Whether setuptools' own build_ext built host code only: no extension with a CUDA
    source, no `.cu` file in the tree, and no submodule left unchecked out (the kernels may
    be there)."""
    return all(r.get("no_device_code") for r in records if "extension" in r) and \
        not _cuda_sources(tree, limit=1) and not _unchecked_submodules(tree)


def _unchecked_submodules(tree: Path) -> list[str]:
    return sorted(m for m in gitmodule_paths(tree)
                  if not (tree / m).is_dir() or not any((tree / m).iterdir()))


def _device_extensions(report: Path, tree: Path) -> frozenset[str] | None:
    """The extensions the build hook saw with device code to compile (those with .cu
    sources; it records them by dotted name, and a CUDAExtension without any as
    `no_device_code`). Every other module of the build holds host code only: a setup.py's
    CppExtension beside its CUDA ones (torch_scatter's `_scatter_cpu`), or every module of a
    tree without device code (empty). None when the hook recorded no extension, and when
    setuptools' own build_ext built them all in a tree with .cu files (see
    `_check_device_code`): then no module is taken for host code only."""
    records = [r for r in read_hook_report(report) if "extension" in r]
    if not records or (_plain_only(records) and not _plain_host_only(records, tree)):
        return None
    return frozenset(str(r["extension"]) for r in records if not r.get("no_device_code"))


def _has_device_code(dotted: str, device: frozenset[str] | None) -> bool:
    """Whether the module `dotted` is one of the hook's device-code extensions (all are, when
    it recorded none). setup.py's `ext_package` prefixes the installed name but not the
    extension's own (`_C` built as `pkg._C`): the hook's name may be a dotted suffix."""
    return device is None or any(dotted == name or dotted.endswith("." + name)
                                 for name in device)


def _artifacts(request: BuildRequest, modules: list[Path], inplace_tree: Path | None,
               device: frozenset[str] | None = None,
               jit: dict[str, str] | None = None) -> tuple[BuiltArtifact, ...]:
    """Modules as artifacts; the recipe's [[artifact]] names must be among them. Where the
    hook named the extensions with device code (`device`), a module outside them says it
    holds host code only (verify then expects no GPU code in it); with no names, every
    module must hold GPU code."""
    suffix = str(sysconfig.get_config_var("EXT_SUFFIX") or "")
    out: list[BuiltArtifact] = []
    for path in modules:
        base = inplace_tree if inplace_tree is not None else _wheel_root(path)
        rel = path.relative_to(base).as_posix() if base is not None else path.name
        stem = path.name[: -len(suffix)] if suffix and path.name.endswith(suffix) else \
            path.name.split(".")[0]
        dotted = ".".join([*PurePosixPath(rel).parent.parts, stem])
        out.append(BuiltArtifact(path, "module", dotted, relpath=rel,
                                 gpu_code=_has_device_code(dotted, device),
                                 jit=(jit or {}).get(dotted, "")))
    names = {a.name for a in out} | {a.name.rsplit(".", 1)[-1] for a in out}
    missing = [a.name for a in request.recipe.artifact if a.name not in names]
    if missing:
        raise BuildError(
            f"the build did not produce {', '.join(missing)}",
            evidence=f"it produced: {', '.join(sorted(a.name for a in out))}",
            fix="check the recipe's [[artifact]] names against the setup.py's ext_modules",
        )
    return tuple(out)


def jit_modules(report: Path) -> dict[str, str]:
    """The extensions the hook built from the recipe's `jit` files: module (dotted) -> the
    name the tree's load() asks for."""
    return {str(r["module"]): str(r["jit"]) for r in read_hook_report(report)
            if "jit" in r and "module" in r}


def _jit_failure(request: BuildRequest, report: Path, *,
                 failed: bool = False) -> BuildError | None:
    """A recipe `jit` file that gave the hook no load() call: the build would install a
    package whose kernels still compile at run time, so it stops and says why. After a
    `failed` build, only when the hook got as far as the files (setup.py may have raised
    first: its own error is the one to show)."""
    if not request.recipe.build.jit:
        return None
    records = read_hook_report(report)
    if failed and not any("jit" in r or "jit_problem" in r for r in records):
        return None
    given = {str(r.get("file")) for r in records if "jit" in r}
    missing = [f for f in request.recipe.build.jit if f not in given]
    if not missing:
        return None
    problems = [str(r["jit_problem"]) for r in records if "jit_problem" in r]
    return BuildError(
        f"the recipe's `jit` file(s) {', '.join(missing)} gave no extension to build ahead of "
        "time",
        evidence="; ".join(dict.fromkeys(problems)) or
        "setup() was not called through setuptools (the hook adds the extensions there)",
        fix="name only files that call torch.utils.cpp_extension.load(...) as they run (at "
        "import, not inside a function), or leave `jit` out and let the package compile its "
        "kernels on first use")


def _wheel_root(path: Path) -> Path | None:
    for parent in path.parents:
        if parent.name == "out":
            return parent
    return None


def too_long(report: Path, request: BuildRequest, folder: Path) -> BuildError | None:
    """The error for a build the hook stopped because an object path would pass the
    platform's limit (None when it did not)."""
    hit = next((r for r in read_hook_report(report) if "too_long" in r), None)
    if hit is None:
        return None
    longest, limit = str(hit["too_long"]), hit.get("limit")
    return BuildError(
        f"an object file path would have {len(longest)} characters, past Windows' "
        f"{limit}-character limit; nothing was compiled",
        evidence=f"torch writes objects under the build folder's `t` folder followed by the "
        f"source's absolute path: {longest}",
        fix=f"build from a shorter path: move or clone the tree to a short folder (e.g. "
        f"C:\\src\\{request.source_dir.name[:12]}) and pass a short --build-dir (e.g. "
        f"C:\\b; now {folder}). LongPathsEnabled does not help: cl.exe, link.exe and nvcc are "
        "not long-path aware",
        details={"object": longest, "length": len(longest), "limit": limit},
    )


def _failure(monitor: progress.NinjaMonitor, log: Path, tree: Path,
             arch: ArchSpec, cuda: Version | None) -> BuildError:
    cmake = progress.cmake_download_failure(monitor.lines, log, tree)
    if cmake is not None:
        return cmake  # a setup.py that runs CMake, whose project fetches a dependency
    downloads = [line.strip() for line in monitor.lines if _DOWNLOAD.search(line)]
    if downloads:
        return BuildError(
            "the setup.py tried to download during the build",
            evidence="\n".join(downloads[:4]) + f"\nlog: {log}",
            fix="builds run offline and reproducibly here: set the project's switch that "
            "builds from source instead of fetching a prebuilt wheel (e.g. "
            "`CAUSAL_CONV1D_FORCE_BUILD = \"TRUE\"`, `FLASH_ATTENTION_FORCE_BUILD = \"TRUE\"` in "
            "[[build.env]]), and check out submodules before building instead of letting "
            "setup.py `git clone` them",
        )
    return progress.failure("building the setup.py project failed", monitor, log, tree=tree,
                            arch=arch, cuda=cuda)


# --- the no-op stamp ------------------------------------------------------------------------

def _digest(argv: list[str], env: Mapping[str, str], tree: Path,
            torch: Mapping[str, str], platform: Platform, *, identity: str = "") -> str:
    h = hashlib.sha256()
    h.update(identity.encode())  # a new commit or tag is a new version
    for hook in sorted(HOOK_DIR.glob("*.py")):  # what the hook does is part of the build
        h.update(hook.read_bytes())
    # Looked up with the platform's rules: vcvarsall's environment spells it `Path`, which
    # a case-sensitive `k in {"PATH"}` missed, so a changed PATH kept a stale no-op stamp.
    lookup = platform.environ(env)
    names = {k for k in env if k.startswith(("FLASHBUILD_", "CUDA", "NVCC"))} | \
        _REPORTED_ENV | {"PATH", "PYTHONPATH", "INCLUDE", "LIB", "CXX", "CC", "CPLUS_INCLUDE_PATH"}
    relevant = {k: lookup[k] for k in names if k in lookup}
    h.update(json.dumps([argv, sorted(relevant.items()), dict(torch)]).encode())
    scanned = staging.scan(tree)
    for rel in sorted(scanned.files):
        if rel.endswith((".so", ".pyd")):
            continue  # build_ext --inplace writes its modules into the tree
        st = scanned.files[rel]
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _read_stamp(folder: Path) -> dict[str, object] | None:
    try:
        data = json.loads((folder / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_stamp(folder: Path, digest: str, wheel: Path | None, modules: list[Path]) -> None:
    payload = {"digest": digest, "wheel": str(wheel) if wheel else None,
               "modules": [str(m) for m in modules]}
    (folder / STAMP).write_text(json.dumps(payload, indent=1), encoding="utf-8")
