"""The on-disk transaction of a patch run: lock, journal, originals, atomic writes.

Layout inside the patched tree:

    .flashbuild/lock                 pid, start time and host of the run holding the tree
    .flashbuild/journal.json         what was (or is being) changed, and the plan's metadata
    .flashbuild/originals/<key>      pristine bytes of every file the journal lists

Nothing in a tree can turn the journal against its user (a `.flashbuild/` may come with a clone
or an unpacked archive, written by someone else):

- a journal is trusted only in the tree it was written for: it records that tree's absolute
  path, and one found anywhere else (copied, cloned, unpacked, moved) is refused with a
  TreeError that keeps every file, so a shipped journal can neither restore nor delete;
- every entry is validated like a diff path (relative, inside the tree, no `..`, no symlinked
  folder on the way, never inside `.flashbuild/`), and `.flashbuild` itself, its `originals/`
  and its journal must be a real folder and real files, never symlinks;
- a saved original is restored only when its bytes match the hash the journal recorded;
- each entry keeps the hash of every state flashbuild left the file in (`written`), so a file
  the user changed since is found: revert, repair and a new plan stop with an error naming
  those files unless the user says `--discard-edits`;
- originals without a journal, or a journal in a state or version this flashbuild does not
  know, are an error that keeps the originals (never "nothing to revert").

Order of a run (so that a kill at any point is repairable): the journal (state `writing`, with
the hash of what every file holds before the run and will hold after it) and then the
originals are written and fsynced BEFORE any file of the tree changes; each file is then
replaced atomically (temp file in the same folder + `os.replace`); finally the journal is marked
`complete`. A journal still `writing` means a run died in the middle: `restore()` puts every
listed file back to its original bytes (a file still holding them needs no saved copy, which
is what a kill before the originals were all saved leaves). Clearing the state removes the
originals before the journal, so no run can leave originals without a journal.

Test hooks: `FLASHBUILD_TEST_KILL_AFTER_WRITES=N` makes the process `os._exit(137)` right after
its N-th tree file write, to test that repair (tests/integration/test_patch_kill.py);
`FLASHBUILD_TEST_KILL_AT_WRITE=N` kills it at the N-th write point of any kind (a temp file
written but not yet renamed, a rename done, a file deleted: journal, originals and tree alike;
tests/reliability/test_kills.py walks every point).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import psutil

from flashbuild import platforms
from flashbuild.errors import BusyError, PatchError, TreeError
from flashbuild.outputs import open_new
from flashbuild.patching.tree import STATE_DIR, check_inside, check_rel

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path

JOURNAL_VERSION = 2
KILL_HOOK = "FLASHBUILD_TEST_KILL_AFTER_WRITES"
KILL_AT_HOOK = "FLASHBUILD_TEST_KILL_AT_WRITE"
_write_points = [0]


def _write_point() -> None:
    """Test hook: count write points and die at the one KILL_AT_HOOK names."""
    hook = os.environ.get(KILL_AT_HOOK, "")
    if hook.isdigit():
        _write_points[0] += 1
        if _write_points[0] >= int(hook):
            os._exit(137)
#: The `written` mark of a file that flashbuild left absent (deleted, or not yet created).
ABSENT = "-"
TMP_SUFFIX = ".flashbuild-tmp"

JournalState = Literal["writing", "complete"]
_STATES = ("writing", "complete")
_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Entry:
    """One file the journal covers."""

    path: str
    original: bool
    """Whether the file existed before patching (its bytes are in originals/)."""
    original_sha256: str | None = None
    written: tuple[str, ...] = ()
    """sha256 of every state flashbuild may have left the file in (ABSENT: no file): the
    patched bytes of a complete run; before and after for a run still `writing`. A file in
    none of these states (nor the original) was changed by someone else since."""


@dataclass(frozen=True)
class Journal:
    state: JournalState
    entries: tuple[Entry, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    """The plan's metadata (recipe, context, steps, build_excludes), for `applied_state`."""
    created_dirs: tuple[str, ...] = ()
    """Folders the run created for new files (removed again on revert when empty)."""
    tree: str = ""
    """Absolute path of the tree the journal was written for (see the module docstring)."""
    version: int = JOURNAL_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True, default=str) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Journal:
        """Parse and validate; raises ValueError (or KeyError / TypeError) on any doubt."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("the journal is not a JSON object")
        entries = []
        for raw in data["entries"]:
            path = raw["path"]
            if not isinstance(path, str) or check_rel(path) != path:
                raise ValueError(f"entry path {path!r} is not a plain relative path")
            digest = raw.get("original_sha256")
            written = raw.get("written", [])
            if not isinstance(raw["original"], bool) or (raw["original"] and not (
                    isinstance(digest, str) and _HASH.fullmatch(digest))):
                raise ValueError(f"entry {path!r} has no valid original hash")
            if not isinstance(written, list) or not all(
                    isinstance(w, str) and (w == ABSENT or _HASH.fullmatch(w))
                    for w in written):
                raise ValueError(f"entry {path!r} has an invalid `written` list")
            entries.append(Entry(path, raw["original"], digest, tuple(written)))
        dirs = data.get("created_dirs", [])
        if not isinstance(dirs, list) or any(
                not isinstance(d, str) or check_rel(d) != d for d in dirs):
            raise ValueError(f"created_dirs {dirs!r} holds a path that is not plain relative")
        meta = data.get("meta", {})
        if not isinstance(meta, dict):
            raise TypeError("`meta` is not an object")
        return cls(state=data["state"], entries=tuple(entries), meta=meta,
                   created_dirs=tuple(dirs), tree=str(data.get("tree", "")),
                   version=data.get("version", 1))


def state_dir(root: Path) -> Path:
    """`.flashbuild/` of the tree, refused when it is not a real folder: a symlink would carry
    the journal and the originals outside the tree, and a file is not flashbuild's state."""
    folder = root / STATE_DIR
    for here, kind in ((folder, "folder"), (folder / "originals", "folder"),
                       (folder / "journal.json", "file"), (folder / "lock", "file")):
        if here.is_symlink():
            raise TreeError(
                f"`{here.relative_to(root)}` is a symlink",
                evidence=f"{here} -> {here.readlink()}; flashbuild keeps its journal and "
                "the original bytes of patched files there, and never writes outside the tree",
                fix=f"remove the link (rm {here}) and run the command again")
        if here.exists() and (here.is_dir() != (kind == "folder")):
            raise TreeError(
                f"`{here.relative_to(root)}` is a {'file' if kind == 'folder' else 'folder'}, "
                f"not flashbuild's state {kind}",
                evidence=f"{here} exists and flashbuild did not make it",
                fix=f"move {here} out of the tree (it is not flashbuild's), then run the "
                "command again")
        if here == folder and not here.exists():
            break
    return folder


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


