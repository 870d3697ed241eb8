"""Where a command may write a file it was asked to write (`recipe init -o`, `scan --sarif`).

A command that reads a tree and writes a report must not write over the tree it just read:
`recipe init --source T -o T/setup.py` replaced the tree's own setup.py with the draft, exit 0
(issue 22). An existing file inside the tree is refused unless the user says `--force`; a new
file inside the tree, or any file outside it, is written as asked.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, BinaryIO

from flashbuild.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

#: Suffix of the temp file `write_no_follow` creates beside its target.
NO_FOLLOW_TMP = ".flashbuild-tmp"

#: Flags of the temp file: never an existing file, never through a link (O_NOFOLLOW is
#: missing on Windows, where O_EXCL alone refuses an existing link).
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) \
    | getattr(os, "O_BINARY", 0)


def open_new(path: Path) -> BinaryIO:
    """Open `path` for writing as a new file: a file or link left there (by a killed run, or
    planted) is removed first, and the open neither follows a link nor reuses a file."""
    path.unlink(missing_ok=True)  # unlink removes a link, never its target
    return os.fdopen(os.open(path, _CREATE, 0o666), "wb")


def write_no_follow(path: Path, data: bytes) -> None:
    """Write `data` as the file `path`, all or nothing, never through a link.

    A draft path that was a link to a user's file outside the build folder overwrote that file,
    and a dangling link created one (issue 27): the bytes go to a new temp file beside `path`
    (created exclusively, without following links) that then replaces `path` itself, so a link
    there is replaced, not followed. On any OSError (a full disk: ENOSPC) the temp file is
    removed, `path` is as it was, and the error is raised for the caller to explain."""
    tmp = path.with_name(path.name + NO_FOLLOW_TMP)
    try:
        with open_new(tmp) as fh:
            fh.write(data)
        tmp.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def refuse_over_tree(output: Path, tree: Path, *, option: str, force: bool) -> None:
    """Raise UsageError when `output` is an existing file (or a link to one) inside `tree`
    (after resolving links on both sides) and `force` is not set."""
    if force or not (output.exists() or output.is_symlink()):
        return
    target = output.resolve()
    root = tree.resolve()
    if target != root and root not in target.parents:
        return
    raise UsageError(
        f"`{option} {output}` would overwrite a file of the tree being read",
        evidence=f"{target} exists inside {root}"
        + (f" ({output} is a link to it)" if output.is_symlink() else ""),
        fix=f"write it outside the tree (e.g. `{option} {output.name}` in another folder), "
        f"or pass --force to overwrite {target.name}")
