"""What the build compiles for the target, and what those sources include.

For a tree built by its `setup.py` (`flashbuild.source.setuppy`), the compiled sources are
those of every extension the target builds (or may build: a test the scan cannot decide
counts as built), and the reachable files are those sources plus every `#include` followed
from them: a quoted include next to the including file first, then the extension's include
folders, then the tree root; an angle include through the include folders. A header no
compiled source includes, a sub-project with its own `setup.py`, ROCm-only sources: none of
them is compiled for the target, so the scan does not check them (it says how many it left
out, per folder).

Vendored folders are decided here too: `.gitmodules` paths, `third_party/`-style names, and
known libraries recognised by their content wherever they sit (a CUTLASS copy has
`include/cutlass/cutlass.h` and `include/cute`; CCCL has `cub/cub.cuh` or `thrust/version.h`;
composable_kernel has `include/ck`).
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from flashbuild.source.preprocess import Unit
    from flashbuild.source.setuppy import SetupPy
    from flashbuild.source.treemodel import TreeModel

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)

#: Marker files of libraries that trees copy in (relative to the library's folder).
VENDORED_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("CUTLASS", ("include/cutlass/cutlass.h", "include/cute")),
    ("CUTLASS", ("cutlass/cutlass.h", "cute")),
    ("CCCL", ("cub/cub.cuh",)),
    ("CCCL", ("thrust/version.h",)),
    ("CCCL", ("libcudacxx/include",)),
    ("composable_kernel", ("include/ck", "include/ck_tile")),
    ("pybind11", ("include/pybind11/pybind11.h",)),
)


def gitmodule_paths(root: Path) -> frozenset[str]:
    """The `path = …` entries of the tree's `.gitmodules` (forward slashes)."""
    try:
        text = (root / ".gitmodules").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    return frozenset(m[1].strip().strip("/").replace("\\", "/") for m in
                     re.finditer(r"^\s*path\s*=\s*(.+?)\s*$", text, re.MULTILINE))


def vendored_library(folder: Path) -> str | None:
    """The library a folder holds a copy of, recognised by content; None for own code."""
    for name, markers in VENDORED_MARKERS:
        if all((folder / m).exists() for m in markers):
            return name
    return None


def count_files(folder: Path) -> int:
    return sum(len(files) for _d, _s, files in os.walk(folder))


@dataclass(frozen=True)
class Include:
    spelled: str
    line: int
    resolved: str | None
    """Tree-relative path of the included file, None when it is not in the scanned tree."""


@dataclass
class Reach:
    """The files the target's build compiles or includes, and why each one."""

    setup: SetupPy | None
    """The static reading of setup.py (its rules and packages); None for a CMake build."""
    compiled: dict[str, str] = field(default_factory=dict)
    """Source → evidence (`setup.py:349 flash_attn_2_cuda (not SKIP_CUDA_BUILD)`)."""
    reachable: dict[str, str] = field(default_factory=dict)
    """Every compiled source and included file → evidence."""
    includes: dict[str, list[Include]] = field(default_factory=dict)
    complete: bool = True
    """False when some source list could not be read: then nothing is left out."""
    package_dirs: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    """The compiled units' include folders inside the tree (tree-relative)."""
    units: dict[str, Unit] = field(default_factory=dict)
    """Per compiled source, its real include folders and flags, when the configured build
    said so (`from_model`); empty for the static reading."""
    via: str = ""
    """How the configured build was read (`CMake File API (…)`, `setup.py record mode`);
    empty for the static reading of setup.py."""
    none_compiled: str = ""
    """Why the tree's own build compiles no C/C++ at all (`setuppy.builds_nothing`), when the
    static reading says so; then `compiled` is empty."""

    def covers(self, path: str) -> bool:
        return path in self.reachable

    def shipped(self, path: str) -> bool:
        """Whether a Python file is part of what setup.py installs (or is setup.py)."""
        if path.rpartition("/")[2] == "setup.py" and "/" not in path:
            return True
        if not self.package_dirs:
            return True
        return any(path.startswith(f"{d}/") for d in self.package_dirs)