def tmp_of(target: Path) -> Path:
    """The temp file `atomic_write` uses for `target` (a kill may leave it behind)."""
    return target.with_name(f".{target.name}{TMP_SUFFIX}")


def atomic_write(target: Path, data: bytes, *, mode_from: Path | None = None,
                 fsync: bool = True) -> None:
    """Write `data` to `target` through a temp file in the same folder and `os.replace`
    (atomic against a killed process; `fsync` also makes it durable against power loss)."""
    tmp = tmp_of(target)
    try:
        with open_new(tmp) as fh:  # never through a link planted at the temp name
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        source = mode_from if mode_from is not None else target
        if source.exists():
            shutil.copymode(source, tmp)
        _write_point()
        platforms.current().replace(tmp, target)
        _write_point()
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a disk-full write leaves no partial temp file behind
        raise


#: How long a lock file that is empty or half-written counts as "being written" by its owner
#: (the O_EXCL fallback creates the file before it writes the pid), and how old a stray temp
#: file of the lock must be before a lock holder deletes it.
LOCK_GRACE_S = 10.0

#: Start times (psutil `create_time`, seconds) within this distance are the same process: a
#: pid reused by a new process cannot start again within it.
_START_TOLERANCE_S = 0.05


@dataclass(frozen=True)
class LockOwner:
    """What a lock file says about its owner (None fields: a file flashbuild did not write
    whole, or one of the old pid-only format)."""

    pid: int | None
    started: float | None = None
    """psutil `create_time` of the owner, so that a reused pid is not taken for the owner."""
    host: str | None = None


