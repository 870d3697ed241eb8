"""Arch lists a CMake project writes itself, over the CMAKE_CUDA_ARCHITECTURES a build passes:
read by the arch check's fix (building/backends/cmake.py) and by recipe init, which drafts
the edit that makes each read `--arch` and proves it with a second configure
(scanning/draft.py)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from flashbuild.platforms.files import read_regular

#: An arch list a CMakeLists writes itself, over whatever CMAKE_CUDA_ARCHITECTURES the
#: configure was given: a target's `CUDA_ARCHITECTURES "75;80;86;89"` property (it wins over
#: the variable), or `set(CMAKE_CUDA_ARCHITECTURES 80)` (a normal variable shadows the cache
#: entry -D sets). A value that reads a variable (`${...}`) is not a literal list.
_LITERAL_ARCHS = re.compile(
    r"(?P<pre>(?:\bset\s*\(\s*CMAKE_CUDA_ARCHITECTURES|\bCUDA_ARCHITECTURES)\s+)"
    r"(?P<value>\"[0-9A-Za-z;\- ]*[0-9][0-9A-Za-z;\- ]*\"|[0-9][0-9A-Za-z\-]*"
    r"(?:[ \t]+[0-9][0-9A-Za-z\-]*)*)")
#: How many CMake files the search for such a list reads at most (a bound on a huge tree).
_MAX_CMAKE_FILES = 2000


@dataclass(frozen=True)
class LiteralArchs:
    """A line of the tree's CMake files that writes a literal arch list."""

    file: str
    """Relative to the tree, with `/`."""
    line: int
    text: str
    """The line as it is (stripped)."""
    replacement: str
    """The same line reading the arch from CMAKE_CUDA_ARCHITECTURES (`--arch`)."""


def literal_arch_lists(source_dir: Path) -> list[LiteralArchs]:
    """The lines of `source_dir`'s CMake files (CMakeLists.txt, *.cmake; hidden and build*
    folders left out, at most _MAX_CMAKE_FILES read) that write a literal arch list, with the
    edit that makes each read --arch instead."""
    found: list[LiteralArchs] = []
    paths: list[Path] = []
    for folder, dirs, files in os.walk(source_dir):  # links to folders are not followed
        dirs[:] = sorted(d for d in dirs
                         if not d.startswith(".") and not d.lower().startswith("build"))
        paths += [Path(folder) / f for f in sorted(files)
                  if f == "CMakeLists.txt" or f.endswith(".cmake")]
        if len(paths) >= _MAX_CMAKE_FILES:
            break
    for path in paths[:_MAX_CMAKE_FILES]:
        rel = path.relative_to(source_dir)
        try:
            text = read_regular(path, 1 << 20).decode("utf-8", "replace")
        except OSError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            match = _LITERAL_ARCHS.search(code)
            if match is None:
                continue
            value = '"${CMAKE_CUDA_ARCHITECTURES}"'
            edited = code[:match.start("value")] + value + code[match.end("value"):]
            found.append(LiteralArchs(file=rel.as_posix(), line=number, text=line.strip(),
                                      replacement=edited.strip()))
    return found
