"""Which Python package a CMake shared library belongs to (`recipe init`'s `[install]` for a
tree whose only binaries are `add_library(NAME SHARED …)` targets).

Such a library is no extension module: nothing imports it by name. Its package loads it
itself, usually `ctypes.CDLL(os.path.join(os.path.dirname(__file__), "libfoo_cuda.so"))`,
so the library must sit in that package's folder. Three readings say which folder, each
with its evidence (the file and line):

- the CMakeLists writes the library into a package folder of the tree
  (`LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/foo`, or
  `CMAKE_LIBRARY_OUTPUT_DIRECTORY`);
- it installs the library into one (`install(TARGETS foo_cuda DESTINATION foo)`: the
  install prefix is the wheel's root under scikit-build and the like);
- a module of a package loads it with ctypes (a loader call, and the library's file name
  as a string in the same file).

Read from the text (tree-sitter-cmake commands, Python's `ast`); nothing runs.
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

#: Calls that load a shared library by path: ctypes' constructors and loaders, numpy's helper.
LOADERS = frozenset({"CDLL", "PyDLL", "WinDLL", "OleDLL", "LoadLibrary", "load_library"})
#: CMake variables that mean "the folder of this CMakeLists" / "the top of the project".
_HERE = ("CMAKE_CURRENT_SOURCE_DIR", "CMAKE_CURRENT_LIST_DIR")
_TOP = ("PROJECT_SOURCE_DIR", "CMAKE_SOURCE_DIR")
_OUTPUT = ("LIBRARY_OUTPUT_DIRECTORY", "RUNTIME_OUTPUT_DIRECTORY")


class CMakeCall(Protocol):
    """One command of the tree's CMake files (draft.py's `_CMakeCommand`)."""

    @property
    def file(self) -> str: ...
    @property
    def line(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def args(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class PluginHome:
    """The package a shared-library target installs into, and why."""

    library: str
    """The `[[artifact]]` name (the CMake target)."""
    package: str
    """Dotted import name."""
    folder: str
    """The package's folder in the tree."""
    how: str
    """What says so: `CMakeLists.txt:9: the CMakeLists writes foo_cuda into foo/`."""
    via: Literal["output", "install", "ctypes"]
    """Which reading: CMake's output folder, CMake's install destination, a ctypes load."""
    loaded: str = ""
    """Where the package loads it with ctypes, when a module of it does (`ctlib/__init__.py:6
    names libctlib_cuda.so, …`)."""


def library_files(name: str) -> tuple[str, ...]:
    """The file names a shared-library target `name` gets on Linux, Windows and macOS."""
    return (f"lib{name}.so", f"{name}.dll", f"lib{name}.dylib", f"{name}.so")


def find_homes(libraries: Sequence[str], *, commands: Sequence[CMakeCall],
               python_files: Sequence[str], read: Callable[[str], str | None],
               top: str) -> list[PluginHome]:
    """A home for each library that has one (CMake's output or install folder first: the
    build puts it there; else the package that loads it). `top` is the top CMakeLists.txt."""
    packages = _package_folders(python_files)
    homes: list[PluginHome] = []
    loaders = _ctypes_loaders(libraries, python_files, read, packages)
    for lib in libraries:
        home = _cmake_home(lib, commands, packages, top)
        loader = loaders.get(lib)
        if home is None:
            home = loader
        elif loader is not None and loader.folder == home.folder:
            home = dataclasses.replace(home, loaded=loader.how)
        if home is not None:
            homes.append(home)
    return homes


def _package_folders(python_files: Sequence[str]) -> dict[str, str]:
    """Package folder -> dotted name, for every folder holding an `__init__.py` (parents that
    are packages too make the name dotted)."""
    inits = {str(PurePosixPath(f).parent) for f in python_files
             if PurePosixPath(f).name == "__init__.py"}
    out: dict[str, str] = {}
    for folder in sorted(inits):
        parts = [PurePosixPath(folder).name]
        parent = PurePosixPath(folder).parent
        while str(parent) in inits:
            parts.insert(0, parent.name)
            parent = parent.parent
        out[folder] = ".".join(parts)
    return out


