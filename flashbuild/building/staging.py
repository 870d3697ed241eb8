"""A staged, patched mirror of the source tree inside each build folder.

`flashbuild build` never patches the user's tree (issue 5: the README's quick start used to
patch the bundled `csrc/` in place, and switching arch reverted and re-patched the same files,
so the other arch's build folder had to recompile them). Instead `<build folder>/src` mirrors
the tree with COPIES (mtimes kept) and the patch engine patches the mirror. It used hard links
until issue 27: a build step that writes to a source file (a configure's `file(WRITE)`, a
setup.py that rewrites a generated header) wrote through the link into the user's tree.

`stage()` keeps a mirror current on every build, cheaply:

- an unchanged tree with the same plan rewrites nothing: no link, no mtime changes, so ninja
  has no work;
- new source files are copied in, deleted ones removed from the mirror;
- a file the user edited (another size, or another mtime and other bytes) is copied again;
- a file the mirror's patch journal covers whose source changed since (its saved original
  differs from the current source) means the journal is stale: the mirror is reverted
  (`engine.revert_tree`), relinked and patched again. Files whose patched bytes come out
  identical get their previous mtime back, so only what really changed recompiles.

A mirror file's mtime only ever moves forward when its content changes (a relink whose source
carries an older mtime than what the build last saw becomes a fresh copy instead): ninja
decides what to rebuild from mtimes alone, and an older mtime on new content would leave a
stale object file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import filecmp
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from flashbuild import platforms
from flashbuild.errors import TreeError
from flashbuild.patching import journal as jr
from flashbuild.patching.engine import revert_tree
from flashbuild.patching.tree import STATE_DIR

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

T = TypeVar("T")

MIRROR_NAME = "src"
"""`<build folder>/src`: the mirror CMake configures from."""

#: Folders never mirrored, at any depth: version control, flashbuild's own state (the source
#: tree's, from `--in-place` patching, and the mirror's journal), Python and tool caches.
SKIP_NAMES = frozenset({STATE_DIR, ".git", ".hg", ".svn", "__pycache__", ".mypy_cache",
                        ".pytest_cache", ".ruff_cache", ".tox", ".nox", ".venv"})
#: Output folders at the top of a tree (setuptools' `build/` and `dist/`).
SKIP_TOP = frozenset({"build", "dist"})
_TMP_SUFFIX = ".flashbuild-tmp"

Kind = Literal["file", "symlink"]


@dataclass(frozen=True)
class SyncReport:
    """What one sync changed in the mirror (all paths relative, forward slashes)."""

    mirror: Path
    linked: tuple[str, ...] = ()
    """The tree's symbolic links, made again in the mirror."""
    copied: tuple[str, ...] = ()
    """Files copied (new in the tree, or changed there since the last build), and links the
    platform refused to create, copied as their content."""
    removed: tuple[str, ...] = ()
    """Files and folders gone from the tree, removed from the mirror."""
    reverted: tuple[str, ...] = ()
    """Patched files whose source changed: the mirror's journal was reverted for them."""
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.linked or self.copied or self.removed or self.reverted)

    def summary(self) -> str:
        parts = [f"{len(v)} {k}" for k, v in (("linked", self.linked), ("copied", self.copied),
                                              ("removed", self.removed),
                                              ("re-patched", self.reverted)) if v]
        return ", ".join(parts) or "unchanged"

    def to_json(self) -> dict[str, object]:
        return {"mirror": str(self.mirror), "linked": list(self.linked),
                "copied": list(self.copied), "removed": list(self.removed),
                "reverted": list(self.reverted), "notes": list(self.notes)}


@dataclass(frozen=True)
class Staged(Generic[T]):
    """A synced and patched mirror."""

    mirror: Path
    sync: SyncReport
    patched: T
    """What the `patch` callable returned for the mirror."""
    kept_mtimes: tuple[str, ...] = ()
    """Re-patched files whose bytes came out the same, given their previous mtime back."""


def mirror_dir(build_folder: Path) -> Path:
    return build_folder / MIRROR_NAME


