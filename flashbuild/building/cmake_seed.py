"""CMake's compiler checks, run once per toolchain instead of once per build folder.

A CMake configure of a CUDA project spends nearly all its time identifying its compilers:
4.1 of 4.2 s of CPU for a one-kernel project on this project's 2-core machine (nvcc compiles
CMake's identification and ABI sources; g++ twice more; on Windows cl.exe too). CMake
itself does that once per build folder: a later configure of the same folder reads what the
first one found (`CMakeFiles/<version>/CMake<LANG>Compiler.cmake`, `CMakeSystem.cmake`) and
skips the checks when the cache says `CMAKE_PLATFORM_INFO_INITIALIZED`. flashbuild
configures one tree in several fresh folders (introspection, a try per switch, the build,
one folder per arch), so each of them paid for the checks again.

Here a probe project (`project(flashbuild_probe LANGUAGES C CXX CUDA)`, nothing else) is
configured once per toolchain, with the arguments of the real configure that the checks
read (the compilers, their flags, the arch list, the toolkit root, the generator) and the
same environment. Its platform files and its cache, less the probe's own entries and every
entry the command line set, are copied into a fresh build folder before the real
configure, which then runs as CMake's own second configure of a folder does: it writes the
build.ninja that a second configure writes (tests/integration/test_cmake_seed.py compares
them), in 0.1 s of CPU instead of 4.

The toolchain is the key: the cmake binary, the generator, the detection arguments, the
environment variables CMake's checks read (CC, CXX, CUDAHOSTCXX, the *FLAGS, NVCC_*_FLAGS,
PATH, MSVC's INCLUDE/LIB) and the size and modification time of every compiler named, so an
upgraded compiler at the same path is checked again. A folder is not seeded, and CMake runs
its own checks, when:
* the tree's top CMakeLists.txt sets a compiler, compiler flags, a toolchain or the
  environment before its first `project()`, includes another file before it, or sets a
  compiler anywhere (a language enabled later would take it): what the probe found is not
  what the tree's own checks would find;
* the configure names a toolchain file, a target system, a -C initial cache or a -T/-A
  generator option;
* the probe failed (tried again by the next configure: a probe fails for reasons of the
  moment too, such as a compiler killed by a file-size limit);
* `FLASHBUILD_CMAKE_SEED=0`.
A GPU added to the machine later is not seen by a seeded `native` arch list; flashbuild
always passes an explicit one.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import tree_sitter_cmake
from tree_sitter import Language, Node, Parser

from flashbuild.errors import ProcessError
from flashbuild.platforms.files import read_regular

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.platforms.base import Platform
    from flashbuild.proc import Runner

#: Bumped when what a probe holds changes: older probes are then ignored.
SEED_VERSION = 1
#: The environment switch that turns seeding off.
SWITCH = "FLASHBUILD_CMAKE_SEED"
#: The languages the probe enables: the ones whose checks cost seconds (nvcc, and cl.exe on
#: Windows). A tree that enables another one (C, which `project()` enables by default, ASM)
#: has that one checked by CMake as usual: a tree that does not would keep the probe's C
#: entries in its cache otherwise.
PROBE_LANGUAGES = ("CXX", "CUDA")
#: Seconds the probe may take (an MSVC + nvcc identification takes tens of seconds).
PROBE_TIMEOUT_S = 600.0

#: -D variables CMake's compiler checks read: they go to the probe and into the key.
_DETECTION_VAR = re.compile(
    r"CMAKE_(C|CXX|CUDA)_(COMPILER|HOST_COMPILER|FLAGS|FLAGS_INIT|ARCHITECTURES|"
    r"STANDARD_INCLUDE_DIRECTORIES|COMPILER_TARGET|COMPILER_EXTERNAL_TOOLCHAIN)"
    r"|CMAKE_(MAKE_PROGRAM|SYSROOT|LINKER_TYPE|CUDA_RUNTIME_LIBRARY|MSVC_RUNTIME_LIBRARY)"
    r"|CUDAToolkit_ROOT|CUDA_TOOLKIT_ROOT_DIR")
#: -D variables that change the platform itself: no seeding with them.
_PLATFORM_VAR = re.compile(r"CMAKE_(TOOLCHAIN_FILE|SYSTEM_\w+|CROSSCOMPILING\w*|"
                           r"PROJECT_TOP_LEVEL_INCLUDES|GENERATOR_\w+|OSX_\w+)")
#: Options that change the platform or load an initial cache: no seeding with them.
_PLATFORM_OPTIONS = ("-C", "-T", "-A", "--toolchain")
#: Environment variables CMake's compiler checks read, besides the PATH.
_DETECTION_ENV = ("CC", "CXX", "CUDACXX", "CUDAHOSTCXX", "CFLAGS", "CXXFLAGS", "CUDAFLAGS",
                  "CPPFLAGS", "LDFLAGS", "CUDAARCHS", "NVCC_PREPEND_FLAGS",
                  "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "CUDA_PATH", "CUDA_HOME",
                  "CMAKE_GENERATOR", "CMAKE_TOOLCHAIN_FILE", "CMAKE_C_COMPILER_LAUNCHER",
                  "INCLUDE", "LIB", "LIBPATH", "VCToolsVersion", "PATH")
#: What a tree's CMake code may not touch before its first project() for the probe to stand
#: for its checks: compilers, their flags, the toolchain, the environment, other files.
_PREAMBLE_NAMES = re.compile(
    r"\bCMAKE_\w*(COMPILER|FLAGS|TOOLCHAIN_FILE|SYSROOT|SYSTEM_NAME|SYSTEM_PROCESSOR|"
    r"GENERATOR|MAKE_PROGRAM|LINKER)\w*|\bENV\{|\bCUDAToolkit_ROOT\b|\bCUDA_TOOLKIT_ROOT_DIR\b")
_PREAMBLE_COMMANDS = frozenset({"include", "enable_language", "execute_process",
                                "find_program", "find_package", "load_cache"})
#: Setting a compiler anywhere: a language enabled after project() would take it.
_SETS_COMPILER = re.compile(r"\b(?i:set)\s*\(\s*CMAKE_(C|CXX|CUDA)_(HOST_)?COMPILER\b")
#: Cache entries of the probe that are the probe's own (its folders, its project).
_PROBE_OWN = re.compile(r"CMAKE_(CACHEFILE_DIR|HOME_DIRECTORY|PROJECT_\w+|DIAGNOSTIC_INIT|"
                        r"FIND_PACKAGE_REDIRECTS_DIR|NUMBER_OF_MAKEFILES)|flashbuild_probe_\w+")
#: The detection definitions whose value differs between configures that share a probe.
_VARYING = ("_ARCHITECTURES", "_FLAGS")
_CACHE_LINE = re.compile(r"^([A-Za-z_][\w.]*)(-ADVANCED)?:([A-Z]+)=(.*)$")
_COMPLETE = "seed.json"


def probes_folder(platform: Platform, env: Mapping[str, str]) -> Path:
    """Where the probes are kept: the user cache folder's `cmake-probe`."""
    return platform.user_cache_dir(env) / "cmake-probe"


