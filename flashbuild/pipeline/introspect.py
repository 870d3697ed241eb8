"""Introspection: ask the build what it compiles, without compiling (DESIGN.md "The tree model").

`introspect(recipe, tree, arch)` resolves the toolkit, host compiler and the recipe's options
exactly as `flashbuild build` does (pipeline/command.py), then:

- CMake trees: writes the File API queries into a scratch folder inside the build root
  (`<build root>/introspect/<name>-<key>`), configures the tree there with Ninja and the same
  defines and arch the build uses (`cmake.configure_argv`), and reads the replies
  (source/cmake_fileapi.py). A configure that stops at generate time only because a CUDA
  toolkit component (`CUDA::cublas`) is absent is configured again with an empty stand-in
  for that target, and the model says so (the build itself still needs the library). When the
  project builds its arch flags from its own variable (`-gencode=arch=compute_${GPU_ARCH}a`)
  and the flags differ from `--arch`, the variable is confirmed by configuring with it set.
- setup.py trees: copies the tree into the scratch folder and runs its setup.py there under
  the build hook in record mode (resources/record_setup.py), with the environment the
  setuptools backend composes; torch writes build.ninja, nothing compiles, network calls fail
  at once, and a run past the timeout is stopped.

Whatever cannot run (no toolkit, another platform, a configure error, a timeout) gives an
`Introspection` with no model and a one-line reason; callers fall back to static reading. The
tree itself is only read: everything is written inside the scratch folder.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild import __version__, buildsystems, platforms
from flashbuild.arch import Arch, ArchSpec, Target
from flashbuild.building import cmake, cmake_seed, vcs
from flashbuild.building.archcheck import expected_sass, ninja_arch_flags
from flashbuild.building.backends import skbuild
from flashbuild.building.backends.cmake import pybind11_dir, torch_dir
from flashbuild.building.builddir import default_root
from flashbuild.building.request import BuildRequest
from flashbuild.building.toolkit import cmake_toolkit_root, stub_compiler
from flashbuild.console import ui
from flashbuild.detect.cuda import python_site_packages
from flashbuild.detect.pyenv import torch_version
from flashbuild.errors import BuildError, FlashbuildError, ToolchainError, UsageError
from flashbuild.pipeline.command import (
    choose_toolkit,
    host_environment,
    recipe_settings,
    version_or_none,
)
from flashbuild.platforms.contain import CMAKE_OFFLINE, offline_env
from flashbuild.proc import ProcessRunner
from flashbuild.recipes.when import WhenContext
from flashbuild.source import cmake_fileapi, setup_record, treemodel
from flashbuild.source.preprocess import Stubs, run_stubbing
from flashbuild.source.treemodel import ArchForm, ArchVariable, Bindings, Introspection

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from flashbuild.building.request import StreamRunner
    from flashbuild.buildsystems import IntrospectionKind
    from flashbuild.recipes.model import Recipe

#: Seconds a configure or a setup.py record may take.
DEFAULT_TIMEOUT = 300.0
# The backends' resources (building/backends/resources), next to the build hook they share.
_RESOURCES = Path(__file__).resolve().parents[1] / "building" / "backends" / "resources"
_STUB = _RESOURCES / "stub_targets.cmake"
_RECORDER = _RESOURCES / "record_setup.py"
#: Folders not copied for a setup.py record (version control, caches, earlier builds).
_SKIP = frozenset({".git", ".hg", ".svn", "__pycache__", ".flashbuild", ".mypy_cache",
                   ".pytest_cache", ".venv", "build", "dist"})
_TOP_ONLY = frozenset({"build", "dist"})


def introspect(recipe: Recipe, tree: Path, spec: ArchSpec, *, platform: str | None = None,
               timeout: float = DEFAULT_TIMEOUT,
               say: Callable[[str], None] | None = None, cache: bool = True,
               bindings: bool = True) -> Introspection:
    """Configure (CMake) or record (setup.py) the tree as `flashbuild build --recipe` would;
    never raises for what the tree or the machine lacks: the reason is the fallback line.

    `cache`: reuse the model of an earlier run whose inputs are unchanged (see `_cache_key`);
    a fallback is never stored, so a machine that gains a toolkit is asked again. `bindings`:
    also preprocess each module's bindings unit for the names it registers (recipe init's
    exports; a scan does not need them, and they cost a host preprocessor run per module)."""
    start = time.monotonic()
    system = buildsystems.get(recipe.build.backend)
    try:
        request, runner = _request(recipe, tree, spec, platform)
        scratch = _scratch(request)
        key = _cache_key(request, scratch, bindings=bindings, git=vcs.tree_identity(
            request.source_dir, runner=runner, env=request.env)) if cache else ""
        hit = _cached(scratch, key) if key else None
        if hit is not None:
            seconds = time.monotonic() - start
            if say is not None:
                say(f"introspection: reused the model of an unchanged tree ({scratch})")
            return Introspection(model=hit, seconds=seconds, cached=True)
        if say is not None:
            say(f"introspection: {system.introspection_step} in {scratch}")
            # Which containment applies is the machine's (docs/introspection.md, "Contained").
            say(f"introspection: contained by {platforms.current().containment().summary}")
        model = _INTROSPECT[system.introspection](request, runner, scratch, timeout,
                                                  bindings=bindings)
        # The model is the recipe's build system's, whichever way it was read (a setup.py
        # that configures CMake itself is still a setuptools build).
        model = replace(model, system=system.name)
    except FlashbuildError as exc:
        return Introspection(model=None, fallback=_one_line(exc),
                             seconds=time.monotonic() - start)
    except (OSError, shutil.Error) as exc:
        # Copying the tree or preparing the scratch folder failed (a permission, a full disk).
        return Introspection(model=None, fallback=f"the scratch folder could not be prepared "
                             f"({exc})", seconds=time.monotonic() - start)
    seconds = time.monotonic() - start
    model = _with_seconds(model, seconds)
    if key:
        _store(scratch, key, model, tree)
    return Introspection(model=model, seconds=seconds)


def introspect_for_draft(recipe: Recipe, tree: Path, spec: ArchSpec,
                         platform: str) -> Introspection:
    """`introspect` as recipe init calls it (one line said before it runs)."""
    return introspect(recipe, tree, spec, platform=platform, say=ui.say)


def _one_line(exc: FlashbuildError) -> str:
    text = exc.what.rstrip(".")
    if exc.evidence:
        text += f" ({exc.evidence.strip().splitlines()[0][:300]})"
    return text


def _with_seconds(model: treemodel.TreeModel, seconds: float) -> treemodel.TreeModel:
    return replace(model, seconds=seconds)


def _request(recipe: Recipe, tree: Path, spec: ArchSpec,
             platform: str | None) -> tuple[BuildRequest, StreamRunner]:
    """The BuildRequest `flashbuild build` would make (pipeline/command.py), for this machine."""
    plat = platforms.current()
    if platform is not None and platform != plat.name:
        raise UsageError(f"introspection configures for this machine ({plat.name}), the "
                         f"target is {platform}")
    if spec.native:
        raise UsageError("introspection needs a named arch (`--arch native` needs a GPU "
                         "to resolve)")
    env = dict(os.environ)
    runner = ProcessRunner()
    cache_dir = plat.user_cache_dir(env)
    chosen_tk = choose_toolkit(env, runner, plat, cuda=None, cache_dir=cache_dir,
                               site_packages=python_site_packages(), targets=spec.archs)
    toolkit = chosen_tk.chosen
    host, build_env, cuda_flags, cxx_flags = host_environment(
        env, runner, plat, toolkit=toolkit, cache_dir=cache_dir, say=lambda _line: None)
    cmake_root = cmake_toolkit_root(toolkit, cache_dir / "toolkits", plat,
                                    stub_with=stub_compiler(runner, host))
    ctx = WhenContext(platform=plat.name, arch=spec, cuda=toolkit.release,
                      compiler=host.kind, compiler_version=version_or_none(host.version),
                      torch=version_or_none(torch_version(python_site_packages()) or ""))
    defines, args, recipe_env = recipe_settings(recipe, ctx, spec)
    request = BuildRequest(
        recipe=recipe, source_dir=tree, arch=spec, toolkit=toolkit, cmake_toolkit_root=cmake_root,
        pypi_home=chosen_tk.pypi_home,
        platform=plat, host_compiler=host, env=build_env, cmake_defines=defines,
        cmake_args=tuple(args), build_env=recipe_env, cuda_flags=cuda_flags,
        cxx_flags=cxx_flags, output_dir_var=recipe.build.output_dir_var,
        exclude_var=recipe.build.exclude_var, python=sys.executable)
    return request, runner


def _scratch(request: BuildRequest) -> Path:
    key = hashlib.sha256("\0".join([
        request.recipe.name, request.arch.cmake(), request.platform.name,
        request.toolkit.fingerprint, str(request.source_dir.resolve())]).encode()).hexdigest()
    root = default_root(request.source_dir,
                        cache_dir=request.platform.user_cache_dir(request.env))
    folder = root / "introspect" / f"{re.sub(r'[^0-9A-Za-z.-]+', '_', request.recipe.name)}-"\
        f"{key[:8]}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# --- the model cache -------------------------------------------------------------------------

#: Raised whenever what introspection records changes, so older stored models are not reused.
CACHE_FORMAT = 4
#: Files whose content decides what the build is: build scripts and the Python they import.
_BUILD_FILES = re.compile(r"(?:^CMakeLists\.txt|\.cmake|\.py|^pyproject\.toml|^setup\.cfg|"
                          r"^MANIFEST\.in|^requirements.*\.txt|^CMakePresets\.json|"
                          r"^Makefile|\.in)$")


def _cache_key(request: BuildRequest, scratch: Path, *, bindings: bool, git: str = "") -> str:
    """What a model depends on that is known before running: flashbuild's version, the
    recipe's build (`_build_inputs`), the arch, the toolkit, the host compiler and the
    interpreter, the content of every build file of the tree (CMake files, setup.py and the
    Python it may import, pyproject, setup.cfg) and the names of all its other files (a
    `file(GLOB …)` or a setup.py `glob` sees a file added), the environment CMake's package
    lookup reads, the tree's git identity (`git`: a version read from git). What the run
    itself says it read (a setup.py's environment variables, the bindings units) is checked
    when a stored model is loaded (`_cached`)."""
    host = request.host_compiler
    h = hashlib.sha256(repr([CACHE_FORMAT, __version__, bindings,
                             _build_inputs(request, scratch),
                             request.arch.cmake(), request.arch.torch_informational(),
                             request.platform.name, request.toolkit.fingerprint,
                             str(request.cmake_toolkit_root), host.path, str(host.version),
                             request.python, str(request.source_dir.resolve()),
                             _lookup_environment(), tree_digest(request.source_dir.resolve()),
                             git, _hook_digest()]).encode())
    return h.hexdigest()


@functools.cache
def _hook_digest() -> str:
    """The build hook and the recorder as they are: what record mode sees is theirs, and a
    model a changed hook would record otherwise must not be reused (the version alone stays
    the same between commits of a checkout)."""
    h = hashlib.sha256()
    for path in sorted(_RESOURCES.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _build_inputs(request: BuildRequest, scratch: Path) -> str:
    """The part of the recipe introspection runs: its name (the scratch folder) and [build]
    (the tree is never patched here, so the steps, [install] and [verify] change nothing).
    For a setup.py, its [[build.env]] tables count as the environment the record runs with,
    not as written: the build sets TORCH_CUDA_ARCH_LIST itself, so a draft that sets it to
    the same value records the same run (recipe init's retry without the drafted environment,
    after a setup.py raised, was the same two torch-importing runs again)."""
    recipe = request.recipe
    if buildsystems.get(recipe.build.backend).introspection != "setup-record":
        return repr((recipe.recipe.name, recipe.build))
    from flashbuild.building.backends.setuptools import (  # noqa: PLC0415  # start-up
        build_environment,
    )
    env = build_environment(request, request.source_dir, jobs=1,
                            hook_report=scratch / "hook.jsonl", build_temp=scratch / "temp")
    return repr((recipe.recipe.name, replace(recipe.build, env=()),
                 sorted((k, v) for k, v in env.items() if os.environ.get(k) != v)))


def _lookup_environment() -> list[tuple[str, str]]:
    """The environment variables CMake's package lookup reads without saying so
    (`CMAKE_PREFIX_PATH`, `<Pkg>_ROOT`, `<Pkg>_DIR`, `CUDA_HOME`…): a package made findable
    changes what a configure builds. (A setup.py's own reads are recorded and checked.)"""
    return sorted((k, v) for k, v in os.environ.items()
                  if k.startswith(("CMAKE_", "CUDA")) or k.endswith(("_ROOT", "_DIR")))


def tree_digest(root: Path) -> str:
    """The content of the tree's build files and the names of all its files (see
    `_cache_key`); version control, caches and earlier builds left out."""
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP)
        rel_dir = os.path.relpath(folder, root)
        for name in sorted(files):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
            if _BUILD_FILES.search(name):
                try:
                    h.update(hashlib.sha256(Path(folder, name).read_bytes()).digest())
                except OSError:
                    h.update(b"?")
    return h.hexdigest()


def _cache_file(scratch: Path, key: str) -> Path:
    return scratch / "models" / f"{key[:24]}.json"


def _cached(scratch: Path, key: str) -> treemodel.TreeModel | None:
    """The stored model for `key`, if the environment variables its setup.py read still have
    the values they had and its bindings units the content they had; else None."""
    try:
        data = json.loads(_cache_file(scratch, key).read_text(encoding="utf-8"))
        if data["key"] != key:
            return None
        for name, value in data["env"].items():
            if os.environ.get(name) != value:
                return None
        for path, digest in data["files"].items():
            if hashlib.sha256(Path(path).read_bytes()).hexdigest() != digest:
                return None
        return treemodel.model_from_json(data["model"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _store(scratch: Path, key: str, model: treemodel.TreeModel, tree: Path) -> None:
    """Keep the model for `_cached` (atomically; a failure to write only costs a re-run)."""
    root = tree.resolve()
    files: dict[str, str] = {}
    for b in model.bindings:
        path = Path(b.source) if Path(b.source).is_absolute() else root / b.source
        try:
            files[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            continue
    env = {r.name: os.environ.get(r.name) for r in model.env_reads}
    target = _cache_file(scratch, key)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "env": env, "files": files,
                                   "model": treemodel.model_to_json(model)}), encoding="utf-8")
        tmp.replace(target)
    except OSError:
        pass


# --- CMake -------------------------------------------------------------------------------------

def _configure(request: BuildRequest, runner: StreamRunner, scratch: Path,
               timeout: float, *, bindings: bool = True) -> treemodel.TreeModel:
    tools = cmake.find_tools(runner, request.env, request.platform)
    # The configure runs on a copy: a CMakeLists.txt that writes into (or deletes from) its
    # source folder changes the copy, never the user's tree.
    copy = _copy_tree(request.source_dir, scratch / "tree")
    vcs.link_git(request.source_dir, copy, scratch, (), runner=runner, env=request.env)
    source_dir = (copy / request.recipe.build.cmake_source).resolve()
    build_dir = scratch / "cmake"
    contained = platforms.current().containment()
    env = offline_env(request.env, proxies=not contained.namespaces)
    nvcc = (request.cmake_toolkit_root or request.toolkit.root) / "bin" / \
        request.platform.exe("nvcc")
    base = cmake.ConfigureInputs(
        source_dir=source_dir, build_dir=build_dir, output_dir=scratch / "out", nvcc=nvcc,
        toolkit_root=request.cmake_toolkit_root or request.toolkit.root, arch=request.arch,
        python=request.python, pybind11_dir=pybind11_dir(), torch_dir=torch_dir(),
        output_dir_var=request.output_dir_var, options=request.cmake_defines,
        exclude_var=request.exclude_var, cuda_flags=request.cuda_flags,
        cxx_flags=request.cxx_flags, ptxas_verbose=False, extra_args=request.cmake_args)
    stubs: list[str] = []
    tried: set[str] = set()
    needed: list[tuple[str, str, str]] = []
    #: Library variables left NOTFOUND (FindCUDA's `CUDA_curand_LIBRARY`) -> their component:
    #: configured again with a path that stands in (the generate step only asks for a value).
    stand_ins: dict[str, str] = {}

    def run(inputs: cmake.ConfigureInputs) -> None:
        argv = cmake.configure_argv(tools, inputs)
        argv += [f"-D{name}={value}" for name, value, _why in needed]
        argv += [f"-D{var}={(scratch / 'stand-in' / f'lib{var}.so').as_posix()}"
                 for var in sorted(stand_ins)]
        # The cache is kept between the configures of one introspection (CMake's compiler
        # checks are what a configure spends its time on); a variable an earlier try set and
        # this one does not is removed from it.
        argv += [f"-U{name}" for name in sorted(tried - set(inputs.options))]
        tried.update(set(inputs.options) - set(base.options))
        if stubs:
            argv += [f"-DCMAKE_PROJECT_INCLUDE={_STUB.as_posix()}",
                     f"-DFLASHBUILD_STUB_TARGETS={';'.join(stubs)}"]
        argv += list(CMAKE_OFFLINE)
        done = runner.run(contained.argv(argv), env=env, cwd=build_dir, timeout=timeout,
                          check=False)
        if done.ok:
            return
        if _learn_from_failure(done.output, stubs, needed, stand_ins):
            run(inputs)
            return
        if done.returncode < 0:  # a file-size limit (SIGXFSZ), the OOM killer
            raise BuildError(f"the CMake configure was killed by "
                             f"{cmake.killed_by(-done.returncode)}",
                             fix=cmake.killed_fix(-done.returncode))
        raise BuildError("the CMake configure failed", evidence=_first_cmake_error(
            done.output) or f"exit {done.returncode}")

    _fresh_build_dir(build_dir, cmake.configure_argv(tools, base), env, runner, request)
    run(base)
    reply = _load(build_dir)
    # The interpreter introspection configures for is this one (request.python).
    suffix = str(sysconfig.get_config_var("EXT_SUFFIX") or "")
    matched, baseline = _arch_in_ninja(build_dir, request.arch)
    # Also when the arch already matches (FlashRT detects the GPU with nvidia-smi on a GPU
    # machine): a variable that chooses the arch is set from --arch in the draft, so the build
    # does not depend on what the machine it runs on detects.
    arch_var = _confirm_arch_variable(request, base, run, build_dir,
                                      baseline=None if not matched else baseline)
    if arch_var is not None:
        reply = _load(build_dir)
    notes: list[str] = []
    absent = sorted({*stubs, *stand_ins.values()})
    if absent:
        release = request.toolkit.release
        notes.append(
            f"{', '.join(absent)} not found in the toolkit ({request.toolkit.root}): "
            "introspection configured with an empty stand-in; the build itself needs the "
            "library: " + cmake.component_fix(
                absent, request.toolkit,
                f"{release.major}.{release.minor}.*" if release else "13.0.*",
                pypi_home=request.pypi_home, python=request.python))
    try:
        ninja_text = (build_dir / "build.ninja").read_text(encoding="utf-8", errors="replace")
    except OSError:
        ninja_text = ""
    model = replace(treemodel.from_cmake(reply, copy.resolve(), python_suffix=suffix,
                                         notes=tuple(notes), arch_variable=arch_var,
                                         ninja_flags=treemodel.ninja_arch_flags(ninja_text)),
                    needed_defines=tuple(needed))
    compiler = reply.cache_value("CMAKE_CXX_COMPILER") or request.host_compiler.path or "c++"
    root = copy.resolve()
    return replace(model, bindings=_bindings(model, root, runner, request.env,
                                             {"CXX": compiler}) if bindings else (),
                   jit=treemodel.find_jit(root, _python_files(root)))


def _fresh_build_dir(build_dir: Path, argv: list[str], env: Mapping[str, str],
                     runner: StreamRunner, request: BuildRequest) -> None:
    """An empty `build_dir` with the File API queries and CMake's compiler checks from the
    probe of this toolchain (building/cmake_seed.py; the build's own configure reuses the same
    probe). Every introspection starts from an empty folder: nothing from an earlier one
    (another recipe's options, a stand-in) leaks into it."""
    shutil.rmtree(build_dir, ignore_errors=True)
    build_dir.mkdir(parents=True)
    cmake_fileapi.write_queries(build_dir)
    cmake_seed.seed(build_dir, argv, env, runner=runner, platform=request.platform)


def _learn_from_failure(output: str, stubs: list[str], needed: list[tuple[str, str, str]],
                        stand_ins: dict[str, str]) -> bool:
    """What a failed configure says it lacks that introspection can give it, added to `stubs`
    (a stand-in target for each missing `CUDA::` component), `stand_ins` (a stand-in path for
    each toolkit library variable left NOTFOUND) or `needed` (the policy minimum CMake 4 asks
    for): True when there is something new to try."""
    missing = sorted(set(cmake.missing_toolkit_components(output)) - set(stubs))
    if missing:
        stubs.extend(missing)
        return True
    variables = [(v, c) for v, c in cmake.notfound_toolkit_libraries(output)
                 if v not in stand_ins]
    if variables:
        stand_ins.update(variables)
        return True
    policy = cmake.policy_minimum_needed(output)
    if policy is not None and all(name != policy[0] for name, _v, _w in needed):
        needed.append(policy)
        return True
    return False


def _copy_tree(tree: Path, copy: Path) -> Path:
    """A fresh copy of `tree` at `copy` (files copied, never linked, so a write to one is a
    write to the copy), without version control, caches and earlier builds."""
    top = str(tree)

    def skip(folder: str, names: list[str]) -> list[str]:
        # build/ and dist/ only at the top (setuptools' output folders); the others anywhere.
        return [n for n in names if n in _SKIP and (folder == top or n not in _TOP_ONLY)]

    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(top, copy, symlinks=True, ignore=skip)
    return copy


def _python_files(root: Path) -> list[str]:
    """The tree's Python files, vendored folders left out."""
    return [p.relative_to(root).as_posix() for p in sorted(root.rglob("*.py"))
            if not {"third_party", "3rdparty", "build"} & set(p.relative_to(root).parts)]


#: An `#include` of a CUDA header (`<c10/cuda/CUDAGuard.h>`, `<ATen/cuda/CUDAContext.h>`,
#: `<cuda_runtime.h>`).
_CUDA_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"][^>"\n]*cuda', re.MULTILINE | re.IGNORECASE)


