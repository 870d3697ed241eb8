"""A source tree on disk plus the edits planned so far: the `TreeView` transforms and diffs read.

Paths are relative, with forward slashes. Every path is checked before it is used: absolute
paths, drive letters, `..` components and symlinks that resolve outside the tree are refused
with a `TreeError` (FACTS.md, "Applying unified diffs": such paths must be refused). The
engine's own state folder `.flashbuild/` and VCS folders are invisible to globs.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from flashbuild.errors import PatchError, TreeError
from flashbuild.source.text import decode, not_text_reason, sniff_encoding

STATE_DIR = ".flashbuild"
_HIDDEN_DIRS = frozenset({STATE_DIR, ".git", ".hg", ".svn"})


@functools.lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """A compiled regex for a glob over relative POSIX paths: `*` and `?` stay inside one
    component, `**` spans any number of components (also none), `[...]` is a class."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:[^/]+/)*"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 1)
            body = pattern[i + 1:end]
            out += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def check_rel(path: str) -> str:
    """Normalise a relative tree path or raise TreeError when it could leave the tree."""
    text = path.replace("\\", "/")
    posix = PurePosixPath(text)
    if (posix.is_absolute() or re.match(r"^[A-Za-z]:", text) or text.startswith("//")):
        raise TreeError(f"the path `{path}` is absolute",
                        evidence="patches and transforms may only name files inside the tree",
                        fix="use a path relative to the tree root")
    parts = [p for p in posix.parts if p not in ("", ".")]
    if ".." in parts:
        raise TreeError(f"the path `{path}` climbs out of the tree with `..`",
                        evidence="patches and transforms may only name files inside the tree",
                        fix="use a path relative to the tree root, without `..`")
    if not parts:
        raise TreeError(f"the path `{path}` names the tree root, not a file")
    if parts[0] == STATE_DIR:
        raise TreeError(f"the path `{path}` is inside flashbuild's own state folder")
    return "/".join(parts)


def check_inside(root: Path, path: str) -> Path:
    """The location of the relative `path` under `root`, refusing every way out: what
    `check_rel` refuses, and any folder on the way that is a symlink (a folder replaced by a
    link to elsewhere must not let a write or a restore land outside the tree). The file
    itself may be a symlink: replacing or unlinking it never touches what it points to."""
    rel = check_rel(path)
    here = root
    for part in rel.split("/")[:-1]:
        here = here / part
        if here.is_symlink():
            raise TreeError(
                f"`{rel}` goes through the symlinked folder `{here.relative_to(root)}`",
                evidence=f"{here} -> {here.readlink()}",
                fix="flashbuild writes only through real folders of the tree: replace the "
                "symlink by the folder itself, or patch the tree it points to")
        if here.exists() and not here.is_dir():
            raise TreeError(f"`{rel}` needs `{here.relative_to(root)}` to be a folder, "
                            "and it is a file", evidence=str(here),
                            fix="move that file away, then run the command again")
    return root / rel


