"""An in-memory `TreeView` for transform tests (the engine's real one reads a directory)."""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

from flashbuild.errors import PatchError

if TYPE_CHECKING:
    from pathlib import Path


class DictTree:
    """Files as a dict: relative path → text (line endings as given)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = dict(files)

    @classmethod
    def from_dir(cls, root: Path) -> DictTree:
        files = {}
        for path in sorted(root.rglob("*")):
            if path.is_file():
                files[path.relative_to(root).as_posix()] = path.read_bytes().decode("utf-8")
        return cls(files)

    def read(self, path: str) -> str:
        if path not in self.files:
            raise PatchError(f"{path} does not exist")
        return self.files[path]

    def exists(self, path: str) -> bool:
        return path in self.files

    def glob(self, pattern: str) -> list[str]:
        # fnmatch's `*` also crosses `/`, which is what `**` means; good enough for tests.
        return sorted(p for p in self.files if fnmatch.fnmatchcase(p, pattern))

    def apply(self, changes: dict[str, str]) -> DictTree:
        return DictTree({**self.files, **changes})
