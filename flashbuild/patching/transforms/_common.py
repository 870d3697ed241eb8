"""Shared pieces of the built-in transforms: file selection, expected-count checks, edits."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flashbuild.errors import PatchError, TreeError
from flashbuild.source import cxx

if TYPE_CHECKING:
    from flashbuild.patching.transforms.base import Site, TreeView

Expect = int | Mapping[str, int] | None
"""How many sites a transform expects: `None` = at least one, an int = exactly that many in
all files together, a table = exactly that many per file (files not named: none)."""

_GLOB_CHARS = frozenset("*?[")


def select_files(tree: TreeView, patterns: Iterable[str], *, transform: str) -> list[str]:
    """Files matching the patterns (globs, `**` allowed), sorted and unique. A pattern with no
    glob characters names one file, which must exist."""
    found: set[str] = set()
    for pattern in patterns:
        if _GLOB_CHARS.isdisjoint(pattern):
            if not tree.exists(pattern):
                raise PatchError(
                    f"{transform}: {pattern} does not exist in the source tree",
                    evidence=f"the recipe names the file `{pattern}`",
                    fix="check the path (relative to the tree root, forward slashes) or "
                    "whether upstream moved the file",
                )
            found.add(pattern)
        else:
            found.update(p for p in tree.glob(pattern) if is_text_source(tree, p))
    return sorted(found)


def is_text_source(tree: TreeView, path: str) -> bool:
    """Whether a file a glob matched can hold sites: a binary file, one that is not UTF-8 or
    a symlink leading out of the tree has none, and must not stop a step that merely globs
    past it (a file the recipe names itself still fails loudly when it is read)."""
    try:
        tree.read(path)
    except (PatchError, TreeError):
        return False
    return True


def check_expect(transform: str, expect: Expect, sites: Sequence[Site], files: Sequence[str],
                 *, what: str) -> None:
    """Raise PatchError ("upstream changed: …") when the sites found differ from `expect`.

    `what` names the sites in the message, e.g. "instantiation sites"."""
    per_file = Counter(s.path for s in sites)
    total = len(sites)
    where = ", ".join(f"{p}: {n}" for p, n in sorted(per_file.items())) or "none"
    listing = "; ".join(f"{s.path}:{s.line}" for s in sites[:12])
    if expect is None:
        if total == 0:
            raise PatchError(
                f"{transform} matched nothing: found no {what} in {_files(files)}",
                evidence="a transform that matches nothing is an error unless `expect = 0`",
                fix="check the `files` globs, or set `expect = 0` if nothing is to be done",
            )
        return
    if isinstance(expect, int):
        if total != expect:
            scope = files[0] if len(files) == 1 else f"{len(files)} files"
            raise PatchError(
                f"upstream changed: expected {expect} {what} in {scope}, found {total}",
                evidence=f"per file: {where}" + (f"; sites: {listing}" if listing else ""),
                fix="review the sites; if upstream really changed, update `expect` in the recipe",
                details={"expected": expect, "found": total, "per_file": dict(per_file)},
            )
        return
    for path in sorted(set(per_file) | set(expect)):
        want, got = expect.get(path, 0), per_file.get(path, 0)
        if want != got:
            raise PatchError(
                f"upstream changed: expected {want} {what} in {path}, found {got}",
                evidence=f"per file: {where}",
                fix="review the sites; if upstream really changed, update `expect` in the recipe",
                details={"expected": dict(expect), "found": dict(per_file)},
            )


def _files(files: Sequence[str]) -> str:
    if not files:
        return "no files (the globs matched nothing)"
    return ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")


@dataclass(frozen=True, order=True)
class Edit:
    """Replace bytes [start, end) with `text` (in the file's own line-ending style)."""

    start: int
    end: int
    text: str


def apply_edits(data: bytes, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping byte edits and return the new text."""
    out = bytearray(data)
    last = None
    for edit in sorted(edits, reverse=True):
        if last is not None and edit.end > last:
            raise AssertionError(f"overlapping edits at byte {edit.start}")
        out[edit.start:edit.end] = edit.text.encode("utf-8")
        last = edit.start
    return out.decode("utf-8")


def split_refusal(data: bytes, *offsets: int) -> str:
    """Why an edit at these line boundaries must be refused ('' when it may go ahead): one of
    them falls inside a backslash-continued logical line, a multi-line `#define` above all,
    which a line inserted or removed there would split (the file then compiles nowhere). No
    transform inserts or removes lines inside a macro definition; see cxx.continued_line."""
    split = cxx.continued_line(data, *offsets)
    if split is None:
        return ""
    return (f"inside {split.describe()}: a line inserted or removed here would split it "
            "(no transform edits the lines of a macro definition)")


def newline_of(text: str) -> str:
    """A file's line-ending style: CRLF when it has any, else LF."""
    return "\r\n" if "\r\n" in text else "\n"


def one_line(text: str, limit: int = 100) -> str:
    """A snippet for a site: whitespace collapsed, clipped."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