@dataclass(frozen=True)
class _LockSeen:
    """One look at the lock file: its bytes, identity and age."""

    data: bytes
    ident: tuple[int, int, int]
    """(device, inode, mtime in ns): with the bytes, tells this file from a later one that
    reused its inode number."""
    age_s: float

    def owner(self) -> LockOwner | None:
        """The owner, or None when the file is empty or half-written."""
        text = self.data.decode("utf-8", "replace")
        if not text.endswith("\n"):
            return None  # the owner has not finished writing it (always ends with a newline)
        text = text.strip()
        if text.isdigit():
            return LockOwner(int(text))  # pid-only: a flashbuild before the start token
        try:
            doc = json.loads(text)
            return LockOwner(int(doc["pid"]), float(doc["started"]), str(doc["host"]))
        except (ValueError, KeyError, TypeError):
            return None


def _started(pid: int) -> float | None:
    """Start time of `pid` (None: no such process, or a zombie); raises psutil.AccessDenied.
    A killed run whose parent has not reaped it yet is a zombie: psutil still reads its start
    time, yet it holds nothing and will never release the lock."""
    try:
        proc = psutil.Process(pid)
        started = float(proc.create_time())
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return started
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None


class Lock:
    """`.flashbuild/lock`: names the run that holds the tree (pid, start time, host).

    Taking it is atomic: the content is written whole to a temp file that is then hard-linked to
    `lock` (a link fails when `lock` exists), so no other run can see a partly written lock.
    Where hard links are not supported (FAT, some network shares) it falls back to O_EXCL,
    then write + fsync; an empty or half-written lock younger than LOCK_GRACE_S counts as held.
    A stale lock (its pid is gone, or now belongs to a process that started at another time)
    is moved aside by the one run that wins a claim on it (see `_claim`), after which the runs
    race for a fresh lock again."""

    def __init__(self, root: Path) -> None:
        self.path = state_dir(root) / "lock"
        self.notes: list[str] = []
        started = _started(os.getpid())
        self.content = json.dumps({"pid": os.getpid(), "started": started,
                                   "host": socket.gethostname()}, sort_keys=True) + "\n"

    def acquire(self) -> None:
        problem = "other flashbuild runs kept taking it"
        for _ in range(8):  # each pass ends in a lock taken, a BusyError, or a lost race
            if self._create():
                self._sweep()
                return
            seen = self._look()
            if seen is None:
                continue  # released meanwhile
            stale = self._stale_reason(seen)
            claim = self._claim(seen)
            try:
                # Only the holder of this stale lock's claim may move it, and it is still
                # the same file (a run that claimed it before us has not moved it), so the
                # rename below cannot catch a live lock made in the meantime.
                now = self._look()
                if now is None or (now.ident, now.data) != (seen.ident, seen.data):
                    continue
                aside = self.path.with_name(f"lock.stale-{os.getpid()}-{uuid.uuid4().hex}")
                try:
                    self.path.rename(aside)
                except FileNotFoundError:
                    continue
                except OSError as exc:  # Windows: another run has it open to read it
                    problem = str(exc)
                    continue
            finally:
                with contextlib.suppress(OSError):
                    claim.unlink()
            moved = self._look(aside)
            if moved is not None and (moved.ident, moved.data) != (seen.ident, seen.data):
                # Cannot happen while claims hold (see _claim); never destroy a live lock.
                with contextlib.suppress(OSError):
                    self._link(aside)
            else:
                self.notes.append(f"took over a stale lock ({stale})")
            with contextlib.suppress(OSError):
                aside.unlink()
        raise BusyError("could not take the lock on this tree", evidence=f"{self.path}: "
                        f"{problem}", fix="run the command again")

    def _claim(self, seen: _LockSeen) -> Path:
        """Claim the right to remove the stale lock `seen`; raises BusyError when another run
        holds that claim. One claim name per stale lock (its identity and bytes), created with
        O_EXCL, so only one run can hold it; a claim older than LOCK_GRACE_S is one of a run
        killed while taking over (that takes milliseconds), so the next generation is tried
        instead -- no claim is ever deleted by a run that does not own it."""
        key = hashlib.sha256(repr(seen.ident).encode() + seen.data).hexdigest()[:16]
        for generation in range(16):
            claim = self.path.with_name(f"lock.claim-{key}-{generation}")
            try:
                os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                return claim
            except FileExistsError:
                try:
                    age = time.time() - claim.stat().st_mtime
                except FileNotFoundError:
                    age = LOCK_GRACE_S  # its owner is done: the lock has moved on
                if age < LOCK_GRACE_S:
                    break
        raise BusyError("another flashbuild run is taking over a stale lock on this tree",
                        evidence=f"{self.path} is stale and {claim.name} was just claimed",
                        fix="run the command again after that run is done")

    def _create(self) -> bool:
        """Try to create the lock with our content; False when a lock exists."""
        folder = self.path.parent
        tmp = folder / f"lock.{os.getpid()}-{uuid.uuid4().hex}.tmp"
        for _ in range(3):  # the folder may be removed by a holder releasing meanwhile
            folder.mkdir(exist_ok=True)
            try:
                with tmp.open("x", encoding="utf-8") as fh:
                    fh.write(self.content)
                    fh.flush()
                    os.fsync(fh.fileno())
                break
            except FileNotFoundError:
                continue
        try:
            return self._link(tmp)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def _link(self, source: Path) -> bool:
        """Make `source`'s content the lock, never replacing one; False when one exists."""
        try:
            os.link(source, self.path)
            return True
        except FileExistsError:
            return False
        except OSError:
            pass  # no hard links on this file system
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(source.read_bytes())
            fh.flush()
            os.fsync(fh.fileno())
        return True

    def _look(self, path: Path | None = None) -> _LockSeen | None:
        path = path or self.path
        try:
            with path.open("rb") as fh:
                info = os.fstat(fh.fileno())
                data = fh.read()
        except FileNotFoundError:
            return None
        return _LockSeen(data, (info.st_dev, info.st_ino, info.st_mtime_ns),
                         time.time() - info.st_mtime)

    def _stale_reason(self, seen: _LockSeen) -> str:
        """Why the lock seen is stale; raises BusyError when it is held."""
        owner = seen.owner()
        fix_delete = f"if no flashbuild run is working on this tree, delete {self.path}"
        if owner is None or owner.pid is None:
            if seen.age_s < LOCK_GRACE_S:  # a negative age (clock skew) counts as fresh too
                raise BusyError(
                    "another flashbuild run is taking the lock on this tree",
                    evidence=f"{self.path} is {'empty' if not seen.data else 'half-written'} "
                    f"and {max(seen.age_s, 0):.1f} s old (its owner is still writing it)",
                    fix=f"wait for that run to finish; {fix_delete}")
            return (f"{'empty' if not seen.data else 'half-written'} for "
                    f"{seen.age_s:.0f} s")
        pid = owner.pid
        if pid <= 0:
            return f"it names no valid pid ({pid})"
        if owner.host is not None and owner.host != socket.gethostname():
            raise BusyError(
                f"a flashbuild run on host {owner.host} (pid {pid}) is patching this tree",
                evidence=f"{self.path}: {seen.data.decode(errors='replace').strip()}",
                fix=f"wait for it to finish; {fix_delete}")
        try:
            started = _started(pid)
        except psutil.AccessDenied:  # another user's process: cannot tell, so it holds it
            started = owner.started if owner.started is not None else 0.0
        if pid == os.getpid() and owner.started is None:
            started = None  # a pid-only lock was never written by this very process
        if started is None:
            return f"pid {pid} is no longer running"
        if owner.started is not None and abs(started - owner.started) > _START_TOLERANCE_S:
            return (f"pid {pid} now belongs to another process, started at "
                    f"{started:.2f} instead of {owner.started:.2f}")
        raise BusyError(
            f"another flashbuild run (pid {pid}) is patching this tree",
            evidence=f"{self.path} holds pid {pid}, which is running",
            fix=f"wait for it to finish; if that process is not flashbuild, delete {self.path}")

    def _sweep(self) -> None:
        """Delete temp and set-aside files of runs killed while taking the lock."""
        now = time.time()
        for stray in self.path.parent.glob("lock.*"):
            with contextlib.suppress(OSError):
                if now - stray.stat().st_mtime > LOCK_GRACE_S:
                    stray.unlink()

    def release(self) -> None:
        seen = self._look()
        if seen is not None and seen.data == self.content.encode("utf-8"):
            self.path.unlink()  # only our own lock, never one another run took meanwhile
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
    """The tree's journal, validated (see the module docstring), or None when there is none.
    Raises TreeError, touching nothing, when it cannot be trusted."""
    folder = state_dir(root)
    path = folder / "journal.json"
    keep = ("flashbuild changed nothing; the originals in "
            f"{folder / 'originals'} are kept")
    if not path.exists():
        return None
    try:
        journal = Journal.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError, TreeError) as exc:
        raise TreeError("flashbuild's journal in this tree is unreadable",
                        evidence=f"{path}: {getattr(exc, 'what', exc)}; {keep}",
                        fix="restore the tree from version control, then delete "
                        f"{folder}") from exc
    if journal.version != JOURNAL_VERSION:
        raise TreeError(
            f"flashbuild's journal in this tree has version {journal.version}, and this "
            f"flashbuild reads version {JOURNAL_VERSION}",
            evidence=f"{path}; {keep}",
            fix="revert the tree with the flashbuild that patched it (`flashbuild patch "
            f"--revert`), or restore the tree from version control and delete {folder}")
    if journal.state not in _STATES:
        raise TreeError(
            f"flashbuild's journal in this tree is in the unknown state {journal.state!r}",
            evidence=f"{path}; {keep}",
            fix=f"restore the tree from version control, then delete {folder}")
    if journal.tree != str(root):
        raise TreeError(
            "this tree's `.flashbuild/` journal was not written for this tree",
            evidence=f"it records the tree {journal.tree or '(none)'}, this tree is {root}: "
            "it came with a copy, a clone or an archive (or the tree was moved), so flashbuild "
            "will not restore or delete anything it lists; " + keep,
            fix=f"if it came with the tree, delete {folder} (its originals are not yours); if "
            f"you moved a tree you patched, move it back to {journal.tree or 'its old place'}"
            " and run `flashbuild patch --revert` there")
    return journal


