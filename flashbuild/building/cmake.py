"""CMake + Ninja: find the tools, validate the arch against nvcc, build the configure and
build command lines, and decide whether a configure is needed at all.

cmake and ninja come from their PyPI wheels (a project dependency), so they exist on a fresh
machine; the Debian cmake is 3.25 and too old for `120f` (FACTS.md, "GPU architectures").
A configure is skipped when its arguments are unchanged and `build.ninja` exists: that is
what makes an unchanged re-run a no-op in well under a second (ninja alone decides there is
nothing to do, and ninja itself re-runs CMake when a CMakeLists.txt changed).
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild import platforms
from flashbuild.arch import parse_arch_spec
from flashbuild.errors import BuildError, ToolchainError, UsageError
from flashbuild.source.cmake_fileapi import CacheEntry
from flashbuild.toolchain_facts import pypi_toolkit_requirement

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from flashbuild.arch import ArchSpec
    from flashbuild.building.request import BuildRequest
    from flashbuild.detect.cuda import Toolkit
    from flashbuild.platforms.base import Platform
    from flashbuild.proc import Runner

#: The file in the build folder that records the hash of the last successful configure.
CONFIGURE_STAMP = "flashbuild-configure.json"
#: ninja's status line format, set explicitly so progress parsing does not depend on the
#: user's NINJA_STATUS.
NINJA_STATUS = "[%f/%t] "
#: Environment variables that change what a configure produces; part of its hash.
_CONFIGURE_ENV = ("INCLUDE", "LIB", "LIBPATH", "VCToolsVersion", "CC", "CXX", "CUDAHOSTCXX")


@dataclass(frozen=True)
class Tools:
    """The cmake and ninja executables flashbuild drives."""

    cmake: Path
    ninja: Path


def find_tools(runner: Runner, env: Mapping[str, str],
               platform: Platform | None = None) -> Tools:
    """cmake and ninja from their PyPI wheels; the PATH of `env` as a fallback.

    The wheels' console scripts are Python wrappers; the native binaries inside the wheels
    start without an interpreter, which matters for the no-op rebuild time. `platform`
    (default: this machine's) names them (`cmake.exe` on Windows)."""
    if platform is None:
        platform = platforms.current()
    cmake_exe: str | None = None
    ninja_exe: str | None = None
    try:
        import cmake as cmake_wheel  # noqa: PLC0415  # optional

        candidate = Path(cmake_wheel.CMAKE_BIN_DIR) / platform.exe("cmake")
        cmake_exe = str(candidate) if candidate.is_file() else None
    except ImportError:  # pragma: no cover - cmake is a dependency
        pass
    try:
        import ninja as ninja_wheel  # noqa: PLC0415  # optional

        candidate = Path(ninja_wheel.BIN_DIR) / platform.exe("ninja")
        ninja_exe = str(candidate) if candidate.is_file() else None
    except ImportError:  # pragma: no cover - ninja is a dependency
        pass
    cmake_exe = cmake_exe or runner.which("cmake", env)
    ninja_exe = ninja_exe or runner.which("ninja", env)
    missing = [name for name, exe in (("cmake", cmake_exe), ("ninja", ninja_exe)) if not exe]
    if missing or cmake_exe is None or ninja_exe is None:
        raise ToolchainError(
            f"{' and '.join(missing)} not found",
            evidence="neither the PyPI wheels nor the PATH provide them",
            fix="pip install cmake ninja (both are flashbuild dependencies)",
        )
    return Tools(cmake=Path(cmake_exe), ninja=Path(ninja_exe))


def list_gpu_codes(nvcc: Path, runner: Runner, env: Mapping[str, str]) -> tuple[str, ...]:
    """What this nvcc can emit, from `nvcc --list-gpu-code` (`sm_75 … sm_121`) and
    `--list-gpu-arch` (`compute_75 …`): ask the compiler, do not hard-code (FACTS.md)."""
    codes: list[str] = []
    for flag in ("--list-gpu-code", "--list-gpu-arch"):
        done = runner.run([nvcc, flag], env=env, timeout=60)
        codes += [tok for tok in done.stdout.split() if re.fullmatch(r"(sm|compute)_\d+[af]?", tok)]
    return tuple(dict.fromkeys(codes))


def validate_arch(spec: ArchSpec, codes: Sequence[str], nvcc: Path) -> None:
    """Reject the arch before configuring when this nvcc cannot emit it.

    nvcc lists base codes (`sm_90`); `sm_90a` / `sm_120f` are accepted wherever the base
    is, because the suffixes exist from the first toolkit that lists the base code."""
    known = set(codes)
    bad: list[str] = []
    for target in spec.targets:
        arch = target.arch
        if target.sass and f"sm_{arch.code}" not in known:
            bad.append(arch.sm)
        if target.ptx and f"compute_{arch.code}" not in known and f"sm_{arch.code}" not in known:
            bad.append(arch.compute)
    if bad:
        can = " ".join(c for c in codes if c.startswith("sm_")) or "(nothing listed)"
        raise UsageError(
            f"{', '.join(bad)} cannot be compiled by the chosen nvcc",
            evidence=f"`{nvcc} --list-gpu-code` lists: {can}",
            fix="pick an arch from that list, or choose a toolkit that supports it with "
            "--cuda (sm_120 needs CUDA >= 12.8; `flashbuild doctor --arch ...` explains)",
        )


@dataclass(frozen=True)
class JobPools:
    """Ninja job pools: `nvcc` bounded by memory, `link` small (see jobs.py)."""

    nvcc: int
    link: int
    cuda_only: bool = False
    """True when the project scopes the `nvcc` pool to its CUDA targets itself (it reads
    FLASHBUILD_NVCC_JOB_POOL); otherwise the pool bounds every compile."""


@dataclass(frozen=True)
class ConfigureInputs:
    """Everything a configure depends on. Its hash decides whether to re-run CMake."""

    source_dir: Path
    """The folder with the top CMakeLists.txt."""
    build_dir: Path
    output_dir: Path
    """Where the project puts the built module and plugin (see `output_dir_var`)."""
    nvcc: Path
    toolkit_root: Path
    arch: ArchSpec
    python: str
    """The interpreter the module is built for (its headers, its extension suffix)."""
    pybind11_dir: str | None = None
    torch_dir: str | None = None
    """torch's CMake package folder, given as Torch_DIR (a recipe's define wins)."""
    output_dir_var: str | None = None
    """The project's own output-folder variable (the recipe names it); None = CMake's."""
    options: Mapping[str, str] = field(default_factory=dict)
    """The recipe's cmake options (`-DKEY=VALUE`)."""
    excludes: tuple[str, ...] = ()
    """Sources the patch report says to leave out, relative to the tree."""
    exclude_var: str | None = None
    """The cache variable the project reads its exclusions from (the recipe names it)."""
    launcher: Path | None = None
    launch_cuda: bool = True
    """False for ccache: nvcc's `-MD` dependency output makes it uncacheable (FACTS.md)."""
    pools: JobPools | None = None
    cuda_flags: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    ptxas_verbose: bool = True
    """Add `-Xptxas -v` so per-kernel registers / shared memory land in the build log."""
    build_type: str = "Release"
    extra_args: tuple[str, ...] = ()
    """Raw configure arguments from the recipe."""
    cccl_dir: Path | None = None
    """CUDA 13's `include/cccl` (toolkit.cccl_include_dir), given to C++ sources when this
    CMake's FindCUDAToolkit does not (cmake_gives_cccl)."""


def configure_argv(tools: Tools, inputs: ConfigureInputs) -> list[str]:
    """The `cmake -S … -B … -G Ninja -D…` command line."""
    cuda_flags = list(inputs.cuda_flags)
    if inputs.ptxas_verbose:
        cuda_flags += ["-Xptxas", "-v"]
    defs: dict[str, str] = {
        "CMAKE_BUILD_TYPE": inputs.build_type,
        "CMAKE_MAKE_PROGRAM": _cmake_path(tools.ninja),
        "CMAKE_CUDA_COMPILER": _cmake_path(inputs.nvcc),
        "CMAKE_CUDA_ARCHITECTURES": inputs.arch.cmake(),
        "CUDAToolkit_ROOT": _cmake_path(inputs.toolkit_root),
        # FindCUDA (`find_package(CUDA)`, CMake's legacy module) does not read
        # CUDAToolkit_ROOT: it takes the nvcc it finds on CUDA_PATH, PATH or /usr/local/cuda,
        # and libKMCUDA 6.2.3 built with a PyPI toolkit then linked the system toolkit's
        # libraries (its cuRAND NOTFOUND there, while the chosen toolkit had it).
        "CUDA_TOOLKIT_ROOT_DIR": _cmake_path(inputs.toolkit_root),
        "Python_EXECUTABLE": _cmake_path(Path(inputs.python)),
        "Python3_EXECUTABLE": _cmake_path(Path(inputs.python)),
    }
    if inputs.output_dir_var is not None:
        defs[inputs.output_dir_var] = _cmake_path(inputs.output_dir)
    else:
        # CMake initialises every target's output folders from these (a project that sets
        # its own wins; find_artifacts then searches the build folder).
        defs["CMAKE_LIBRARY_OUTPUT_DIRECTORY"] = _cmake_path(inputs.output_dir)
        defs["CMAKE_RUNTIME_OUTPUT_DIRECTORY"] = _cmake_path(inputs.output_dir)
    # The CMake packages of this interpreter's pybind11 and torch (find_package(Torch)).
    defs.update({name: _cmake_path(Path(folder)) for name, folder in (
        ("pybind11_DIR", inputs.pybind11_dir), ("Torch_DIR", inputs.torch_dir)) if folder})
    if inputs.torch_dir:
        # torch's CMake config appends -gencode flags for TORCH_CUDA_ARCH_LIST (its CMake
        # variable over the environment's), else for every arch its own build had (sm_50 to
        # sm_120a, torchmcubes with torch 2.14): the target's, as the setuptools backend sets.
        defs["TORCH_CUDA_ARCH_LIST"] = inputs.arch.torch_informational()
    if inputs.exclude_var is not None:
        # Always set (possibly empty) so removing an exclusion reaches the cache too.
        defs[inputs.exclude_var] = ";".join(sorted(inputs.excludes))
    if inputs.launcher is not None:
        defs["CMAKE_CXX_COMPILER_LAUNCHER"] = _cmake_path(inputs.launcher)
        if inputs.launch_cuda:
            defs["CMAKE_CUDA_COMPILER_LAUNCHER"] = _cmake_path(inputs.launcher)
    if inputs.pools is not None:
        defs["CMAKE_JOB_POOLS"] = f"nvcc={inputs.pools.nvcc};link={inputs.pools.link}"
        defs["CMAKE_JOB_POOL_LINK"] = "link"
        if inputs.pools.cuda_only:
            defs["FLASHBUILD_NVCC_JOB_POOL"] = "nvcc"
        else:
            defs["CMAKE_JOB_POOL_COMPILE"] = "nvcc"
    defs.update(_cccl_define(tools, inputs.cccl_dir))
    user = dict(inputs.options)
    # The recipe's own flags come first; flashbuild's are appended to them.
    if cuda_flags:
        user["CMAKE_CUDA_FLAGS"] = " ".join([user.get("CMAKE_CUDA_FLAGS", ""), *cuda_flags]).strip()
    if inputs.cxx_flags:
        user["CMAKE_CXX_FLAGS"] = " ".join(
            [user.get("CMAKE_CXX_FLAGS", ""), *inputs.cxx_flags]).strip()
    defs.update(user)
    argv = [str(tools.cmake), "-S", str(inputs.source_dir), "-B", str(inputs.build_dir),
            "-G", "Ninja", "--no-warn-unused-cli"]
    argv += [f"-D{key}={value}" for key, value in defs.items()]
    argv += list(inputs.extra_args)
    return argv


def _cccl_define(tools: Tools, cccl_dir: Path | None) -> dict[str, str]:
    if cccl_dir is None or cmake_gives_cccl(tools.cmake):
        return {}
    return {"CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES": _cmake_path(cccl_dir)}


def cmake_gives_cccl(cmake_exe: Path) -> bool:
    """Whether this CMake's FindCUDAToolkit gives C++ targets CUDA 13's `include/cccl`.

    A FindCUDAToolkit that takes its include folders from the CUDA compiler's own implicit
    ones (`CMAKE_CUDA_TOOLKIT_INCLUDE_DIRECTORIES`, which lists nvcc's `-isystem
    .../include/cccl`) puts the folder into `CUDAToolkit_INCLUDE_DIRS` and onto every
    `CUDA::*` target, so a `.cpp` linking `CUDA::cudart` compiles (checked with the PyPI
    cmake 4.4 here); the one in Debian's cmake 3.25 gives `include/` alone. Read from the
    module file of the cmake that runs (`<prefix>/share/cmake-*/Modules`); unknown = no."""
    prefix = Path(cmake_exe).resolve().parent.parent
    for module in sorted(prefix.glob("share/cmake-*/Modules/FindCUDAToolkit.cmake")):
        try:
            if "CMAKE_CUDA_TOOLKIT_INCLUDE_DIRECTORIES" in module.read_text(encoding="utf-8",
                                                                          errors="replace"):
                return True
        except OSError:
            continue
    return False


def _cmake_path(path: Path) -> str:
    # CMake treats backslashes in -D values as escapes in some contexts; forward slashes
    # work on Windows too.
    return str(path).replace("\\", "/")


def build_argv(tools: Tools, build_dir: Path, jobs: int, targets: Sequence[str] = ()) -> list[str]:
    """`ninja -C <build> -j N`: ninja directly (not `cmake --build`), one process fewer on
    the no-op path, and its `[n/m]` lines are what progress.py reads."""
    return [str(tools.ninja), "-C", str(build_dir), "-j", str(jobs), *targets]


def configure_hash(argv: Sequence[str], env: Mapping[str, str], platform: Platform) -> str:
    """A hash of the configure command and the environment variables that change its result,
    looked up with the platform's rules: on Windows `os.environ` spells them in upper case
    (`VCTOOLSVERSION`) and vcvarsall as it likes (`Path`), and a case-sensitive lookup of
    `VCToolsVersion` found nothing, so a toolset change did not reconfigure."""
    lookup = platform.environ(env)
    payload = {"argv": list(argv), "env": {k: lookup.get(k) or "" for k in _CONFIGURE_ENV}}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def needs_configure(build_dir: Path, digest: str) -> bool:
    """False when the last configure used the same inputs and left a build.ninja behind."""
    stamp = build_dir / CONFIGURE_STAMP
    if not (build_dir / "build.ninja").is_file() or not stamp.is_file():
        return True
    try:
        recorded = json.loads(stamp.read_text(encoding="utf-8")).get("hash")
    except (OSError, ValueError):
        return True
    return bool(recorded != digest)


def record_configure(build_dir: Path, digest: str, argv: Sequence[str]) -> None:
    """Written only after a successful configure, so a failed one is retried next time."""
    stamp = build_dir / CONFIGURE_STAMP
    tmp = stamp.with_suffix(".tmp")
    tmp.write_text(json.dumps({"hash": digest, "argv": list(argv)}, indent=1), encoding="utf-8")
    tmp.replace(stamp)


def forget_configure(build_dir: Path) -> None:
    """Drop the stamp (before a configure runs: a failed one must not look current)."""
    (build_dir / CONFIGURE_STAMP).unlink(missing_ok=True)


#: Written before CMake configures and removed when it ends by itself (success or a clean
#: error): left behind, it says a configure was killed half-way (issue 27: under `ulimit -f`
#: CMake dies of SIGXFSZ while writing its files) or flashbuild itself was.
CONFIGURE_RUNNING = "flashbuild-configure.running"


def start_configure(build_dir: Path) -> None:
    """Mark a configure as running (see CONFIGURE_RUNNING)."""
    (build_dir / CONFIGURE_RUNNING).write_text("configure started\n", encoding="utf-8")


def end_configure(build_dir: Path) -> None:
    """The configure ended by itself: its files are whole, whatever its exit code."""
    (build_dir / CONFIGURE_RUNNING).unlink(missing_ok=True)


def unfinished_configure(build_dir: Path) -> str:
    """Why the CMake state in `build_dir` cannot be trusted, or "": a configure that never
    ended (killed, or flashbuild killed during it), or a CMakeCache.txt cut short. CMake
    reuses what it finds there (its compiler checks, the cache), so every later configure
    failed in such a folder."""
    if (build_dir / CONFIGURE_RUNNING).is_file():
        return "a CMake configure in it was killed before it ended"
    cache = build_dir / "CMakeCache.txt"
    try:
        data = cache.read_bytes()
    except OSError:
        return ""
    # CMake writes the cache in blocks, each entry ending in a newline: a cut lands inside
    # an entry (`CMAKE_CXX_COMPILER:FILEPATH=/usr/bi`), which CMake would then trust.
    if not data.endswith(b"\n"):
        return f"its CMakeCache.txt is cut short ({len(data):,} bytes)"
    return ""


def read_cache_value(build_dir: Path, name: str) -> str | None:
    """A value from CMakeCache.txt (`NAME:TYPE=value`), or None."""
    cache = build_dir / "CMakeCache.txt"
    try:
        text = cache.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(rf"^{re.escape(name)}:[A-Z]+=(.*)$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def cache_entries(build_dir: Path, *, contains: str = "") -> tuple[CacheEntry, ...]:
    """CMakeCache.txt's `NAME:TYPE=value` entries whose name contains `contains`
    (case-insensitive), internal ones (`:INTERNAL`, `:STATIC`) left out."""
    try:
        text = (build_dir / "CMakeCache.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ()
    found: list[CacheEntry] = []
    for m in re.finditer(r"^([A-Za-z_][\w.-]*):([A-Z]+)=(.*)$", text, re.MULTILINE):
        name, kind, value = m.group(1), m.group(2), m.group(3).strip()
        if kind in ("INTERNAL", "STATIC") or contains.lower() not in name.lower():
            continue
        found.append(CacheEntry(name=name, value=value, type=kind))
    return tuple(found)


#: Values CMake reads as booleans (`if()` docs): a variable holding one is a switch.
_CMAKE_BOOLEANS = frozenset({"ON", "OFF", "TRUE", "FALSE", "YES", "NO", "Y", "N", "0", "1",
                             "IGNORE", "NOTFOUND", ""})


def arch_variables(entries: Sequence[CacheEntry]) -> list[CacheEntry]:
    """The project's own cache entries that could hold an arch, those whose value reads as one
    (`GPU_ARCH=89`) first. Never CMake's own (`CMAKE_*`), a BOOL (`FA2_ARCH_NATIVE_ONLY`, an
    `option()`), a path, or a value CMake reads as a boolean: a recipe that set one of those
    to `{arch_numbers}` would switch a feature, not choose the arch."""
    def reads_as_arch(entry: CacheEntry) -> bool:
        try:
            parse_arch_spec(entry.value)
        except UsageError:
            return False
        return True

    found = [e for e in entries
             if not e.name.startswith(("CMAKE_", "_")) and e.type in ("STRING", "UNINITIALIZED")
             and e.value.upper() not in _CMAKE_BOOLEANS and not e.value.upper().endswith(
                 "-NOTFOUND")]
    return sorted(found, key=lambda e: not reads_as_arch(e))


#: A target CMake could not find at generate time, from a toolkit component that is absent
#: (`Target "x" links to:\n\n    CUDA::cublas\n\n  but the target was not found`).
_MISSING_COMPONENT = re.compile(r"links to:\s+(CUDA::\w+)\s+but the target was not found")


def missing_toolkit_components(output: str) -> list[str]:
    """The `CUDA::` targets a failed configure could not find (sorted, no duplicates)."""
    return sorted(set(_MISSING_COMPONENT.findall(output)))


def missing_components_error(text: str, request: BuildRequest, log_path: Path,
                             ) -> BuildError | None:
    """The error for a configure that stopped on toolkit components the chosen toolkit lacks
    (a `CUDA::` target FindCUDAToolkit did not define, or FindCUDA's `CUDA_<lib>_LIBRARY` left
    NOTFOUND), with the install that gives them; None for any other failure. One message for
    the CMake backend's configure and scikit-build-core's (llama-cpp-python's CUDA::cublas)."""
    components = missing_toolkit_components(text)
    # FindCUDA's library variables (`CUDA_curand_LIBRARY`, libKMCUDA) left NOTFOUND: the
    # same missing component, named by the variable instead of a CUDA:: target.
    notfound = [] if components else notfound_toolkit_libraries(text)
    if not (components or notfound):
        return None
    components = components or [target for _var, target in notfound]
    toolkit = request.toolkit.root  # the real one, not a shaped cache folder
    release = request.toolkit.release
    return BuildError(
        f"CMake configure failed: the project links {', '.join(components)}, which the "
        f"toolkit at {toolkit} does not have",
        evidence=(f"CMake left {', '.join(var for var, _t in notfound)} NOTFOUND"
                  if notfound else
                  f"FindCUDAToolkit defines no {', '.join(components)} there")
        + f"; log: {log_path}",
        fix=component_fix(components, request.toolkit,
                          f"{release.major}.{release.minor}.*" if release else "13.0.*",
                          pypi_home=request.pypi_home, python=request.python),
        details={"log": str(log_path), "missing": components})


#: find_package(X) in config mode found neither FindX.cmake nor X's package configuration
#: file: CMake says `By not providing "FindTBB.cmake" in CMAKE_MODULE_PATH this project has
#: asked CMake to find a package configuration file provided by "TBB"` (or `Could not find a
#: package configuration file provided by "TBB"`), each word possibly on its own line, in the
#: body of `CMake Error at FILE:LINE (find_package):`. The same words under `CMake Warning at`
#: are an optional find_package (no REQUIRED) that the configure went on without.
_NO_PACKAGE = re.compile(r"(?:package\s+configuration\s+file\s+provided\s+by)\s+\"([\w.+-]+)\"")
#: The header of a find_package error, with its indent (scikit-build-core indents CMake's
#: output by two); the message's body is the lines indented deeper than it, and blank lines.
_FIND_PACKAGE_ERROR = re.compile(
    r"^([ \t]*)CMake Error at (.+?):(\d+) \(find_package\):[ \t\r]*$", re.MULTILINE)


def _find_package_errors(text: str) -> Iterator[tuple[str, str, str]]:
    """(file, line, body) of each `CMake Error at FILE:LINE (find_package):` in a log."""
    for header in _FIND_PACKAGE_ERROR.finditer(text):
        indent = len(header[1])
        body: list[str] = []
        for line in text[header.end():].splitlines()[1:]:
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break  # the next message (`Call Stack`, `-- Configuring incomplete`)
            body.append(line)
        yield header[2], header[3], "\n".join(body)


def missing_package_error(text: str, log_path: Path) -> BuildError | None:
    """The error for a configure that stopped on `find_package(X REQUIRED)` finding nothing:
    a library the tree needs and neither it nor this machine holds (atlas-engine's TBB). Says
    which package, where the tree asks for it, and the recipe line that points CMake at an
    installed copy; None for any other failure (an optional package's warning included)."""
    first = next(((file, line, found[1]) for file, line, body in _find_package_errors(text)
                  if (found := _NO_PACKAGE.search(body)) is not None), None)
    if first is None:
        return None
    file, line, name = first
    where = f" (find_package at {file}:{line})"
    return BuildError(
        f"CMake configure failed: the tree needs the {name} library{where}, which CMake found "
        "neither in the tree nor on this machine",
        evidence=f"CMake found no {name}Config.cmake, {name.lower()}-config.cmake or "
        f"Find{name}.cmake; log: {log_path}",
        fix=f"install {name}'s development files where CMake looks (the system's development "
        "package of it, or conda's), or point CMake at an "
        f"installed copy with the recipe line [[build.options]] define = {{ {name}_DIR = "
        f"\"<prefix>/lib/cmake/{name}\" }} (the folder holding {name}Config.cmake), then "
        "build again",
        details={"log": str(log_path), "package": name})


#: CMake 4 refuses a project whose cmake_minimum_required is older than 3.5 and names the
#: cache variable that lets it configure anyway (CMake 4.0 release notes, "Deprecated and
#: Removed Features"): `… add -DCMAKE_POLICY_VERSION_MINIMUM=3.5 to try configuring anyway.`
_POLICY_MINIMUM = re.compile(
    r"Compatibility with CMake < ([\d.]+) has been removed from CMake\.(?s:.*?)"
    r"-D(CMAKE_POLICY_VERSION_MINIMUM)=([\d.]+)\s+to\s+try\s+configuring\s+anyway")


def policy_minimum_needed(output: str) -> tuple[str, str, str] | None:
    """(variable, value, the refusal in one line) when a failed configure was CMake refusing
    an old `cmake_minimum_required`; None otherwise."""
    found = _POLICY_MINIMUM.search(output)
    if found is None:
        return None
    return (found[2], found[3], f"CMake refuses `cmake_minimum_required` older than "
            f"{found[1]} (\"Compatibility with CMake < {found[1]} has been removed\")")


#: A generate step stopped by library variables left NOTFOUND (`CMake Error: The following
#: variables are used in this project, but they are set to NOTFOUND.` then one per line):
#: FindCUDA's `CUDA_curand_LIBRARY` and the like, named `CUDA_<lib>_LIBRARY`.
_NOTFOUND_LIBRARY = re.compile(r"^(CUDA_(\w+?)_LIBRARY)(?: \(ADVANCED\))?$", re.MULTILINE)


def notfound_toolkit_libraries(output: str) -> list[tuple[str, str]]:
    """(variable, `CUDA::<lib>`) for each toolkit library variable a failed generate step
    names as NOTFOUND (sorted, no duplicates); empty for any other failure."""
    if "set to NOTFOUND" not in output:
        return []
    return sorted({(m[1], f"CUDA::{m[2]}") for m in _NOTFOUND_LIBRARY.finditer(output)})


def toolkit_extra(target: str) -> str:
    """The cuda-toolkit extra that ships a `CUDA::` component (`CUDA::cublasLt` -> cublas)."""
    name = target.split("::", 1)[-1].lower()
    return "cublas" if name.startswith("cublas") else name.removesuffix("_static")


#: cuda-toolkit's extras that ship a CUDA library (its `cublas` extra is cuBLAS and cuBLASLt).
_TOOLKIT_EXTRAS = frozenset({"cublas", "cufft", "curand", "cusolver", "cusparse", "nvrtc",
                             "nvjitlink", "npp", "nvjpeg", "cupti", "nvtx", "cufile"})


def component_fix(components: Sequence[str], toolkit: Toolkit, release: str, *,
                  pypi_home: Path | None, python: str) -> str:
    """How to get missing toolkit components: into the toolkit, or from PyPI (FACTS.md: cuBLAS
    is the `cublas` extra of cuda-toolkit; a PyPI toolkit is made CMake-ready by flashbuild).
    `pypi_home`: where `python -m pip` puts that toolkit (named literally; None: unknown)."""
    names = sorted({toolkit_extra(c) for c in components})
    if "cuda_driver" in names:
        # The driver library is no toolkit component: a toolkit ships a link stub of it
        # (lib64/stubs/libcuda.so); the PyPI wheels ship none (nvidia-cuda-runtime 13.0.96
        # holds libcudart only), and a machine without a GPU driver has no libcuda at all.
        return ("CUDA::cuda_driver is the GPU driver's library (libcuda.so), which a CUDA "
                "toolkit installed from NVIDIA's installer or packages ships as a link stub in "
                f"lib64/stubs; the toolkit at {toolkit.root} has none"
                + (" (the PyPI wheels ship none)" if toolkit.layout == "pypi" else "")
                + ": build with such a toolkit (`--cuda /usr/local/cuda-X.Y`), or with the "
                "tree's switch that leaves the driver API out, if it has one")
    pip = f"`{python} -m pip install \"{pypi_toolkit_requirement(tuple(names), release)}\"`"
    if not all(n in _TOOLKIT_EXTRAS for n in names):
        return f"install {', '.join(names)} into the toolkit at {toolkit.root}"
    if toolkit.layout == "pypi" and (pypi_home is None or toolkit.root == pypi_home):
        # The build already uses this Python's PyPI toolkit: the extra lands in it.
        return f"add {', '.join(names)} to the PyPI toolkit at {toolkit.root}: {pip}"
    fix = (f"install {', '.join(names)} into the toolkit at {toolkit.root}, or use a PyPI "
           f"toolkit that has it: {pip}")
    return fix + (f", then build with `--cuda {pypi_home}`" if pypi_home is not None else
                  ", then pass --cuda the nvidia/cu13 folder of that Python's site-packages")


def killed_by(number: int) -> str:
    """The signal's name and what usually sends it (SIGXFSZ: a file-size limit)."""
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    return name + {"SIGXFSZ": " (a file grew past the file-size limit, `ulimit -f`)",
                   "SIGKILL": " (the OOM killer, or `kill -9`)"}.get(name, "")


def killed_fix(number: int) -> str:
    if number == getattr(signal, "SIGXFSZ", -1):
        return ("raise the file-size limit (`ulimit -f unlimited`, or a larger value) and "
                "build again")
    return "find what ended CMake (memory, a limit, another process) and build again"