@dataclass
class Tree:
    """A source tree on disk with an overlay of planned contents.

    `base` overrides what is on disk (the engine puts the pristine originals of an already
    patched tree there, so planning always starts from the unpatched tree); `planned` holds
    the edits of the steps planned so far (`None` = deleted).
    """

    root: Path
    base: dict[str, bytes | None] = field(default_factory=dict)
    planned: dict[str, bytes | None] = field(default_factory=dict)
    #: Files `read` could not decode (path → why), and files read in an encoding other than
    #: UTF-8 (path → encoding), since the engine last cleared them: a step reports both, and
    #: a step with `expect` fails when a file of its globs could not be read.
    undecodable: dict[str, str] = field(default_factory=dict)
    not_utf8: dict[str, str] = field(default_factory=dict)
    _files: list[str] | None = None

    def __post_init__(self) -> None:
        self.root = self.root.resolve()

    # -- paths -------------------------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """The real location of `path`, refusing symlinks that lead outside the tree."""
        rel = check_rel(path)
        full = self.root / rel
        real = Path(os.path.realpath(full))
        if real != self.root and self.root not in real.parents:
            raise TreeError(f"`{rel}` leads out of the tree through a symlink",
                            evidence=f"it resolves to {real}",
                            fix="replace the symlink by a real file or patch the target tree")
        return full

    # -- reading -----------------------------------------------------------------------------

    def disk_bytes(self, path: str) -> bytes | None:
        full = self.resolve(path)
        try:
            return full.read_bytes() if full.is_file() else None
        except OSError as exc:
            raise PatchError(f"cannot read `{path}`", evidence=str(exc)) from exc

    def pristine_bytes(self, path: str) -> bytes | None:
        """Bytes before any planned step (the base overlay, else the disk)."""
        rel = check_rel(path)
        if rel in self.base:
            return self.base[rel]
        return self.disk_bytes(rel)

    def read_bytes(self, path: str) -> bytes | None:
        rel = check_rel(path)
        if rel in self.planned:
            self.resolve(rel)
            return self.planned[rel]
        return self.pristine_bytes(rel)

    def read(self, path: str) -> str:
        data = self.read_bytes(path)
        if data is None:
            raise PatchError(f"`{path}` does not exist in the tree {self.root}",
                             fix="check the path in the recipe or the `--source` tree")
        try:
            text = decode_text(path, data)
        except PatchError as exc:
            self.undecodable[check_rel(path)] = exc.evidence
            raise
        encoding = sniff_encoding(data)
        if encoding != "utf-8":
            self.not_utf8[check_rel(path)] = str(encoding)
        return text

    def exists(self, path: str) -> bool:
        return self.read_bytes(path) is not None

    def glob(self, pattern: str) -> list[str]:
        regex = glob_regex(pattern.replace("\\", "/").removeprefix("./"))
        return [p for p in self.files() if regex.match(p)]

    def files(self) -> list[str]:
        """Every file of the tree as planned so far, sorted."""
        if self._files is None:
            found: list[str] = []
            for dirpath, dirnames, filenames in os.walk(self.root):
                dirnames[:] = sorted(d for d in dirnames if d not in _HIDDEN_DIRS)
                rel_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
                prefix = "" if rel_dir == "." else rel_dir + "/"
                found.extend(prefix + name for name in filenames)
            self._files = found
        names = set(self._files)
        for overlay in (self.base, self.planned):
            for rel, data in overlay.items():
                if data is None:
                    names.discard(rel)
                else:
                    names.add(rel)
        return sorted(names)

    # -- planning ----------------------------------------------------------------------------

    def plan(self, path: str, data: bytes | None) -> None:
        """Record the planned content of a file (None = delete)."""
        rel = check_rel(path)
        self.resolve(rel)
        check_inside(self.root, rel)  # written later: no symlinked folder on the way
        self.planned[rel] = data

    def changed(self) -> dict[str, bytes | None]:
        """Planned content of every file whose planned bytes differ from the pristine ones."""
        return {rel: data for rel, data in sorted(self.planned.items())
                if data != self.pristine_bytes(rel)}


def decode_text(path: str, data: bytes) -> str:
    """Source text of a file in the encoding `sniff_encoding` finds; a file that is not text
    (NUL bytes without a UTF-16 BOM, damaged UTF-16) is refused."""
    decoded = decode(data)
    if decoded is None:
        raise PatchError(
            f"`{path}` is not a text file flashbuild can read",
            evidence=not_text_reason(data),
            fix="convert it to UTF-8 (or UTF-16 with a BOM), or leave it out of the step (its "
            "`files` globs, or the diff)")
    return decoded[0]


def encode_like(path: str, text: str, original: bytes | None) -> bytes:
    """`text` in the encoding of the file's `original` bytes (UTF-8 for a new file), so a
    Latin-1 or UTF-16 source stays Latin-1 or UTF-16 after an edit."""
    encoding = sniff_encoding(original) if original is not None else None
    encoding = encoding or "utf-8"
    try:
        return text.encode(encoding)
    except UnicodeEncodeError as exc:
        raise PatchError(
            f"the edit of `{path}` adds text its encoding ({encoding}) cannot hold",
            evidence=f"{text[exc.start:exc.end]!r} at character {exc.start}; flashbuild keeps "
            "each file in the encoding it was read in",
            fix="write the recipe's inserted text in ASCII, or convert the file to UTF-8") from exc
