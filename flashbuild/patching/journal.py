"""The on-disk transaction of a patch run: lock, journal, originals, atomic writes.

Layout inside the patched tree:

    .flashbuild/lock                 pid of the run holding the tree (O_EXCL)
    .flashbuild/journal.json         what was (or is being) changed, and the plan's metadata
    .flashbuild/originals/<key>      pristine bytes of every file the journal lists

Order of a run (so that a kill at any point is repairable): the originals and then the journal
(state `writing`) are written and fsynced BEFORE any file of the tree changes; each file is then
replaced atomically (temp file in the same folder + `os.replace`); finally the journal is marked
`complete`. A journal still `writing` means a run died in the middle: `repair()` puts every
listed file back to its original bytes.

Test hook: `FLASHBUILD_TEST_KILL_AFTER_WRITES=N` makes the process `os._exit(137)` right after
its N-th tree file write, to test that repair (tests/integration/test_patch_kill.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import psutil

from flashbuild.errors import BusyError, PatchError, TreeError
from flashbuild.patching.tree import STATE_DIR

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

JOURNAL_VERSION = 1
KILL_HOOK = "FLASHBUILD_TEST_KILL_AFTER_WRITES"

JournalState = Literal["writing", "complete"]


@dataclass(frozen=True)
class Entry:
    """One file the journal covers."""

    path: str
    original: bool
    """Whether the file existed before patching (its bytes are in originals/)."""
    original_sha256: str | None = None


@dataclass(frozen=True)
class Journal:
    state: JournalState
    entries: tuple[Entry, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    """The plan's metadata (recipe, context, steps, build_excludes), for `applied_state`."""
    created_dirs: tuple[str, ...] = ()
    """Folders the run created for new files (removed again on revert when empty)."""
    version: int = JOURNAL_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True, default=str) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Journal:
        data = json.loads(text)
        return cls(state=data["state"], entries=tuple(Entry(**e) for e in data["entries"]),
                   meta=data.get("meta", {}), created_dirs=tuple(data.get("created_dirs", ())),
                   version=data.get("version", JOURNAL_VERSION))


def state_dir(root: Path) -> Path:
    return root / STATE_DIR


