"""Does the build link device code across translation units (separable compilation)?

By default nvcc compiles each unit whole: its device code is complete in its own object, and
with CUDA 13's `-static-global-template-stub=true` a kernel template instantiated in one unit
cannot even be launched from another (FACTS.md). With relocatable device code (nvcc
`-rdc=true`, `--relocatable-device-code=true`, `-dc`; CMake's `CUDA_SEPARABLE_COMPILATION ON`
target property, or `CMAKE_CUDA_SEPARABLE_COMPILATION` for every target) a unit may call a
`__device__` function or launch a kernel another unit defines, and the device linker resolves
it. A patch step that guards or removes a device symbol from one unit then breaks the device
link (LNK2019 on Windows) wherever another unit references it, so the transforms ask this
module first (TransformContext.separable).

Read from what the patch stage has before anything is configured: the recipe's `[build]`
(CMake defines and arguments, environment such as NVCC_APPEND_FLAGS) and the tree's own build
files (setup.py; the CMakeLists.txt the build reads and what it reaches); `recipe init`,
which has the configured build, adds the compile flags of its units (`from_units`). Each
answer is one line of evidence (`CMakeLists.txt:12: set_property(...
CUDA_SEPARABLE_COMPILATION ON)`), '' for none. A setting under a condition (`if(WIN32)`)
counts: the transforms then keep more, never less.
"""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from flashbuild.buildsystems import BuildSystem
    from flashbuild.source.treemodel import SourceUnit

_TRUE = ("ON", "TRUE", "YES", "Y", "1")
#: One nvcc argument that turns relocatable device code on, or off (`=false`).
_RDC_ON = frozenset({"-rdc=true", "--relocatable-device-code=true", "-dc", "--device-c"})
_RDC_OFF = frozenset({"-rdc=false", "--relocatable-device-code=false"})
_RDC_SPLIT = frozenset({"-rdc", "--relocatable-device-code"})
#: The same, in a build file's text (quoted or not; `-rdc true` as two words).
_RDC_TEXT = re.compile(r"(?<![\w-])(?:-rdc|--relocatable-device-code)(?:=|[\s'\",]+)true\b|"
                       r"(?<![\w-])(?:-dc|--device-c)(?![\w=-])", re.IGNORECASE)
_CMAKE_PROPERTY = re.compile(r"CUDA_SEPARABLE_COMPILATION\b[\s\"]+"
                             r"\"?(" + "|".join(_TRUE) + r")\b\"?", re.IGNORECASE)
_SUBDIR = re.compile(r"\b(add_subdirectory|include)\s*\(\s*\"?([^\s\")]+)", re.IGNORECASE)
_DIR_VARS = ("${CMAKE_CURRENT_SOURCE_DIR}/", "${CMAKE_CURRENT_LIST_DIR}/",
             "${PROJECT_SOURCE_DIR}/", "${CMAKE_SOURCE_DIR}/")


def rdc_flag(tokens: Sequence[str]) -> str:
    """The argument of one nvcc command line that leaves relocatable device code on ('' when
    none does, or a later one turns it off)."""
    found = ""
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in _RDC_ON:
            found = tok
        elif tok in _RDC_OFF:
            found = ""
        elif tok in _RDC_SPLIT and i + 1 < len(tokens):
            i += 1
            found = f"{tok} {tokens[i]}" if tokens[i].lower() == "true" else ""
        i += 1
    return found


def from_text(path: str, text: str) -> str:
    """Evidence in one build file (CMake or setup.py), '' for none. Comments are skipped."""
    for number, line in enumerate(text.splitlines(), start=1):
        code = line.split("#", 1)[0]
        match = _CMAKE_PROPERTY.search(code) if not path.endswith(".py") else None
        match = match or _RDC_TEXT.search(code)
        if match:
            return f"{path}:{number}: {' '.join(code.split())[:80]}"
    return ""


def from_tree(system: BuildSystem, cmake_source: str,
              read: Callable[[str], str | None]) -> str:
    """Evidence in the build files the build reads (`read` gives a tree file's text, None
    when it is absent or unreadable): setup.py for a setuptools build; for CMake, the
    top-level CMakeLists.txt and what it reaches through `add_subdirectory` and
    `include(….cmake)` with literal paths. A vendored library's CMakeLists that the build
    never reads (FlashMLA's csrc/cutlass, which turns separable compilation on for its own
    tests) does not count."""
    if system.runs_setup_py:
        text = read("setup.py")
        return from_text("setup.py", text) if text is not None else ""
    top = posixpath.normpath(posixpath.join(cmake_source, "CMakeLists.txt"))
    pending = [top]
    seen: set[str] = set()
    while pending:
        path = pending.pop(0)
        if path in seen or len(seen) > 200:
            continue
        seen.add(path)
        text = read(path)
        if text is None:
            continue
        found = from_text(path, text)
        if found:
            return found
        here = posixpath.dirname(path)
        for line in text.splitlines():
            for command, written in _SUBDIR.findall(line.split("#", 1)[0]):
                arg = written
                for prefix in _DIR_VARS:
                    arg = arg.removeprefix(prefix)
                if "${" in arg or (command.lower() == "include" and
                                   not arg.endswith(".cmake")):
                    continue
                target = posixpath.normpath(posixpath.join(here, arg))
                if target.startswith(("../", "/")) or target == "..":
                    continue  # outside the tree: never read (a tree cannot send us there)
                pending.append(posixpath.join(target, "CMakeLists.txt")
                               if command.lower() == "add_subdirectory" else target)
    return ""


def from_settings(settings: Iterable[tuple[str, str]]) -> str:
    """Evidence in build settings given as (where, text) pairs, e.g. a recipe's
    (`[[build.options]] define`, `CMAKE_CUDA_SEPARABLE_COMPILATION ON`) or (`[[build.env]]`,
    `NVCC_APPEND_FLAGS=-rdc=true`); '' for none."""
    for where, text in settings:
        if _CMAKE_PROPERTY.search(text.replace("=", " ")) or _RDC_TEXT.search(text):
            return f"{where} {text}"
    return ""


def from_units(units: Iterable[SourceUnit]) -> str:
    """Evidence in the configured build's compile flags (the tree model), '' for none."""
    for unit in units:
        flag = rdc_flag(unit.flags)
        if flag:
            return f"{unit.path} is compiled with {flag} ({unit.origin or 'the build'})"
    return ""