def _bindings(model: treemodel.TreeModel, root: Path, runner: StreamRunner,
              env: Mapping[str, str], compilers: Mapping[str, str]) -> tuple[Bindings, ...]:
    """Preprocess each module's bindings unit with its real flags and read the names it
    registers (see treemodel.registered_names). A unit that does not preprocess (a missing
    header) gives no bindings: the draft then leaves [verify] exports to a person."""
    found: list[Bindings] = []
    for target in model.modules():
        for unit in target.sources:
            compiler = compilers.get(unit.path) or compilers.get(unit.language)
            path = Path(unit.path) if Path(unit.path).is_absolute() else root / unit.path
            if compiler is None or unit.language != "CXX":
                continue
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            macro = treemodel.MODULE_MACRO.search(text)
            if macro is None:
                continue
            includes = [i if Path(i).is_absolute() else str(root / i) for i in unit.includes]
            argv = [compiler, "-E", *(f"-I{i}" for i in includes),
                    *(f"-D{d}" for d in unit.defines),
                    *(f for f in unit.flags if f.startswith(("-std", "-f", "-m", "-U", "-D"))),
                    str(path)]
            with tempfile.TemporaryDirectory(prefix="flashbuild-stubs-") as tmp:
                # A unit that includes a CUDA header of torch's (c10/cuda, ATen/cuda) lacks it
                # with a CPU-only torch: the dependency probe first spares a failed pass. The
                # others (torch/extension.h, pybind11) find every header: the pass alone runs.
                stubs = Stubs(Path(tmp), probe_first=_CUDA_INCLUDE.search(text) is not None)
                try:
                    done = run_stubbing(runner, argv, stubs, env=env, cwd=root, timeout=180)
                except FlashbuildError as exc:
                    found.append(Bindings(module=macro[1], source=unit.path, names=(),
                                          error=exc.what))
                    continue
            if done.ok:
                found.append(Bindings(module=macro[1], source=unit.path,
                                      names=treemodel.registered_names(done.stdout, path.name,
                                                                       macro[2]),
                                      stubbed=tuple(stubs.headers)))
            else:
                first = next((ln.strip() for ln in done.stderr.splitlines()
                              if "error" in ln), f"exit {done.returncode}")
                found.append(Bindings(module=macro[1], source=unit.path, names=(),
                                      error=first.replace(str(root) + "/", "")))
    return tuple(found)