def disk_state(root: Path, path: str) -> str:
    """What `path` holds now, as a `written` mark: its sha256, or ABSENT. A symlink is never
    followed (it could lead anywhere): it gets a mark no journal holds."""
    target = check_inside(root, path)
    if target.is_symlink():
        return f"symlink:{target.readlink()}"
    if not target.exists():
        return ABSENT
    if not target.is_file():
        return "not-a-file"
    return sha256(target.read_bytes())


def edited_files(root: Path, journal: Journal) -> list[str]:
    """Files changed by someone else since flashbuild wrote them: neither the original nor
    a state flashbuild left them in."""
    out = []
    for e in journal.entries:
        state = disk_state(root, e.path)
        original = e.original_sha256 if e.original else ABSENT
        if state != original and state not in e.written:
            out.append(e.path)
    return out


def edits_error(root: Path, files: list[str], action: str) -> TreeError:
    """The error for files edited since patching: name them and the two choices."""
    shown = ", ".join(f"`{f}`" for f in files[:10]) + (
        f" and {len(files) - 10} more" if len(files) > 10 else "")
    return TreeError(
        f"{action} would discard changes made after flashbuild patched "
        f"{'this file' if len(files) == 1 else 'these files'}: {shown}",
        evidence=f"in {root}, each holds bytes that are neither its original nor what "
        "flashbuild wrote (flashbuild's journal keeps the hash of both); nothing was changed",
        fix="to keep the edits, copy those files elsewhere first (or make the change a step of "
        "the recipe); to discard them, add --discard-edits to the same `flashbuild patch` "
        "command (after `flashbuild build --in-place`: `flashbuild patch --revert "
        "--discard-edits`, then build again)",
        details={"files": files})