def _tree_folder(value: str, cmd: CMakeCall, top: str) -> str | None:
    """A CMake path value as a folder of the tree: `${CMAKE_CURRENT_SOURCE_DIR}/foo` -> the
    CMakeLists' folder + foo; None for anything else (the binary folder, a cache variable)."""
    m = re.fullmatch(r"\$\{(\w+)\}(?:/(.*))?", value.strip().strip('"'))
    if m is None:
        return None
    if m[1] in _HERE:
        base = str(PurePosixPath(cmd.file).parent)
    elif m[1] in _TOP:
        base = str(PurePosixPath(top).parent)
    else:
        return None
    folder = posixpath.normpath(posixpath.join(base, m[2] or "."))
    return None if folder.startswith("..") else folder


def _cmake_home(lib: str, commands: Sequence[CMakeCall], packages: dict[str, str],
                top: str) -> PluginHome | None:
    for cmd in commands:
        where = f"{cmd.file}:{cmd.line}"
        values: list[str] = []
        if cmd.name == "set_target_properties" and "PROPERTIES" in cmd.args and \
                lib in cmd.args[:cmd.args.index("PROPERTIES")]:
            props = cmd.args[cmd.args.index("PROPERTIES") + 1:]
            values = [v for k, v in zip(props[0::2], props[1::2], strict=False) if k in _OUTPUT]
        elif cmd.name == "set_property" and cmd.args[:1] == ("TARGET",) and \
                "PROPERTY" in cmd.args and lib in cmd.args[1:cmd.args.index("PROPERTY")]:
            at = cmd.args.index("PROPERTY")
            if len(cmd.args) > at + 2 and cmd.args[at + 1] in _OUTPUT:
                values = [cmd.args[at + 2]]
        elif cmd.name == "set" and len(cmd.args) > 1 and cmd.args[0] in (
                "CMAKE_LIBRARY_OUTPUT_DIRECTORY", "CMAKE_RUNTIME_OUTPUT_DIRECTORY"):
            values = [cmd.args[1]]
        for value in values:
            folder = _tree_folder(value, cmd, top)
            if folder is not None and folder in packages:
                return PluginHome(lib, packages[folder], folder,
                                  f"{where}: the CMakeLists writes {lib} into {folder}/",
                                  "output")
        if cmd.name == "install" and cmd.args[:1] == ("TARGETS",) and lib in cmd.args:
            destination = _destination(cmd.args)
            dotted = destination.strip("/").replace("/", ".") if destination else ""
            folder = next((f for f, name in packages.items() if name == dotted), None)
            if folder is not None:
                return PluginHome(lib, dotted, folder,
                                  f"{where}: install(TARGETS {lib} … DESTINATION "
                                  f"{destination}), the package `{dotted}`", "install")
    return None


def _destination(args: Sequence[str]) -> str:
    """The LIBRARY (else the first) DESTINATION of an install(TARGETS …): a shared library is
    LIBRARY on Linux, RUNTIME on Windows."""
    found = ""
    for i, arg in enumerate(args[:-1]):
        if arg == "DESTINATION" and "${" not in args[i + 1]:
            kind = args[i - 1] if i else ""
            if kind == "LIBRARY":
                return args[i + 1]
            found = found or args[i + 1]
    return found


def _ctypes_loaders(libraries: Sequence[str], python_files: Sequence[str],
                    read: Callable[[str], str | None],
                    packages: dict[str, str]) -> dict[str, PluginHome]:
    """library -> the package of the first module (in a package folder) that calls a ctypes
    loader and names one of the library's file names in a string."""
    wanted = {lib: library_files(lib) for lib in libraries}
    out: dict[str, PluginHome] = {}
    for rel in sorted(python_files, key=lambda f: (f.count("/"), f)):
        folder = str(PurePosixPath(rel).parent)
        if folder not in packages:
            continue
        text = read(rel)
        if text is None or not any(n in text for names in wanted.values() for n in names):
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        loads = any(isinstance(n, ast.Call) and _callee(n.func) in LOADERS
                    for n in ast.walk(tree))
        if not loads:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            base = PurePosixPath(node.value.replace("\\", "/")).name
            for lib, names in wanted.items():
                if base in names and lib not in out:
                    how = (f"{rel}:{node.lineno} names {base}, and the module loads libraries "
                           "with ctypes")
                    out[lib] = PluginHome(lib, packages[folder], folder, how, "ctypes",
                                          loaded=how)
    return out


def _callee(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""
