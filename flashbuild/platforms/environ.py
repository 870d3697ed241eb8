"""Environments and program lookup with each OS's own rules.

Windows variable names are case-insensitive (`Path` is `PATH`): `os.environ` hides that by
upper-casing every name, but a plain dict built from `set`'s output or `dict(os.environ)`
does not, so `env["VCToolsVersion"]` or `env.get("PATH")` silently miss (FACTS.md "MSVC
environment capture"). `CaseInsensitiveEnv` keeps the first spelling of each name and answers
any spelling. Program lookup never searches the current directory: `shutil.which` on Windows
(Python < 3.12, and later unless NoDefaultCurrentDirectoryInExePath is set) looks there first,
so a stray `cl.exe` or `nvcc.exe` in the working folder would be used; on POSIX an empty or
relative PATH entry means the current directory too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: Extensions Windows tries for a bare program name when PATHEXT is not set.
DEFAULT_PATHEXT = ".COM;.EXE;.BAT;.CMD"


class CaseInsensitiveEnv(dict[str, str]):
    """An environment with Windows semantics: one variable per name regardless of case; a
    later assignment under another spelling (`Path=` after `PATH=`) replaces the value and
    keeps the first spelling. A `dict` (so it goes wherever an environment dict goes); the
    keys it holds are the first spellings, so `dict(env)` or a child process sees them."""

    def __init__(self, data: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        super().__init__()
        self._spelling: dict[str, str] = {}
        self.update(data)

    def _key(self, key: str) -> str:
        return self._spelling.get(key.upper(), key)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(self._key(key))

    def __setitem__(self, key: str, value: str) -> None:
        spelling = self._spelling.setdefault(key.upper(), key)
        super().__setitem__(spelling, value)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(self._key(key))
        del self._spelling[key.upper()]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.upper() in self._spelling

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(self._key(key), default)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            value = self[key]
            del self[key]
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def setdefault(self, key: str, default: str = "") -> str:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *others: Any, **extra: str) -> None:
        for other in (*others, extra):
            items = other.items() if isinstance(other, Mapping) else other
            for key, value in items:
                self[key] = value

    def popitem(self) -> tuple[str, str]:
        key, value = super().popitem()
        del self._spelling[key.upper()]
        return key, value

    def clear(self) -> None:
        super().clear()
        self._spelling.clear()

    def copy(self) -> CaseInsensitiveEnv:
        return CaseInsensitiveEnv(self)


def search_dirs(path_value: str, pathsep: str) -> list[str]:
    """The folders of a PATH value that a lookup may search: empty, `.` and other relative
    entries are dropped (each would mean the current directory), quotes around an entry
    (legal on Windows) removed."""
    out = []
    for raw in path_value.split(pathsep):
        entry = raw.strip().strip('"')
        if entry and Path(entry).is_absolute():
            out.append(entry)
    return out


def find_program(program: str, path_value: str, *, pathsep: str,
                 extensions: Iterable[str] = ("",), need_exec: bool = False) -> str | None:
    """The first `<folder>/<program><ext>` that is a file, over `search_dirs`. A program given
    with a folder part is checked as it is and never searched for."""
    if os.sep in program or (os.altsep and os.altsep in program):
        return program if Path(program).is_file() else None
    for folder in search_dirs(path_value, pathsep):
        for ext in extensions:
            candidate = Path(folder) / (program + ext)
            try:
                found = candidate.is_file()
            except OSError as exc:
                # A folder the user may not search (mode 000, another user's home): is_file
                # raises EACCES instead of saying no, and doctor and build ended in exit 1
                # (issue 27). The shell skips such an entry too.
                _skipped(folder, exc)
                break
            if found and (not need_exec or os.access(candidate, os.X_OK)):
                return str(candidate)
    return None


#: PATH folders already reported as skipped (said once a run, with -v).
_SKIPPED: set[str] = set()


def _skipped(folder: str, exc: OSError) -> None:
    if folder in _SKIPPED:
        return
    _SKIPPED.add(folder)
    from flashbuild.console import ui  # noqa: PLC0415  # console loads Rich: only when needed

    if ui.verbose:
        ui.err.print(f"flashbuild: skipped the PATH entry {folder}: {exc.strerror or exc} "
                     "(it cannot be searched)", style="dim", markup=False, highlight=False)


def windows_extensions(program: str, pathext: str | None) -> list[str]:
    """What Windows appends to `program`: nothing when it already ends in a PATHEXT
    extension, else each PATHEXT extension in order."""
    exts = [e.strip().lower() for e in (pathext or DEFAULT_PATHEXT).split(";") if e.strip()]
    if any(program.lower().endswith(e) for e in exts):
        return [""]
    return exts