def stage(source: Path, build_folder: Path, patch: Callable[[Path], T], *,
          skip: Iterable[Path] = ()) -> Staged[T]:
    """Bring `<build_folder>/src` up to date with `source`, then `patch(mirror)`.

    `skip` names more folders not to mirror (the build root when it lies inside the tree).
    Holds `<build_folder>/.flashbuild/lock` meanwhile, so two builds into one folder cannot
    interleave (the engine's own lock only covers the patch)."""
    root = source.resolve()
    if not root.is_dir():
        raise TreeError(f"the source tree {root} does not exist or is not a folder",
                        fix="check `--source` or the recipe's `[source].path`")
    _refuse_patched_source(root)
    folder = build_folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    mirror = mirror_dir(folder)
    with jr.locked(folder):
        mirror.mkdir(exist_ok=True)
        floor, before, reverted = _revert_if_stale(root, mirror)
        report = sync_mirror(root, mirror, skip=[folder, *skip], floor=floor)
        report = dataclasses.replace(report, reverted=tuple(reverted))
        patched = patch(mirror)
        kept = _keep_mtimes(mirror, before)
    return Staged(mirror=mirror, sync=report, patched=patched, kept_mtimes=kept)


def _refuse_patched_source(root: Path) -> None:
    journal = jr.read_journal(root)
    if journal is not None:
        raise TreeError(
            "the source tree is patched in place, so a staged build would patch it twice",
            evidence=f"{jr.state_dir(root) / 'journal.json'} lists "
            f"{len(journal.entries)} patched file(s) ({journal.state})",
            fix=f"restore it with `flashbuild patch --revert --source {root}` (staged builds "
            "then patch a mirror in the build folder), or keep patching the tree itself "
            "with `flashbuild build --in-place`",
            details={"tree": str(root)})


# --- the stale journal --------------------------------------------------------------------

@dataclass(frozen=True)
class _Before:
    """A patched mirror file before a revert: its bytes' hash and its times."""

    sha256: str
    atime_ns: int
    mtime_ns: int


def _revert_if_stale(root: Path, mirror: Path
                     ) -> tuple[dict[str, int], dict[str, _Before], list[str]]:
    """Revert the mirror's journal when a source file it covers changed (or a run died in
    the middle). Returns the previous mtimes (the floor for relinking), the previous patched
    files, and the sources that changed."""
    journal = jr.read_journal(mirror)
    if journal is None:
        return {}, {}, []
    changed = [e.path for e in journal.entries if _source_changed(root, e)]
    if journal.state == "complete" and not changed:
        return {}, {}, []
    floor: dict[str, int] = {}
    before: dict[str, _Before] = {}
    for entry in journal.entries:
        target = mirror / entry.path
        with contextlib.suppress(OSError):
            st = target.lstat()
            if stat.S_ISREG(st.st_mode):
                floor[entry.path] = st.st_mtime_ns
                before[entry.path] = _Before(jr.sha256(target.read_bytes()), st.st_atime_ns,
                                             st.st_mtime_ns)
    # The mirror is flashbuild's own copy: bytes in it that no run wrote are not a user's
    # work to keep (patching/journal.py stops on them in a user's tree).
    revert_tree(mirror, discard_edits=True)
    return floor, before, changed or [e.path for e in journal.entries]


def _source_changed(root: Path, entry: jr.Entry) -> bool:
    path = root / entry.path
    if not entry.original:
        return path.exists()  # the patch created it, and now the tree has one of its own
    try:
        data = path.read_bytes()
    except OSError:
        return True
    return jr.sha256(data) != entry.original_sha256


def _keep_mtimes(mirror: Path, before: dict[str, _Before]) -> tuple[str, ...]:
    """Give re-patched files whose bytes did not change their previous times back (ninja
    then does not recompile them). Only files the new journal covers: those are the mirror's
    own inodes, never a link whose times are the user's file's."""
    if not before:
        return ()
    journal = jr.read_journal(mirror)
    covered = {e.path for e in journal.entries} if journal else set()
    kept = []
    for rel, old in sorted(before.items()):
        target = mirror / rel
        if rel not in covered or not target.is_file():
            continue
        if jr.sha256(target.read_bytes()) == old.sha256:
            os.utime(target, ns=(old.atime_ns, old.mtime_ns))
            kept.append(rel)
    return tuple(kept)


# --- sync -----------------------------------------------------------------------------------

@dataclass
class TreeScan:
    """What a mirror holds of a tree, by relative path."""

    files: dict[str, os.stat_result] = field(default_factory=dict)
    """Files and symlinks (lstat)."""
    dirs: set[str] = field(default_factory=set)


