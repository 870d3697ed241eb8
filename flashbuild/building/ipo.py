"""A C++ compiler that cannot link with LTO, under a CMake tree that asks for it.

`set_target_properties(m PROPERTIES INTERPROCEDURAL_OPTIMIZATION ON)` makes CMake compile and
link with GCC's `-flto=auto -fno-fat-lto-objects`. A GCC whose `lto-wrapper` cannot run (the
H200 machine's `/opt/gcc/bin/g++`, which its image names in CXX) then fails at the link,
after every unit compiled: "/usr/bin/ld: error: could not run lto-wrapper" (torchmcubes). LTO
is an optimisation: the same code links without it. So when the tree's CMake files ask for
it and the compiler the build uses cannot link a one-line program with those flags, the
configure gets `CMAKE_PROJECT_INCLUDE`, a file included at the end of every `project()`,
which empties CMake's IPO options for C and C++ (set by CMake's compiler files inside that
`project()`, before the include; a normal variable, so every folder below inherits it), and
the build says so. The probe runs only for trees that name `INTERPROCEDURAL_OPTIMIZATION`,
once per compiler in a process.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild.errors import ProcessError, ToolchainError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flashbuild.runner import Runner

#: What a tree's CMake files say to ask for LTO (the property, its CMAKE_ default, or
#: check_ipo_supported before setting it).
_ASKS = ("INTERPROCEDURAL_OPTIMIZATION", "check_ipo_supported")
#: GCC's IPO flags as CMake's Compiler/GNU.cmake sets them (CMake 3.24 and later).
LTO_FLAGS = ("-flto=auto", "-fno-fat-lto-objects")
#: Folders of a tree that hold no CMake file of its build.
_SKIP = frozenset({".git", "build", "node_modules", "__pycache__"})
#: At most this many CMake files are read (a tree's own build has far fewer).
_MAX_FILES = 2000
INCLUDE = """\
# Written by flashbuild: {why}
# The tree asks for INTERPROCEDURAL_OPTIMIZATION, which this compiler cannot link. Included at
# the end of every project(): CMake's IPO options for C and C++ are emptied, so the targets
# that ask for IPO build as they would without it.
foreach(flashbuild_lang IN ITEMS C CXX)
  set(CMAKE_${{flashbuild_lang}}_COMPILE_OPTIONS_IPO "")
  set(CMAKE_${{flashbuild_lang}}_LINK_OPTIONS_IPO "")
  # A static library with IPO is archived with gcc-ar's LTO rules: the plain ones instead.
  foreach(flashbuild_rule IN ITEMS CREATE APPEND FINISH)
    set(CMAKE_${{flashbuild_lang}}_ARCHIVE_${{flashbuild_rule}}_IPO
        "${{CMAKE_${{flashbuild_lang}}_ARCHIVE_${{flashbuild_rule}}}}")
  endforeach()
endforeach()
"""

_probed: dict[tuple[str, int, int], str] = {}


def asks_for_ipo(source_dir: Path) -> bool:
    """Whether a CMakeLists.txt or *.cmake file of the tree names IPO."""
    seen = 0
    for folder, dirs, files in os.walk(source_dir):
        dirs[:] = [d for d in dirs if d not in _SKIP and not d.startswith(".")]
        for name in files:
            if name != "CMakeLists.txt" and not name.endswith(".cmake"):
                continue
            seen += 1
            if seen > _MAX_FILES:
                return False
            try:
                text = (Path(folder) / name).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if any(word in text for word in _ASKS):
                return True
    return False


def lto_refusal(runner: Runner, env: Mapping[str, str]) -> tuple[str, str]:
    """(compiler, why) when the C++ compiler CMake will take (CXX, else `c++`) cannot link a
    one-line program with GCC's LTO flags; ("", "") when it can or is no GCC-style driver."""
    try:
        argv = shlex.split(env.get("CXX") or "c++")  # `ccache g++` is a launcher and a compiler
    except ValueError:
        return "", ""
    found = runner.which(argv[0], env) if argv else None
    if found is None:
        return "", ""
    try:
        stat = Path(found).stat()
    except OSError:
        return "", ""
    key = (" ".join([found, *argv[1:]]), stat.st_size, stat.st_mtime_ns)
    if key not in _probed:
        _probed[key] = _probe(runner, [found, *argv[1:]], env)
    why = _probed[key]
    return (found, why) if why else ("", "")


def _probe(runner: Runner, cxx: list[str], env: Mapping[str, str]) -> str:
    with tempfile.TemporaryDirectory(prefix="flashbuild-lto-") as scratch:
        source = Path(scratch) / "lto.cpp"
        source.write_text("int main() { return 0; }\n", encoding="utf-8")
        try:
            done = runner.run([*cxx, *LTO_FLAGS, str(source), "-o", str(Path(scratch) / "a")],
                              env=env, timeout=120, check=False)
        except (ProcessError, ToolchainError, OSError):
            return ""
    if done.returncode == 0:
        return ""
    lines = [ln.strip() for ln in (done.stderr or done.stdout or "").splitlines() if ln.strip()]
    # MSVC's cl.exe and other drivers refuse the GCC flags themselves: not this case.
    if any("unrecognized" in ln or "unknown argument" in ln for ln in lines):
        return ""
    return next((ln for ln in lines if "lto" in ln.lower()), lines[0] if lines else
                f"exit {done.returncode}")


def no_ipo_include(build_dir: Path, cxx: str, why: str) -> Path:
    """Write the include (see the module docstring) into the build folder; its path."""
    path = build_dir / "flashbuild_no_ipo.cmake"
    path.write_text(INCLUDE.format(why=f"{cxx} cannot link with {' '.join(LTO_FLAGS)} "
                                   f"({why})".replace("\n", " ")), encoding="utf-8")
    return path


def note(cxx: str, why: str) -> str:
    """What the build says when it leaves LTO out."""
    return (f"{cxx} cannot link with LTO here ({why}); the tree's "
            "INTERPROCEDURAL_OPTIMIZATION is built without it (CMAKE_PROJECT_INCLUDE empties "
            "CMake's IPO options; the code is the same, not link-time optimised)")


def without_ipo(source_dir: Path, build_dir: Path, runner: Runner, env: Mapping[str, str],
                defines: Mapping[str, str]) -> tuple[str, str] | None:
    """(CMAKE_PROJECT_INCLUDE's value, the note) when the tree asks for IPO and the compiler
    cannot link it; None otherwise, or when the recipe sets CMAKE_PROJECT_INCLUDE itself."""
    if "CMAKE_PROJECT_INCLUDE" in defines or not asks_for_ipo(source_dir):
        return None
    cxx, why = lto_refusal(runner, env)
    if not why:
        return None
    return no_ipo_include(build_dir, cxx, why).as_posix(), note(cxx, why)