@dataclass(frozen=True)
class Seeded:
    """What `seed` did to a build folder: `key` when it was seeded, else `why_not`."""

    key: str = ""
    why_not: str = ""

    def line(self) -> str:
        """One line for the configure log."""
        if self.key:
            return f"compiler checks: those of the probe for this toolchain ({self.key})"
        return f"compiler checks: run by this configure ({self.why_not})"


def seed(build_dir: Path, argv: Sequence[str], env: Mapping[str, str], *, runner: Runner,
         platform: Platform, cache_root: Path | None = None) -> Seeded:
    """Give a fresh `build_dir` the compiler checks of a probe with the toolchain of the
    configure `argv` (`cmake -S … -B … -G Ninja -D…`, run with `env`), running the probe
    first when this toolchain has none yet; the probes are kept in `cache_root` (default:
    `probes_folder`). A folder with a CMakeCache.txt is left alone (CMake reuses its own
    checks there). Never raises for a probe that fails: the configure then checks its
    compilers itself."""
    lookup = platform.environ(env)
    parsed = _seedable(build_dir, argv, lookup)
    if isinstance(parsed, str):
        return Seeded(why_not=parsed)
    generator, defines = parsed
    detection = _key_defines(defines)
    key = toolchain_key(argv[0], generator, detection, lookup, platform)
    probe = (cache_root or probes_folder(platform, env)) / f"v{SEED_VERSION}-{key[:24]}"
    if not (probe / _COMPLETE).is_file():
        # The probe runs with this configure's arch list, which nvcc then accepts.
        failed = _run_probe(probe, argv[0], generator,
                            {**detection,
                             "CMAKE_CUDA_ARCHITECTURES": defines["CMAKE_CUDA_ARCHITECTURES"]},
                            env=env, runner=runner)
        if failed:
            return Seeded(why_not=failed)
    try:
        _copy_seed(probe, build_dir)
    except OSError as exc:
        # A half-written seed would make CMake trust a cut file: leave the folder as it was.
        shutil.rmtree(build_dir / "CMakeFiles", ignore_errors=True)
        (build_dir / "CMakeCache.txt").unlink(missing_ok=True)
        return Seeded(why_not=f"the seed could not be copied ({exc})")
    return Seeded(key=key[:12])