#: The source-tree walks of the open `source_walks` blocks (innermost last): root and skip set
#: -> the scan.
_WALKS: list[dict[tuple[str, frozenset[str]], TreeScan]] = []


@contextlib.contextmanager
def source_walks() -> Iterator[None]:
    """Within this block, `scan(..., reuse=True)` walks each tree once: the zero-config draft
    key, the submodule check (twice) and the mirror sync each walked the user's tree, four
    walks of 1000-2000 files in a no-op rebuild. Only callers that read the user's tree before
    anything writes it pass `reuse=True` (a patched mirror, or a tree patched in place, is
    always walked afresh)."""
    _WALKS.append({})
    try:
        yield
    finally:
        _WALKS.pop()


def scan(root: Path, *, skip: Iterable[Path] = (), reuse: bool = False) -> TreeScan:
    """Every file, symlink and folder under `root` that a mirror holds, by relative path."""
    skipped = {Path(p).resolve() for p in skip}
    if reuse and _WALKS:
        # Skips outside the tree change nothing: the draft key and the sync then share a walk.
        top = Path(root).resolve()
        key = (str(top), frozenset(str(p) for p in skipped if top in p.parents))
        walks = _WALKS[-1]
        if key not in walks:
            walks[key] = _scan(root, skipped)
        return walks[key]
    return _scan(root, skipped)


def _scan(root: Path, skipped: set[Path]) -> TreeScan:
    found = TreeScan()
    skipped_text = {str(p) for p in skipped}
    stack: list[tuple[str, str]] = [(str(root), "")]
    while stack:
        folder, prefix = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            continue
        for entry in entries:
            rel = prefix + entry.name
            if entry.is_dir(follow_symlinks=False):
                if _skipped_dir(entry, prefix, skipped_text):
                    continue
                found.dirs.add(rel)
                stack.append((entry.path, rel + "/"))
            elif entry.name == ".git":
                # A `.git` file (a worktree's, a checked-out submodule's) points elsewhere by a
                # relative path that does not resolve in the mirror, where git would then fail
                # on every command; the mirror's own (vcs.py) names the build folder's git
                # identity. None of them is source.
                continue
            elif not entry.name.endswith(_TMP_SUFFIX):
                # os.lstat, not entry.stat(): on Windows a DirEntry's stat has st_ino = 0,
                # and the inode is what tells a link from a replaced file.
                found.files[rel] = os.lstat(entry.path)
    return found


def _skipped_dir(entry: os.DirEntry[str], prefix: str, skipped: set[str]) -> bool:
    name = entry.name
    if name in SKIP_NAMES or name.endswith(".egg-info") or (not prefix and name in SKIP_TOP):
        return True
    # Strings, not Paths: this runs for every folder of the tree on every no-op rebuild.
    # A CMake build folder inside the tree (CMakeCache.txt) is output, not source.
    return entry.path in skipped or Path(entry.path, "CMakeCache.txt").is_file()


def sync_mirror(source: Path, mirror: Path, *, skip: Iterable[Path] = (),
                floor: dict[str, int] | None = None) -> SyncReport:
    """Make `mirror` hold what `source` holds, leaving the files the mirror's journal covers
    (and its `.flashbuild/`) to the patch engine. `floor[rel]` is an mtime that a relinked
    file must exceed (else it is copied with a fresh mtime)."""
    root = source.resolve()
    mirror = mirror.resolve()
    src = scan(root, skip=skip, reuse=True)
    have = scan(mirror)
    journal = jr.read_journal(mirror)
    covered = {e.path for e in journal.entries} if journal else set()
    created = set(journal.created_dirs) if journal else set()
    placer = _Placer(root, mirror, floor or {})
    removed: list[str] = []

    # Gone from the tree (or turned from a file into a folder, or back): out of the mirror.
    for rel in sorted(have.files):
        if rel in covered and rel not in src.dirs:
            continue
        if rel not in src.files:
            (mirror / rel).unlink()
            removed.append(rel)
    for rel in sorted(have.dirs, key=lambda d: -d.count("/")):
        if rel in src.files:
            shutil.rmtree(mirror / rel)
            removed.append(rel + "/")
    for rel in sorted(src.dirs):
        (mirror / rel).mkdir(parents=True, exist_ok=True)
    for rel, st in sorted(src.files.items()):
        if rel in covered:
            continue
        old = have.files.get(rel)
        if old is not None and _current(root, root / rel, st, mirror / rel, old):
            continue
        placer.place(rel, st, old)
    for rel in sorted(have.dirs - src.dirs - created, key=lambda d: -d.count("/")):
        with contextlib.suppress(OSError):  # not empty: it holds files a patch created
            (mirror / rel).rmdir()
            removed.append(rel + "/")
    return SyncReport(mirror, linked=tuple(placer.linked), copied=tuple(placer.copied),
                      removed=tuple(removed), notes=tuple(placer.notes))