def read_original(root: Path, entry: Entry | str) -> bytes:
    """The saved original of `entry` (or of the journal's entry for that path), checked
    against the hash the journal recorded."""
    if isinstance(entry, str):
        journal = read_journal(root)
        found = [e for e in journal.entries if e.path == entry] if journal else []
        if not found or not found[0].original:
            raise TreeError(f"the journal of {root} saved no original of `{entry}`")
        entry = found[0]
    file = state_dir(root) / "originals" / original_key(entry.path)
    keep = (f"nothing was changed; fix: restore `{entry.path}` from version control, then "
            f"delete {state_dir(root)}")
    try:
        if file.is_symlink():
            raise OSError(f"{file} is a symlink")
        data = file.read_bytes()
    except OSError as exc:
        raise TreeError(f"the saved original of `{entry.path}` is missing", evidence=str(exc),
                        fix=keep) from exc
    if sha256(data) != entry.original_sha256:
        raise TreeError(
            f"the saved original of `{entry.path}` is damaged",
            evidence=f"{file} holds {len(data)} bytes whose sha256 is not the "
            f"{entry.original_sha256} the journal recorded", fix=keep)
    return data


def pristine(root: Path, entry: Entry) -> bytes | None:
    """Original bytes of `entry` (None: it did not exist): the file itself while it still
    holds them, else the checked saved copy."""
    if not entry.original:
        return None
    target = check_inside(root, entry.path)
    if not target.is_symlink() and target.is_file():
        data = target.read_bytes()
        if sha256(data) == entry.original_sha256:
            return data
    return read_original(root, entry)