def _seedable(build_dir: Path, argv: Sequence[str], env: Mapping[str, str]
              ) -> tuple[str, dict[str, str]] | str:
    """(generator, detection -D definitions) of a configure the probe can stand for, or why
    it cannot."""
    if env.get(SWITCH, "") == "0":
        return f"{SWITCH}=0"
    if (build_dir / "CMakeCache.txt").exists():
        return "the folder has a CMake cache (CMake reuses its own checks)"
    parsed = _parse(argv)
    if isinstance(parsed, str):
        return parsed
    source, generator, defines = parsed
    if "CMAKE_CUDA_ARCHITECTURES" not in defines:
        # The probe's checks would set the compiler's default arch list, which a configure
        # that names none takes from its own checks.
        return "the configure names no CMAKE_CUDA_ARCHITECTURES"
    return preamble_blocks(source) or (generator, defines)


def _key_defines(defines: Mapping[str, str]) -> dict[str, str]:
    """The detection definitions that make the probe's checks differ. The arch list is not
    one: the probe's files are the same for sm_80, sm_90, sm_90a and sm_120 (compared here,
    CMake 4.4, nvcc 13.0; only the compiled ABI binary, which is not kept, differs), and
    flashbuild checks the arch against the compiler before configuring. Nor are ptxas's
    options (`-Xptxas -v`, which the build adds and introspection does not): ptxas runs
    after everything CMake's checks read."""
    out = {k: v for k, v in defines.items() if k != "CMAKE_CUDA_ARCHITECTURES"}
    if "CMAKE_CUDA_FLAGS" in out:
        out["CMAKE_CUDA_FLAGS"] = _without_ptxas(out["CMAKE_CUDA_FLAGS"])
    # No flags and empty flags are one toolchain.
    return {k: v for k, v in out.items() if v or not k.endswith("_FLAGS")}


def _without_ptxas(flags: str) -> str:
    words = flags.split()
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word in ("-Xptxas", "--ptxas-options"):
            skip = True
            continue
        if word.startswith(("-Xptxas=", "--ptxas-options=")):
            continue
        kept.append(word)
    return " ".join(kept)