def _current(root: Path, src: Path, st: os.stat_result, dest: Path,
             old: os.stat_result) -> bool:
    """Whether the mirror's `dest` already holds what the source `src` holds."""
    if stat.S_ISLNK(st.st_mode):
        return stat.S_ISLNK(old.st_mode) and dest.readlink() == _link_target(root, src)
    if stat.S_ISLNK(old.st_mode):
        return False
    if st.st_ino and (old.st_ino, old.st_dev) == (st.st_ino, st.st_dev):
        return True  # the same inode: an in-place edit of the source is already here
    if old.st_size != st.st_size:
        return False
    # A copy (copy2 keeps the mtime), or the mirror's own inode with the same bytes (the engine
    # restored an original; a copy made to keep mtimes moving forward).
    return old.st_mtime_ns == st.st_mtime_ns or filecmp.cmp(src, dest, shallow=False)


def _link_target(root: Path, src: Path) -> Path:
    """What a symlink in the mirror points at: the same relative path when it stays inside
    the tree (it then resolves inside the mirror), else the absolute place it leads to."""
    text = src.readlink()
    if text.is_absolute():
        return text
    lexical = Path(os.path.normpath(src.parent / text))
    return text if lexical == root or root in lexical.parents else lexical


class _Placer:
    """Puts source files into the mirror: copies (never hard links: see the module doc)."""

    def __init__(self, root: Path, mirror: Path, floor: dict[str, int]) -> None:
        self.root = root
        self.mirror = mirror
        self.floor = floor
        self.linked: list[str] = []
        self.copied: list[str] = []
        self.notes: list[str] = []

    def place(self, rel: str, st: os.stat_result, old: os.stat_result | None) -> None:
        src = self.root / rel
        dest = self.mirror / rel
        tmp = dest.with_name(f".{dest.name}{_TMP_SUFFIX}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        kind: Kind = "symlink" if stat.S_ISLNK(st.st_mode) else "file"
        if kind == "symlink":
            self._symlink(src, tmp)
        else:
            previous = self.floor.get(rel, old.st_mtime_ns if old is not None else None)
            # A link shares the source's mtime: when that is not newer than what the build saw
            # last, ninja would miss the change, so a copy with a fresh mtime goes in instead.
            forward = previous is None or st.st_mtime_ns > previous
            # Always a copy, never a hard link: a build step (a configure, a setup.py) that
            # writes to a mirror file would write through a link into the user's tree
            # (issue 27). Copying the 36 MB / 1925-file xformers tree costs 0.5 s against
            # 0.08 s for links, once: later builds copy only what changed.
            self._copy(src, tmp, keep_mtime=forward)
            self.copied.append(rel)
        # Atomic, so a killed build never leaves a mirror without the file.
        platforms.current().replace(tmp, dest)

    @staticmethod
    def _copy(src: Path, tmp: Path, *, keep_mtime: bool) -> None:
        if keep_mtime:
            shutil.copy2(src, tmp)
        else:
            shutil.copyfile(src, tmp)
            shutil.copymode(src, tmp)
        # The engine refuses read-only files; the mirror's copy is flashbuild's to patch.
        mode = tmp.stat().st_mode
        if not mode & stat.S_IWUSR:
            tmp.chmod(stat.S_IMODE(mode) | stat.S_IWUSR)

    def _symlink(self, src: Path, tmp: Path) -> None:
        target = _link_target(self.root, src)
        try:
            tmp.symlink_to(target, target_is_directory=src.is_dir())
        except OSError:
            # Windows without the symlink privilege: the content instead (a file), or a
            # folder's files (copied; a folder symlink is rare in source trees).
            if src.is_dir():
                shutil.copytree(src, tmp, symlinks=False)
            else:
                shutil.copy2(src, tmp)
            self.copied.append(str(src.relative_to(self.root)).replace(os.sep, "/"))
            return
        self.linked.append(str(src.relative_to(self.root)).replace(os.sep, "/"))