def _own_build_model(record: setup_record.SetupRecord, own: setup_record.OwnBuild,
                     copy: Path, runner: StreamRunner, *, env: Mapping[str, str],
                     notes: tuple[str, ...], bindings: bool) -> treemodel.TreeModel:
    """A setup.py that runs its own build (natten's and vllm's build_ext call cmake): the
    model of the CMake configure it ran, read from that configure's File API reply, which
    the build hook copied before stopping setup.py at the first command that would compile.
    Without a configure there is nothing to read: a BuildError (the scan falls back)."""
    if not own.cmake_reply:
        raise BuildError(
            f"setup.py runs its own build tool ({own.command}, {own.where}): record mode "
            "stops it before it compiles, and it leaves no compile commands to read",
            evidence=f"{own.where} starts {own.command}")
    try:
        reply = cmake_fileapi.load_reply(Path(own.cmake_reply))
    except cmake_fileapi.FileApiError as exc:
        raise BuildError("the CMake configure setup.py ran left no File API reply",
                         evidence=str(exc)) from exc
    model = treemodel.from_cmake(reply, copy,
                                 python_suffix=str(sysconfig.get_config_var("EXT_SUFFIX") or ""))
    configure = " ".join(own.configure[:6]) + (" …" if len(own.configure) > 6 else "")
    model = replace(
        model, via="setup.py record mode (the CMake configure it runs, File API)",
        env_reads=record.env_reads, argv_options=record.argv_options, network=record.network,
        exception=record.exception,
        notes=(*notes, f"setup.py configures CMake itself ({configure}); its targets come from "
               f"that configure's File API reply, and record mode stopped it at "
               f"{own.command} ({own.where}) before anything compiled"))
    compiler = reply.cache_value("CMAKE_CXX_COMPILER") or "c++"
    return replace(model, bindings=_bindings(model, copy, runner, env, {"CXX": compiler})
                   if bindings else (),
                   jit=treemodel.find_jit(copy, _python_files(copy)))