def pristine_overlay(root: Path, journal: Journal) -> dict[str, bytes | None]:
    """Pristine bytes of every file the journal covers (None = did not exist)."""
    return {e.path: pristine(root, e) for e in journal.entries}


class Writer:
    """Writes tree files for one run, counting writes for the kill test hook."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0
        hook = os.environ.get(KILL_HOOK, "")
        self.kill_after = int(hook) if hook.isdigit() else None

    def put(self, path: str, data: bytes | None) -> None:
        target = check_inside(self.root, path)  # no symlinked folder on the way out
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            _write_point()
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


def read_journal_bytes(root: Path) -> bytes | None:
    """The journal file as it is (to put it back byte for byte), or None."""
    try:
        return (state_dir(root) / "journal.json").read_bytes()
    except FileNotFoundError:
        return None


def write_journal_bytes(root: Path, data: bytes) -> None:
    atomic_write(state_dir(root) / "journal.json", data)
    _fsync_dir(state_dir(root))


def put_back(root: Path, files: Mapping[str, bytes | None],
             writer: Writer | None = None) -> list[str]:
    """Make every file hold the given bytes (None: absent); return the files written."""
    writer = writer or Writer(root)
    written = []
    for path, want in files.items():
        target = check_inside(root, path)
        current = (target.read_bytes() if target.is_file() and not target.is_symlink()
                   else None)
        if current != want or target.is_symlink():
            if want is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
            writer.put(path, want)
            written.append(path)
    return written


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


def restore_plan(root: Path, journal: Journal) -> dict[str, bytes | None]:
    """The original bytes of every journalled file (checked), keyed by path."""
    return {e.path: pristine(root, e) for e in journal.entries}


def restore(root: Path, journal: Journal, writer: Writer, *,
            discard_edits: bool = False) -> list[str]:
    """Put every journalled file back to its original bytes; return the files written.
    Raises TreeError, changing nothing, when a file was edited since flashbuild wrote it
    (unless `discard_edits`) or a needed original is missing or damaged."""
    edited = edited_files(root, journal)
    if edited and not discard_edits:
        raise edits_error(root, edited, "reverting")
    wanted = restore_plan(root, journal)  # every original checked before the first write
    written = put_back(root, wanted, writer)
    remove_temp_files(root, journal)
    for folder in sorted(journal.created_dirs, key=lambda d: -d.count("/")):
        with contextlib.suppress(OSError, TreeError):
            check_inside(root, folder + "/x")
            (root / folder).rmdir()
    return written


def remove_temp_files(root: Path, journal: Journal) -> None:
    """Delete the temp files a run killed inside `atomic_write` left beside journalled files
    (flashbuild's own names, for files flashbuild was writing)."""
    for e in journal.entries:
        with contextlib.suppress(OSError, TreeError):
            tmp = tmp_of(check_inside(root, e.path))
            if tmp.is_file() or tmp.is_symlink():
                tmp.unlink()


def clear_state(root: Path) -> None:
    """Remove the originals and then the journal (never originals without a journal); the
    lock is released by its owner."""
    folder = state_dir(root)
    shutil.rmtree(folder / "originals", ignore_errors=True)
    _fsync_dir(folder)
    for name in ("journal.json", f".journal.json{TMP_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            (folder / name).unlink()
    _fsync_dir(folder)