def compute_reach(setup: SetupPy, files: Iterable[str],
                  read: Callable[[str], str | None]) -> Reach:
    known = frozenset(files)
    reach = Reach(setup)
    include_dirs: list[str] = []
    for ext in setup.built_for_target():
        if not ext.sources_complete:
            reach.complete = False
        where = f"{setup.path}:{ext.line} builds it into `{ext.name or '?'}`" + (
            f" ({ext.condition})" if ext.condition else "")
        for src in ext.sources:
            reach.compiled.setdefault(src, where)
        include_dirs.extend(d for d in ext.include_dirs if d not in include_dirs)
    reach.package_dirs = _package_dirs(setup)
    reach.include_dirs = tuple(include_dirs)
    _follow(reach, known, read)
    return reach


def _package_dirs(setup: SetupPy) -> tuple[str, ...]:
    """The tree folders of the packages setup.py installs."""
    package_dirs = []
    pdir = dict(setup.package_dir)
    for pkg in setup.packages:
        top = pkg.split(".")[0]
        base = pdir.get(top, pdir.get("", ""))
        rel = pkg.replace(".", "/") if top not in pdir else \
            posixpath.join(base, *pkg.split(".")[1:])
        if "" in pdir and top not in pdir and base:
            rel = posixpath.join(base, rel)
        package_dirs.append(posixpath.normpath(rel))
    return tuple(sorted(set(package_dirs)))


def from_model(model: TreeModel, files: Iterable[str], read: Callable[[str], str | None],
               setup: SetupPy | None = None) -> Reach:
    """What the configured build compiles (`model`: its targets' sources, tree-relative) and
    what those sources include through their real include folders. `setup`, the static
    reading of a setup.py, adds its rules and its packages (which Python is shipped)."""
    from flashbuild.source.preprocess import Unit  # noqa: PLC0415  # start-up

    reach = Reach(setup, via=model.via)
    include_dirs: list[str] = []
    for target in model.targets:
        for unit in target.sources:
            if posixpath.isabs(unit.path) or unit.path.startswith("../"):
                continue  # generated in the build folder, or outside the tree
            into = "" if f"`{target.name}`" in target.defined_at else f" into `{target.name}`"
            reach.compiled.setdefault(
                unit.path, f"{target.defined_at} compiles it{into} ({model.via})")
            reach.units.setdefault(unit.path, Unit(
                unit.path, unit.includes,
                (*(f"-D{d}" for d in unit.defines), *unit.flags, *unit.arch_flags)))
            include_dirs.extend(d for d in unit.includes if d not in include_dirs
                                and not posixpath.isabs(d) and not d.startswith("../"))
    if setup is not None:
        reach.package_dirs = _package_dirs(setup)
    reach.include_dirs = tuple(include_dirs)
    _follow(reach, frozenset(files), read)
    return reach


def _follow(reach: Reach, known: frozenset[str], read: Callable[[str], str | None]) -> None:
    """Every file the compiled sources include, transitively: a quoted include next to the
    including file first, then the include folders, then the tree root."""
    include_dirs = reach.include_dirs
    queue = [s for s in reach.compiled if s in known]
    for s in queue:
        reach.reachable[s] = reach.compiled[s]
    while queue:
        path = queue.pop()
        text = read(path)
        if text is None:
            continue
        incs = []
        folder = posixpath.dirname(path)
        for m in INCLUDE.finditer(text):
            spelled = m[2].strip()
            line = text.count("\n", 0, m.start()) + 1
            candidates = ([posixpath.normpath(posixpath.join(folder, spelled))]
                          if m[1] == '"' else [])
            candidates += [posixpath.normpath(posixpath.join(d, spelled)) for d in include_dirs]
            if m[1] == '"':
                candidates.append(posixpath.normpath(spelled))
            resolved = next((c for c in candidates if c in known), None)
            incs.append(Include(spelled, line, resolved))
            if resolved is not None and resolved not in reach.reachable:
                reach.reachable[resolved] = f"included from {path}:{line}"
                queue.append(resolved)
        reach.includes[path] = incs


def includes_header(reach: Reach, source: str, header: str) -> Include | None:
    """The include in `source` through which `header` (as spelled, e.g. torch/extension.h)
    is pulled in: the direct include when there is one, else the first include of a tree
    file that pulls it in."""
    incs = reach.includes.get(source, [])
    direct = next((i for i in incs if i.spelled == header), None)
    if direct is not None:
        return direct
    seen: set[str] = {source}
    for inc in incs:
        stack = [inc.resolved] if inc.resolved else []
        while stack:
            cur = stack.pop()
            if cur in seen:
                continue
            seen.add(cur)
            inner = reach.includes.get(cur, [])
            if any(i.spelled == header for i in inner):
                return inc
            stack.extend(i.resolved for i in inner if i.resolved)
    return None