def _presented_cuda(torch: Mapping[str, str], request: BuildRequest) -> str:
    """The CUDA version (`13.0`) a CPU-only torch is shown as in record mode: the chosen
    toolkit's, which is what a CUDA torch the build accepts has (same major); "" for a CUDA or
    ROCm torch, or a toolkit of unknown version. Many setup.py files build their extensions
    only for a CUDA torch (`'cu' in torch.__version__`) or read `torch.version.cuda` first:
    on a CPU-only torch they would record a configuration no build runs."""
    version = request.toolkit.version
    if torch.get("cuda") or "rocm" in torch.get("version", "") or version is None:
        return ""
    return f"{version.major}.{version.minor}"


def _first_cmake_error(output: str) -> str:
    """`CMakeLists.txt:25 (message): no way` from CMake's `CMake Error at …:` line and the
    message under it; the last line of the output when there is none."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("CMake Error"):
            where = line.removeprefix("CMake Error at ").removeprefix("CMake Error").strip(" :")
            if "set to NOTFOUND" in where:
                # `…are set to NOTFOUND.` / `Please set them …` / `CUDA_curand_LIBRARY
                # (ADVANCED)` / `    linked by target "x" …`: the variables are the news.
                names = [ln.split()[0] for ln in lines[i + 2:i + 40]
                         if ln.strip() and not ln[0].isspace() and "NOTFOUND" not in ln
                         and not ln.startswith(("--", "CMake"))]
                return (f"{', '.join(names[:6])}: used by the project and set to NOTFOUND "
                        "(a library or header the configure did not find)") if names else where
            text = next((ln.strip() for ln in lines[i + 1:] if ln.strip()), "")
            return f"{where}: {text}" if where else text
    return next((ln.strip() for ln in reversed(lines) if ln.strip()), "")


def _load(build_dir: Path) -> cmake_fileapi.Reply:
    try:
        return cmake_fileapi.load_reply(build_dir)
    except cmake_fileapi.FileApiError as exc:
        raise BuildError("the CMake File API reply could not be read", evidence=str(exc)) \
            from exc


def _arch_in_ninja(build_dir: Path, spec: ArchSpec) -> tuple[bool, str]:
    """Whether the generated build.ninja asks nvcc for exactly --arch's SASS (what the build's
    own arch check reads, so also arch flags CMake adds from a CUDA_ARCHITECTURES property),
    and the flags as evidence. No arch flag at all counts as a match: nothing to compare."""
    flags = ninja_arch_flags(build_dir / "build.ninja")
    shown = " ".join(sorted(flags.sass | flags.ptx))
    if not flags.found:
        return True, ""
    return flags.sass == expected_sass(spec) and not flags.wide, shown


def _confirm_arch_variable(request: BuildRequest, base: cmake.ConfigureInputs,
                           run: Callable[[cmake.ConfigureInputs], None],
                           build_dir: Path, *, baseline: str | None) -> ArchVariable | None:
    """Try the variables the CMake files build arch flags from, each in the forms projects
    read; the first whose configure asks for --arch's SASS is the tree's arch variable.

    `baseline`: the arch flags of a configure that already matched --arch (None when it did
    not). Then a candidate counts only if it controls the arch: set to another arch, the flags
    change."""
    texts = {}
    for path in sorted(base.source_dir.rglob("CMakeLists.txt"))[:50] + \
            sorted(base.source_dir.rglob("*.cmake"))[:50]:
        if any(part in ("third_party", "3rdparty", "external", "build") for part in
               path.relative_to(base.source_dir).parts):
            continue
        try:
            texts[str(path)] = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    values = request.arch.placeholders()
    forms: tuple[ArchForm, ...] = ("arch_numbers", "arch_codes", "arch_dotted")
    other = ArchSpec((Target(Arch(8, 0) if request.arch.archs[0].code != 80 else
                             Arch(9, 0)),))
    tried = False
    for name in treemodel.cmake_arch_candidates(texts)[:3]:
        if name in base.options:
            continue  # the recipe sets it already
        tried = True
        if baseline is not None:
            try:
                run(replace(base, options={**base.options,
                                           name: other.placeholders()["arch_numbers"]}))
            except FlashbuildError:
                continue
            if _arch_in_ninja(build_dir, other)[1] == baseline:
                continue  # it does not choose the arch
        for form in forms:
            inputs = replace(base, options={**base.options, name: values[form]})
            try:
                run(inputs)
                _load(build_dir)  # it must load; the arch is read from build.ninja
            except FlashbuildError:
                continue
            ok, shown = _arch_in_ninja(build_dir, request.arch)
            if ok and shown:
                return ArchVariable(name=name, form=form, value=values[form],
                                    evidence=f"build.ninja asks for {shown}")
    if tried:
        run(base)  # leave the scratch folder configured as the build would be
    return None


# --- setup.py ----------------------------------------------------------------------------------

def _record(request: BuildRequest, runner: StreamRunner, scratch: Path,
            timeout: float, *, bindings: bool = True) -> treemodel.TreeModel:
    from flashbuild.building.backends.setuptools import (  # noqa: PLC0415  # start-up
        build_environment,
        check_torch_cuda,
        probe_torch,
    )
    torch = probe_torch(request, runner)
    try:
        check_torch_cuda(torch, request)
    except ToolchainError as exc:
        if torch["cuda"]:
            raise
        # A CPU-only torch is enough to write build.ninja (its headers are all cpp_extension
        # needs; the hook gives it CUDA_HOME); only the link would fail. Say nothing.
        del exc
    present = _presented_cuda(torch, request)
    copy = scratch / "tree"
    top = str(request.source_dir)

    contained = platforms.current().containment()

    def run(present: str) -> tuple[setup_record.SetupRecord, dict[str, str]]:
        """One record-mode run on a fresh copy of the tree."""
        _copy_tree(Path(top), copy)
        # A setup.py that asks git for its version gets the tree's answer, as the build's.
        vcs.link_git(request.source_dir, copy, scratch, (), runner=runner, env=request.env)
        record_file = scratch / "record.json"
        record_file.unlink(missing_ok=True)
        env = build_environment(request, copy, jobs=1, hook_report=scratch / "hook.jsonl",
                                build_temp=scratch / "temp")
        env[setup_record.RECORD_ENV] = str(record_file)
        if present:
            env[setup_record.PRESENT_CUDA_ENV] = present
        # Network calls fail in the hook; git (a submodule clone), pip and every child that
        # honours a proxy are told the same (and a network namespace, where there is one).
        env = offline_env(env, proxies=not contained.namespaces)
        # Temporary folders inside the scratch folder: a setup.py that configures CMake in a
        # `tempfile` folder (natten) writes nothing outside the build root either.
        tmp = scratch / "tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for key in [k for k in env if k.upper() in ("TMPDIR", "TEMP", "TMP")]:
            del env[key]  # (Windows spells them as it likes: one of each name stays)
        env.update(dict.fromkeys(("TMPDIR", "TEMP", "TMP"), str(tmp)))
        argv = [request.python, str(_RECORDER), "build_ext", "--build-temp",
                str(scratch / "temp"), "--build-lib", str(scratch / "lib")]
        done = runner.run(contained.argv(argv), env=env, cwd=copy, timeout=timeout,
                          check=False)
        if not record_file.is_file():
            tail = done.output.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            raise BuildError("setup.py ended before the record was written",
                             evidence=tail[0])
        try:
            return setup_record.load_record(record_file), env
        except setup_record.RecordError as exc:
            raise BuildError("the setup.py record could not be read",
                             evidence=str(exc)) from exc

    record, env = run(present)
    notes: tuple[str, ...] = ()
    if present and record.exception is not None:
        # The presented CUDA torch led setup.py into what only a real one has
        # (`torch._C._nccl_version`): the CPU-only torch as it is may get further.
        plain, plain_env = run("")
        if plain.exception is None:
            notes = (f"setup.py raised when shown torch as a CUDA build ({record.exception}); "
                     "recorded with the CPU-only torch as it is",)
            record, env = plain, plain_env
    if record.own_build is not None:
        return _own_build_model(record, record.own_build, copy, runner, env=env,
                                notes=notes, bindings=bindings)
    model = treemodel.from_record(record, request.source_dir.resolve(), copy)
    compilers = {treemodel.relative(c.source, copy): c.compiler for c in record.commands}
    # Checked in the copy setup.py ran in: a source its own code generated counts as there.
    missing = tuple(sorted({u.path for t in model.targets for u in t.sources
                            if not Path(u.path).is_absolute() and not (copy / u.path).is_file()}))
    return replace(model, notes=(*model.notes, *notes), missing_sources=missing,
                   bindings=_bindings(model, copy, runner, env, compilers)
                   if bindings else (),
                   jit=treemodel.find_jit(copy, _python_files(copy)))


def _configure_pyproject(request: BuildRequest, runner: StreamRunner, scratch: Path,
                         timeout: float, *, bindings: bool) -> treemodel.TreeModel:
    """The CMake File API, configured with what a scikit-build-core pyproject passes
    (building/backends/skbuild.py)."""
    return _configure(skbuild.introspection_request(request, scratch), runner, scratch,
                      timeout, bindings=bindings)


#: How each kind of introspection runs (`BuildSystem.introspection` says which a tree takes).
_INTROSPECT: dict[IntrospectionKind, Callable[..., treemodel.TreeModel]] = {
    "cmake-configure": _configure,
    "setup-record": _record,
    "pyproject-configure": _configure_pyproject,
}