def original_key(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8")).hexdigest()[:24]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(folder: Path) -> None:
    # Directory fsync makes renames durable on POSIX; Windows cannot open folders this way.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(target: Path, data: bytes, *, mode_from: Path | None = None,
                 fsync: bool = True) -> None:
    """Write `data` to `target` through a temp file in the same folder and `os.replace`
    (atomic against a killed process; `fsync` also makes it durable against power loss)."""
    tmp = target.with_name(f".{target.name}.flashbuild-tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    source = mode_from if mode_from is not None else target
    if source.exists():
        shutil.copymode(source, tmp)
    tmp.replace(target)


class Lock:
    """`.flashbuild/lock`, created with O_EXCL and holding the owner's pid."""

    def __init__(self, root: Path) -> None:
        self.path = state_dir(root) / "lock"
        self.notes: list[str] = []

    def acquire(self) -> None:
        self.path.parent.mkdir(exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                pid = self._owner()
                if pid is not None and pid != os.getpid() and psutil.pid_exists(pid):
                    raise BusyError(
                        f"another flashbuild run (pid {pid}) is patching this tree",
                        evidence=f"{self.path} holds pid {pid}, which is running",
                        fix="wait for it to finish; if that process is not flashbuild, "
                        f"delete {self.path}") from None
                self.notes.append(f"took over a stale lock of pid {pid} (no longer running)")
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{os.getpid()}\n")
            return
        raise BusyError("could not take the lock on this tree",  # pragma: no cover - a race
                        evidence=str(self.path), fix="run the command again")

    def _owner(self) -> int | None:
        try:
            return int(self.path.read_text().strip() or "0") or None
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()  # only when nothing else is left


@contextlib.contextmanager
def locked(root: Path) -> Iterator[Lock]:
    lock = Lock(root)
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()


def read_journal(root: Path) -> Journal | None:
    path = state_dir(root) / "journal.json"
    if not path.exists():
        return None
    try:
        return Journal.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TreeError("flashbuild's journal in this tree is unreadable",
                        evidence=f"{path}: {exc}",
                        fix=f"restore the tree from version control and delete {path.parent}"
                        ) from exc


def read_original(root: Path, path: str) -> bytes:
    file = state_dir(root) / "originals" / original_key(path)
    try:
        return file.read_bytes()
    except OSError as exc:
        raise TreeError(f"the saved original of `{path}` is missing", evidence=str(exc),
                        fix="restore the tree from version control and delete "
                        f"{state_dir(root)}") from exc


def pristine_overlay(root: Path, journal: Journal) -> dict[str, bytes | None]:
    """Pristine bytes of every file the journal covers (None = did not exist)."""
    return {e.path: read_original(root, e.path) if e.original else None
            for e in journal.entries}


class Writer:
    """Writes tree files for one run, counting writes for the kill test hook."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0
        hook = os.environ.get(KILL_HOOK, "")
        self.kill_after = int(hook) if hook.isdigit() else None

    def put(self, path: str, data: bytes | None) -> None:
        target = self.root / path
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
        else:
            # Tree files need atomicity, not durability: the fsynced journal and originals
            # are what a repair after a crash relies on.
            atomic_write(target, data, fsync=False)
        self.count += 1
        if self.kill_after is not None and self.count >= self.kill_after:
            os._exit(137)  # test hook: simulate a kill between writes


def write_journal(root: Path, journal: Journal) -> None:
    folder = state_dir(root)
    folder.mkdir(exist_ok=True)
    atomic_write(folder / "journal.json", journal.to_json().encode("utf-8"))
    _fsync_dir(folder)


def save_originals(root: Path, originals: dict[str, bytes]) -> None:
    folder = state_dir(root) / "originals"
    folder.mkdir(parents=True, exist_ok=True)
    bulk = hasattr(os, "sync") and len(originals) > 16
    for path, data in originals.items():
        # Always (re)write: a file already there is a stray of a killed run that no journal
        # lists (the caller passes only files the current journal does not cover), so its
        # bytes may predate later edits to the tree.
        atomic_write(folder / original_key(path), data, fsync=not bulk)
    if bulk:
        os.sync()  # one flush for thousands of originals instead of one fsync each
    _fsync_dir(folder)


def check_writable(root: Path, paths: list[str]) -> None:
    """Refuse read-only files (and folders) before anything is written."""
    for path in paths:
        target = root / path
        probe = target if target.exists() else target.parent
        while not probe.exists():
            probe = probe.parent
        mode = probe.stat().st_mode
        # Mode bits, not os.access: root passes every access check, yet a read-only file is a
        # clear sign the user does not want it changed.
        if not mode & stat.S_IWUSR:
            raise PatchError(
                f"`{path}` is read-only" if probe == target else
                f"the folder of `{path}` is read-only",
                evidence=f"{probe} has mode {stat.filemode(mode)}",
                fix=f"make it writable (chmod u+w {probe}) or patch a writable copy with "
                "`--source`", details={"file": path})


def restore(root: Path, journal: Journal, writer: Writer) -> list[str]:
    """Put every journalled file back to its original bytes; return the files written."""
    written = []
    for entry in journal.entries:
        target = root / entry.path
        current = target.read_bytes() if target.is_file() else None
        want = read_original(root, entry.path) if entry.original else None
        if current != want:
            if want is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
            writer.put(entry.path, want)
            written.append(entry.path)
    for folder in sorted(journal.created_dirs, key=lambda d: -d.count("/")):
        with contextlib.suppress(OSError):
            (root / folder).rmdir()
    return written


def clear_state(root: Path) -> None:
    """Remove the journal and the originals (the lock is released by its owner)."""
    folder = state_dir(root)
    with contextlib.suppress(FileNotFoundError):
        (folder / "journal.json").unlink()
    _fsync_dir(folder)
    shutil.rmtree(folder / "originals", ignore_errors=True)
