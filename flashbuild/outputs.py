"""Where a command may write a file it was asked to write (`recipe init -o`, `scan --sarif`).

A command that reads a tree and writes a report must not write over the tree it just read:
`recipe init --source T -o T/setup.py` replaced the tree's own setup.py with the draft, exit 0
(issue 22). An existing file inside the tree is refused unless the user says `--force`; a new
file inside the tree, or any file outside it, is written as asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashbuild.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path


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