def _parse(argv: Sequence[str]) -> tuple[Path, str, dict[str, str]] | str:
    """(source folder, generator, -D definitions) of a configure command, or why it is not
    one seeding can stand for."""
    source: Path | None = None
    generator = ""
    defines: dict[str, str] = {}
    args = list(argv[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        value = args[i + 1] if i + 1 < len(args) else ""
        if arg in ("-S", "-G", "-B"):
            if arg == "-S":
                source = Path(value)
            elif arg == "-G":
                generator = value
            i += 2
            continue
        if arg.startswith(_PLATFORM_OPTIONS):
            return f"the configure passes {arg} (a toolchain or an initial cache)"
        if arg.startswith("-D"):
            body = arg[2:] if len(arg) > 2 else value
            if len(arg) == 2:
                i += 1
            name, _, val = body.partition("=")
            name = name.split(":", 1)[0]
            if _PLATFORM_VAR.fullmatch(name):
                return f"the configure sets {name}"
            if _DETECTION_VAR.fullmatch(name):
                defines[name] = val
        i += 1
    if source is None:
        return "the configure names no source folder (-S)"
    return source, generator, defines


def preamble_blocks(source: Path) -> str:
    """Why the tree's top CMakeLists.txt may make its own compiler checks differ from the
    probe's, or "": what it does before its first project() (compilers, flags, toolchain,
    environment, other files), and a compiler set anywhere in it."""
    try:
        text = read_regular(source / "CMakeLists.txt", limit=4 << 20).decode("utf-8", "replace")
    except OSError as exc:
        return f"the top CMakeLists.txt could not be read ({exc})"
    if _SETS_COMPILER.search(_code_only(text)):
        return "the top CMakeLists.txt sets a compiler"
    tree = _parser().parse(text.encode("utf-8", "replace"))
    for node in tree.root_node.children:
        name = _command_name(node)
        if name == "project":
            return ""
        if name in _PREAMBLE_COMMANDS:
            return f"the top CMakeLists.txt calls {name}() before project()"
        body = (node.text or b"").decode("utf-8", "replace")
        if node.type not in ("line_comment", "bracket_comment") and \
                _PREAMBLE_NAMES.search(body):
            return "the top CMakeLists.txt sets compiler or toolchain variables before project()"
    return "the top CMakeLists.txt has no project() at its top level"


def _parser() -> Parser:
    return Parser(Language(tree_sitter_cmake.language()))


def _command_name(node: Node) -> str:
    if node.type != "normal_command" or not node.children:
        return ""
    return (node.children[0].text or b"").decode("utf-8", "replace").lower()


def _code_only(text: str) -> str:
    """The text without its `#` line comments (a commented-out `set(CMAKE_CXX_COMPILER …)`
    sets nothing)."""
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def toolchain_key(cmake_exe: str, generator: str, defines: Mapping[str, str],
                  env: Mapping[str, str], platform: Platform) -> str:
    """What CMake's compiler checks depend on, hashed (see the module's docstring)."""
    compilers = sorted({v for k, v in defines.items() if k.endswith("COMPILER") and v} |
                       {p for p in (platform.which(env.get(var) or default, env)
                                    for var, default in (("CC", "cc"), ("CXX", "c++"),
                                                         ("CUDAHOSTCXX", ""))
                                    if env.get(var) or default) if p})
    payload = {
        "version": SEED_VERSION,
        # The path too: the probe's cache names the cmake that wrote it (CMAKE_COMMAND).
        "cmake": [cmake_exe, *_identity(cmake_exe)],
        "generator": generator,
        "defines": dict(sorted(defines.items())),
        "env": {name: env.get(name) or "" for name in _DETECTION_ENV},
        "compilers": {path: _identity(path) for path in compilers},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _identity(path: str) -> list[int]:
    try:
        st = Path(path).stat()
    except OSError:
        return []
    return [st.st_size, st.st_mtime_ns]


def _run_probe(probe: Path, cmake_exe: str, generator: str, defines: Mapping[str, str], *,
               env: Mapping[str, str], runner: Runner) -> str:
    """Configure the probe project and keep its checks in `probe`; "" when done, else why
    not."""
    probe.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".probe-", dir=probe.parent))
    try:
        src, out = work / "src", work / "build"
        src.mkdir()
        (src / "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.18)\n"
            f"project(flashbuild_probe LANGUAGES {' '.join(PROBE_LANGUAGES)})\n",
            encoding="utf-8")
        argv = [cmake_exe, "-S", str(src), "-B", str(out), "--no-warn-unused-cli"]
        if generator:
            argv += ["-G", generator]
        argv += [f"-D{name}={value}" for name, value in defines.items()]
        try:
            done = runner.run(argv, env=env, cwd=work, timeout=PROBE_TIMEOUT_S, check=False)
        except ProcessError as exc:  # it could not start, or timed out: try again next time
            return f"the compiler probe did not run to its end ({exc.what})"
        if not done.ok:
            # Not remembered: a probe fails for reasons of the moment too (a compiler killed
            # by a file-size limit or the OOM killer fails CMake's check with an error), and
            # a toolchain whose probe fails fails the configure's own checks as well.
            lines = [ln for ln in done.output.splitlines() if ln.strip()]
            return ("the compiler probe failed: " + (lines[-1][:200] if lines else
                                                     f"exit {done.returncode}"))
        kept = work / "seed"
        platform_dir = _platform_dir(out)
        if platform_dir is None:
            return "the compiler probe wrote no CMakeFiles/<version> folder"
        (kept / "CMakeFiles" / platform_dir.name).mkdir(parents=True)
        for item in platform_dir.iterdir():
            # The platform files a later configure reads; the compiled ABI binaries and the
            # identification folders are what the checks left behind, read by nothing.
            if item.is_file() and (item.name == "CMakeSystem.cmake" or
                                   re.fullmatch(r"CMake\w+Compiler\.cmake", item.name)):
                shutil.copyfile(item, kept / "CMakeFiles" / platform_dir.name / item.name)
        (kept / "CMakeCache.txt").write_text(
            probe_cache(out / "CMakeCache.txt",
                        {name for name in defines if name.endswith(_VARYING)}),
            encoding="utf-8")
        (kept / _COMPLETE).write_text(json.dumps({"defines": dict(defines)}, indent=1),
                                      encoding="utf-8")
        try:
            kept.replace(probe)
        except OSError:
            # Another flashbuild finished the same probe first: its copy is as good.
            if not (probe / _COMPLETE).is_file():
                raise
        return ""
    except OSError as exc:
        return f"the compiler probe could not be kept ({exc})"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _platform_dir(build_dir: Path) -> Path | None:
    """`CMakeFiles/<version>`: the folder of the version that configured (the one holding
    CMakeSystem.cmake)."""
    found = sorted((build_dir / "CMakeFiles").glob("*/CMakeSystem.cmake"))
    return found[0].parent if len(found) == 1 else None


def probe_cache(cache: Path, command_line: set[str]) -> str:
    """The probe's CMakeCache.txt without what is the probe's own (its folders, its project,
    the warnings its command line asked for) and without `command_line`, the entries the
    configure that uses the seed may set otherwise (its arch list, its flags): the entries
    CMake's checks wrote, and the compilers, toolkit and make program, which the key makes the
    same for every configure that uses the seed."""
    kept: list[str] = []
    for line in cache.read_text(encoding="utf-8", errors="replace").splitlines():
        m = _CACHE_LINE.match(line)
        if m is None:
            continue
        name = m.group(1)
        if _PROBE_OWN.fullmatch(name) or name in command_line:
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


def _copy_seed(probe: Path, build_dir: Path) -> None:
    build_dir.mkdir(parents=True, exist_ok=True)
    for item in sorted((probe / "CMakeFiles").glob("*/*")):
        target = build_dir / "CMakeFiles" / item.parent.name / item.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(item, target)
    # The cache last: without it CMake ignores the platform files and checks again.
    shutil.copyfile(probe / "CMakeCache.txt", build_dir / "CMakeCache.txt")
