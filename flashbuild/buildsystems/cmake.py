"""CMake: a top-level CMakeLists.txt, configured with Ninja (building/backends/cmake.py)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from flashbuild.buildsystems.base import (
    NOT_FOUND,
    BackendName,
    Confidence,
    Detection,
    IntrospectionKind,
    read_text,
)

if TYPE_CHECKING:
    from pathlib import Path

#: A leading comment that says the CMake file serves an IDE, not the build.
_IDE_ONLY = re.compile(r"\b(?:IDEs?|CLion|IntelliSense|VS ?Code|code completion|"
                       r"code navigation|indexing|clangd|compile_commands)\b", re.I)

#: A CMakeLists.txt that installs a CMake package for C++ users (`find_package(TorchScatter)`):
#: its library is the C++ API, not what a Python package loads.
_CPP_PACKAGE = re.compile(r"\b(?:configure_package_config_file|write_basic_package_version_file)"
                          r"\s*\(|\binstall\s*\(\s*EXPORT\b", re.I)

#: A command that defines (or may define) a library or module target: `add_library`,
#: `pybind11_add_module`, `Python_add_library`, `cuda_add_library`, and what can hide one
#: (`add_subdirectory`, `include`, a project's own `*_add_*` function).
_DEFINES_LIBRARY = re.compile(r"^[ \t]*(add_library|add_subdirectory|include|\w+_add_\w+)"
                              r"[ \t]*\(", re.I | re.M)


def _serves_something_else(text: str) -> str:
    """Why a CMakeLists.txt compiles something other than what the Python package loads
    ('' when it may be the binaries' build)."""
    if _CPP_PACKAGE.search(text):
        return ("CMakeLists.txt packages a C++ library for CMake users (a package config or "
                "install(EXPORT))")
    code = _code(text)
    if not _DEFINES_LIBRARY.search(code):
        return ("CMakeLists.txt defines no library or module target (no add_library, "
                "*_add_module, add_subdirectory or include)")
    static = _only_static_libraries(code)
    if static:
        return (f"CMakeLists.txt defines only static libraries ({', '.join(static[:3])}), "
                "which no Python package loads")
    return ""


#: add_library's types whose target no Python package loads; SHARED and MODULE are loaded.
_NOT_LOADED = frozenset({"STATIC", "OBJECT", "INTERFACE", "IMPORTED", "ALIAS"})
_ADD_LIBRARY = re.compile(r"^[ \t]*add_library[ \t]*\(([^)]*)\)", re.I | re.M)


def _only_static_libraries(code: str) -> list[str]:
    """The names of the libraries the CMakeLists defines when every target-defining command
    is an `add_library` of a static kind (STATIC, OBJECT, INTERFACE, …, or no type in a file
    that never names BUILD_SHARED_LIBS, whose default is STATIC; a type from a variable only
    when the file sets it, `_variable_kind`): a C++ library for C++
    consumers (diff-gaussian-rasterization's CudaRasterizer beside its setup.py's
    CUDAExtension). Empty when anything else may define a loadable target (a SHARED or
    MODULE library, `pybind11_add_module`, an add_subdirectory or include that can hide
    one)."""
    commands = [m[1].lower() for m in _DEFINES_LIBRARY.finditer(code)]
    if not commands or any(c != "add_library" for c in commands):
        return []
    names = []
    shared_default = "BUILD_SHARED_LIBS" in code
    for m in _ADD_LIBRARY.finditer(code):
        args = m[1].split()
        kind = args[1].upper() if len(args) > 1 else ""
        variable = _VARIABLE.fullmatch(args[1]) if len(args) > 1 else None
        if variable is not None:
            kind = _variable_kind(code, variable[1])
            if kind is None:
                return []  # `${LIB_TYPE}`: a type the file does not decide, maybe SHARED
        if kind in _NOT_LOADED or (kind not in {"SHARED", "MODULE"} and not shared_default):
            names.append(args[0] if args else "?")
        else:
            return []
    return names if len(names) == len(commands) else []


#: A whole argument that is one variable's value (`${LIB_TYPE}`).
_VARIABLE = re.compile(r"\$\{(\w+)\}")
_LIBRARY_TYPES = _NOT_LOADED | {"SHARED", "MODULE"}


def _variable_kind(code: str, name: str) -> str | None:
    """What `add_library(m ${name} …)` gets from the variable in its type's place: the type
    the file `set()`s it to (SHARED if any of its values is loadable), "" when the file makes
    it a source list (`set` to other values, `file(GLOB …)`, `list(APPEND …)`,
    `aux_source_directory`: no type given, the default), None when the file does not decide
    it (a cache entry, a -D, a parent's value: a type that may be SHARED)."""
    word = re.escape(name)
    values = [m[1].split() for m in re.finditer(
        rf"^[ \t]*set[ \t]*\([ \t]*{word}\b([^)]*)\)", code, re.I | re.M)]
    kinds = {v[0].strip("\"'").upper() for v in values if v} & _LIBRARY_TYPES
    if kinds:
        return "SHARED" if kinds & {"SHARED", "MODULE"} else sorted(kinds)[0]
    if any(values) or re.search(
            rf"^[ \t]*(?:file[ \t]*\([ \t]*GLOB(?:_RECURSE)?|list[ \t]*\([ \t]*APPEND|"
            rf"aux_source_directory[ \t]*\([^)\s]+)[ \t]+{word}\b", code, re.I | re.M):
        return ""
    return None


def ide_only(text: str) -> bool:
    """Whether a top-level CMakeLists.txt says, in its leading comments, that it exists for
    IDE indexing (then the tree's setup.py is the build)."""
    head: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        head.append(stripped)
    return bool(_IDE_ONLY.search(" ".join(head)))


def _code(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


class CMake:
    name: BackendName = "cmake"
    title = "CMake project"
    backend = "flashbuild.building.backends.cmake:CMakeBackend"
    introspection: IntrospectionKind = "cmake-configure"
    introspection_step = "configuring (no compile)"
    introspection_label = "a CMake configure"
    model_source = "CMake File API"
    target_noun = "target"
    compiles_cmake_targets = True
    installs_recipe_artifacts = True
    steered_by_environment = False
    reads_torch_arch_list = False
    needs_torch_to_build = False
    runs_setup_py = False
    configured_by_pyproject = False

    def detect(self, tree: Path) -> Detection:
        path = tree / "CMakeLists.txt"
        if not path.is_file():
            return NOT_FOUND
        text = read_text(path)
        if text is None:
            # As before the registry: a CMakeLists.txt that cannot be read is still the build.
            return Detection(Confidence.PROJECT, "CMakeLists.txt (not readable: taken as the "
                             "build)")
        if ide_only(text):
            return Detection(Confidence.SECONDARY,
                             "CMakeLists.txt says in its leading comments that it serves IDEs")
        side = _serves_something_else(text)
        if side:
            return Detection(Confidence.SIDE, side)
        defines = _DEFINES_LIBRARY.search(_code(text))
        return Detection(Confidence.PROJECT, "CMakeLists.txt defines the project's targets "
                         f"({defines[1] if defines else '?'}(…))")


CMAKE = CMake()
