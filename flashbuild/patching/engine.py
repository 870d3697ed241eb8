"""The patch stage: plan every step of a recipe in memory, then write the tree transactionally.

`patch_tree(recipe, tree, ctx)` evaluates each step's `when`, plans the matching steps in order
(each sees the edits of the earlier ones through the `Tree` view), and only then writes, through
the journal (see journal.py). Planning always starts from the pristine tree: when the tree was
patched before, the saved originals are overlaid, so applying another plan (another platform or
arch) first reverts what the old plan changed, and re-applying the same plan compares bytes and
rewrites nothing (mtimes untouched, so ninja rebuilds nothing).

`revert_tree(tree)` restores every file byte for byte and removes `.flashbuild/`.
`applied_state(tree)` tells the build stage what is applied (patch ids, hashes, build
excludes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashbuild import __version__
from flashbuild.errors import FlashbuildError, PatchError, RecipeError, TreeError
from flashbuild.patching import journal as jr
from flashbuild.patching.transforms import registry as transform_registry
from flashbuild.patching.transforms.base import Site, TransformContext
from flashbuild.patching.tree import Tree, check_rel, decode_text, encode_like
from flashbuild.patching.unified import HunkReport, plan_diff
from flashbuild.recipes.when import ClauseResult, WhenContext, evaluate

if TYPE_CHECKING:
    from flashbuild.recipes.model import PatchStep, Recipe


@dataclass(frozen=True)
class StepReport:
    """What one step did (or why it did not run)."""

    id: str
    description: str
    kind: str
    matched: bool
    reason: str
    clauses: tuple[ClauseResult, ...]
    sha256: str = ""
    """Hash of the diff file's bytes or of the transform's params."""
    files: tuple[str, ...] = ()
    """Files the step changed (relative paths)."""
    sites: tuple[Site, ...] = ()
    hunks: tuple[HunkReport, ...] = ()
    build_excludes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FileDiff:
    path: str
    before: str | None
    after: str | None


@dataclass(frozen=True)
class PatchReport:
    recipe: str
    tree: Path
    context: dict[str, str | None]
    steps: tuple[StepReport, ...]
    files_changed: tuple[str, ...]
    """Files that differ from the pristine tree after this run."""
    files_written: tuple[str, ...]
    """Files this run wrote (or would write, with dry_run): empty on a re-apply."""
    build_excludes: tuple[str, ...]
    dry_run: bool
    repaired: bool = False
    """An interrupted earlier run was repaired first."""
    notes: tuple[str, ...] = ()
    diffs: tuple[FileDiff, ...] = ()
    """pristine → patched text of every changed file."""
    pending: tuple[FileDiff, ...] = ()
    """current → patched text of every file written (or that would be)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe, "tree": str(self.tree), "context": self.context,
            "dry_run": self.dry_run, "repaired": self.repaired, "notes": list(self.notes),
            "files_changed": list(self.files_changed),
            "files_written": list(self.files_written),
            "build_excludes": list(self.build_excludes),
            "steps": [{
                "id": s.id, "kind": s.kind, "matched": s.matched, "reason": s.reason,
                "clauses": [dataclasses.asdict(c) for c in s.clauses], "sha256": s.sha256,
                "files": list(s.files), "sites": [dataclasses.asdict(x) for x in s.sites],
                "hunks": [dataclasses.asdict(h) for h in s.hunks],
                "build_excludes": list(s.build_excludes), "notes": list(s.notes),
            } for s in self.steps],
        }


@dataclass(frozen=True)
class RevertReport:
    tree: Path
    files_restored: tuple[str, ...]
    had_state: bool
    """Whether the tree had flashbuild state to revert."""
    was_complete: bool = True
    notes: tuple[str, ...] = ()
    dry_run: bool = False
    """Nothing was written: `files_restored` lists what a real revert would restore."""
    pending: tuple[FileDiff, ...] = ()
    """current → original text of every file restored (or that would be)."""

    def to_json(self) -> dict[str, Any]:
        return {"tree": str(self.tree), "files_restored": list(self.files_restored),
                "had_state": self.had_state, "was_complete": self.was_complete,
                "dry_run": self.dry_run, "notes": list(self.notes)}


@dataclass(frozen=True)
class AppliedState:
    """What the last complete patch run applied to a tree (read by the build stage)."""

    recipe: str
    context: dict[str, str | None]
    patches: tuple[tuple[str, str], ...]
    """(step id, sha256) of every step that ran."""
    build_excludes: tuple[str, ...]
    files: tuple[str, ...]


@dataclass
class _Plan:
    tree: Tree
    steps: list[StepReport] = field(default_factory=list)
    excludes: list[str] = field(default_factory=list)


def _root(tree: Path) -> Path:
    root = tree.resolve()
    if not root.is_dir():
        raise TreeError(f"the source tree {root} does not exist or is not a folder",
                        fix="check `--source` or the recipe's `[source].path`")
    return root


def _params_hash(params: object) -> str:
    data = dataclasses.asdict(params) if dataclasses.is_dataclass(params) and \
        not isinstance(params, type) else params
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _in_step(step: PatchStep, exc: FlashbuildError) -> FlashbuildError:
    """The same error, saying which step raised it."""
    return type(exc)(f"step `{step.id}`: {exc.what}", evidence=exc.evidence, fix=exc.fix,
                     details={"step": step.id, **exc.details})


def _expect(step: PatchStep, what: str, want: int | None, found: int, where: str) -> None:
    if want is not None and want != found:
        raise PatchError(
            f"step `{step.id}`: upstream changed: expected {want} {what}, found {found}",
            evidence=where, fix=f"check the tree, then update `expect.{what}` or the step's "
            "parameters in the recipe", details={"step": step.id})


def plan(recipe: Recipe, tree: Tree, ctx: WhenContext) -> _Plan:
    """Plan every step against `tree` (whose pristine state is disk + base overlay)."""
    from flashbuild.patching.plan import separable_compilation  # noqa: PLC0415  # start-up
    result = _Plan(tree)
    from flashbuild.patching.transforms._common import is_text_source  # noqa: PLC0415  # start-up

    verdicts = [(step, evaluate(step.when, ctx)) for step in recipe.patch]
    transforms = any(v.matched and s.diff is None for s, v in verdicts)
    # Binary files and symlinks out of the tree that the globs match are left out here too:
    # they hold nothing to edit and must not stop a plan (see select_files). Only a transform
    # that runs reads them: reading every source of a 2000-file tree took 0.4 s of a no-op
    # rebuild whose recipe has no transform step (a zero-config draft often has none).
    sources = sorted({p for g in recipe.source.sources for p in tree.glob(g)
                      if is_text_source(tree, p)}) if transforms else []
    tctx = TransformContext(
        platform=ctx.platform, archs=tuple(a.sm for a in ctx.arch.archs),
        sources=tuple(sources),
        separable=separable_compilation(recipe, tree, lambda w: evaluate(w, ctx).matched)
        if transforms else "")
    for step, verdict in verdicts:
        if not verdict.matched:
            result.steps.append(StepReport(step.id, step.description, step.kind, False,
                                           verdict.reason, verdict.clauses))
            continue
        try:
            if step.diff is not None:
                report = _plan_diff(recipe, step, tree)
            else:
                report = _plan_transform(step, tree, tctx, transform_registry(),
                                         recipe.base_dir)
        except (PatchError, TreeError) as exc:
            if exc.what.startswith(f"step `{step.id}`"):
                raise
            raise _in_step(step, exc) from exc
        result.steps.append(dataclasses.replace(report, reason=verdict.reason,
                                                clauses=verdict.clauses))
        result.excludes.extend(x for x in report.build_excludes if x not in result.excludes)
    return result


def _plan_diff(recipe: Recipe, step: PatchStep, tree: Tree) -> StepReport:
    path = recipe.diff_path(step)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RecipeError(f"step `{step.id}`: cannot read the diff {path}", evidence=str(exc),
                          fix="the path is relative to the recipe file") from exc
    try:
        # Read like the sources it edits (tree.decode_text): a diff of a Latin-1 file holds
        # Latin-1 bytes.
        text = decode_text(str(step.diff), data)
    except PatchError as exc:
        raise PatchError(
            f"{step.diff} is not a text diff", evidence=f"{path}: {exc.evidence}",
            fix="regenerate it as a text diff (`git diff -- '*.cu' '*.h' ...` or `diff -u`); "
            "a binary file cannot be patched by a diff: leave it out") from exc
    done = plan_diff(text, tree, fuzz=step.fuzz, name=str(step.diff))
    _expect(step, "hunks", step.expect.hunks, done.hunk_count, str(step.diff))
    _expect(step, "files", step.expect.files, len(done.files), str(step.diff))
    for rel, new in done.changes.items():
        tree.plan(rel, new)
    notes = tuple(f"{f.path}: hunk {h.header} at line {h.line} "
                  f"(offset {h.offset:+d}{f', fuzz {h.fuzz}' if h.fuzz else ''})"
                  for f in done.files for h in f.hunks if h.offset or h.fuzz)
    already = tuple(f"{f.path}: already applied" for f in done.files
                    if f.status == "already")
    return StepReport(step.id, step.description, "diff", True, "", (),
                      sha256=jr.sha256(data), files=tuple(done.changes),
                      hunks=tuple(h for f in done.files for h in f.hunks),
                      notes=notes + already)


#: Params that name files beside the recipe (not in the tree); transforms get them resolved.
_RECIPE_RELATIVE = ("block_file", "from_file")


def _plan_transform(step: PatchStep, tree: Tree, tctx: TransformContext,
                    registry: dict[str, Any], base_dir: Path) -> StepReport:
    assert step.transform is not None
    definition = registry[step.transform]
    params = step.params
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        resolved = {name: str((base_dir / value).resolve())
                    for name in _RECIPE_RELATIVE
                    if isinstance(value := getattr(params, name, ""), str) and value}
        if resolved:
            params = dataclasses.replace(params, **resolved)
    tree.undecodable.clear()
    tree.not_utf8.clear()
    result = definition.apply(tree, params, tctx)
    for rel, text in result.changes.items():
        tree.plan(check_rel(rel), encode_like(rel, text, tree.read_bytes(rel)))
    unread = dict(tree.undecodable)
    if unread and (step.expect.sites is not None or step.expect.files is not None):
        # A file the step cannot read may hold sites it would count (a Latin-1 or UTF-16 .cu
        # was skipped in silence and `expect sites = N` passed): the count proves nothing.
        raise PatchError(
            f"step `{step.id}`: {len(unread)} file(s) of its globs could not be read, so its "
            "`expect` count cannot be trusted",
            evidence="; ".join(f"{p}: {why}" for p, why in sorted(unread.items())[:5]),
            fix="convert each to UTF-8 (or UTF-16 with a BOM), or narrow the step's `files` "
            "globs so they leave it out", details={"step": step.id, "unread": sorted(unread)})
    counted = [s for s in result.sites if s.action in ("edit", "already", "refused")]
    by_file: dict[str, int] = {}
    for s in counted:
        by_file[s.path] = by_file.get(s.path, 0) + 1
    where = ", ".join(f"{p}: {n}" for p, n in sorted(by_file.items())) or "no sites found"
    _expect(step, "sites", step.expect.sites, len(counted), where)
    _expect(step, "files", step.expect.files, len(by_file | dict.fromkeys(result.changes, 0)),
            where)
    return StepReport(step.id, step.description, "transform", True, "", (),
                      sha256=_params_hash(step.params), files=tuple(sorted(result.changes)),
                      sites=tuple(result.sites), build_excludes=tuple(result.build_excludes),
                      notes=tuple(result.notes) + _encoding_notes(unread, tree.not_utf8))


def _encoding_notes(unread: dict[str, str], not_utf8: dict[str, str]) -> tuple[str, ...]:
    """Say every file a step's globs matched but could not read (it was not searched), and
    every file read in another encoding than UTF-8 (kept in it when edited)."""
    return tuple([f"{p}: not read, not searched ({why})" for p, why in sorted(unread.items())]
                 + [f"{p}: read as {enc}; written back in {enc}, byte for byte where unedited"
                    for p, enc in sorted(not_utf8.items())])


def _text(path: str, data: bytes | None) -> str | None:
    return None if data is None else decode_text(path, data)


def _meta(recipe: Recipe, ctx: WhenContext, planned: _Plan) -> dict[str, Any]:
    return {
        "recipe": recipe.name, "recipe_version": recipe.recipe.version,
        "context": ctx.describe(), "flashbuild": __version__,
        "steps": [{"id": s.id, "kind": s.kind, "sha256": s.sha256}
                  for s in planned.steps if s.matched],
        "build_excludes": planned.excludes,
    }


def patch_tree(recipe: Recipe, tree: Path, ctx: WhenContext, *,
               dry_run: bool = False, discard_edits: bool = False) -> PatchReport:
    """Plan and apply `recipe` to `tree` for `ctx`. Nothing is written when a step fails, or
    with `dry_run`. A file changed by someone else since flashbuild patched it stops the run
    (TreeError naming it) unless `discard_edits`."""
    root = _root(tree)
    if dry_run:
        _journal_or_orphans(root)
        return _run(recipe, root, ctx, dry_run=True, notes=[], discard_edits=discard_edits)
    with jr.locked(root) as lock:
        notes = list(lock.notes)
        repaired = _repair(root, notes, discard_edits=discard_edits)
        report = _run(recipe, root, ctx, dry_run=False, notes=notes,
                      discard_edits=discard_edits)
        return dataclasses.replace(report, repaired=repaired)


def _journal_or_orphans(root: Path) -> jr.Journal | None:
    """The tree's journal; TreeError (keeping them) for originals that have none."""
    journal = jr.read_journal(root)
    originals = jr.state_dir(root) / "originals"
    if journal is None and originals.is_dir() and any(originals.iterdir()):
        raise TreeError(
            "this tree holds saved originals but no flashbuild journal",
            evidence=f"{originals} has {sum(1 for _ in originals.iterdir())} file(s) and "
            f"{jr.state_dir(root) / 'journal.json'} is missing, so flashbuild cannot tell "
            "which files they belong to; nothing was changed and they are kept",
            fix="restore the tree from version control (or from those originals by hand), "
            f"then delete {jr.state_dir(root)}")
    return journal


def _repair(root: Path, notes: list[str], *, discard_edits: bool) -> bool:
    """Restore the originals of an interrupted run. True when repaired."""
    journal = _journal_or_orphans(root)
    if journal is None:
        if jr.state_dir(root).is_dir():
            jr.clear_state(root)  # empty originals/ or a temp journal: nothing of value
        return False
    if journal.state == "complete":
        return False
    edited = jr.edited_files(root, journal)
    if edited and not discard_edits:
        raise jr.edits_error(root, edited, "repairing the interrupted run")
    restored = jr.restore(root, journal, jr.Writer(root), discard_edits=discard_edits)
    jr.clear_state(root)
    notes.append(f"repaired an interrupted run: restored {len(restored)} file(s) to their "
                 "originals")
    if edited:
        notes.append("discarded the edits (--discard-edits) of " + ", ".join(edited))
    return True


def _run(recipe: Recipe, root: Path, ctx: WhenContext, *, dry_run: bool,
         notes: list[str], discard_edits: bool = False) -> PatchReport:
    journal = jr.read_journal(root)
    if dry_run and journal is not None and journal.state != "complete":
        notes.append("this tree has an interrupted run; `flashbuild patch` repairs it")
    edited = jr.edited_files(root, journal) if journal is not None else []
    if edited and dry_run:
        notes.append("changed since flashbuild patched them (a real run stops on them "
                     "unless --discard-edits): " + ", ".join(edited))
    overlay = jr.pristine_overlay(root, journal) if journal else {}
    tree = Tree(root, base=overlay)
    planned = plan(recipe, tree, ctx)
    desired = tree.changed()
    old_paths = [e.path for e in journal.entries] if journal else []
    writes: dict[str, bytes | None] = {}
    current: dict[str, bytes | None] = {}
    """What is on disk now for every file to write (what a failed write puts back)."""
    for rel in sorted(set(old_paths) | set(desired)):
        want = desired[rel] if rel in desired else tree.pristine_bytes(rel)
        now = tree.disk_bytes(rel)
        if now != want:
            writes[rel] = want
            current[rel] = now
    meta = _meta(recipe, ctx, planned)
    report = PatchReport(
        recipe=recipe.name, tree=root, context=ctx.describe(), steps=tuple(planned.steps),
        files_changed=tuple(desired), files_written=tuple(writes),
        build_excludes=tuple(planned.excludes), dry_run=dry_run,
        notes=tuple([*ctx.notes, *notes]),
        diffs=tuple(FileDiff(p, _text(p, tree.pristine_bytes(p)), _text(p, d))
                    for p, d in desired.items()),
        pending=tuple(FileDiff(p, _text(p, current[p]), _text(p, d))
                      for p, d in writes.items()))
    if dry_run:
        return report
    stepped_on = [p for p in edited if p in writes]
    if stepped_on and not discard_edits:
        raise jr.edits_error(root, stepped_on, "this patch run")
    if stepped_on:
        report = dataclasses.replace(report, notes=(
            *report.notes, "discarded the edits (--discard-edits) of " + ", ".join(stepped_on)))
    _commit(root, tree, journal, desired=desired, writes=writes, current=current, meta=meta)
    return report


def _commit(root: Path, tree: Tree, journal: jr.Journal | None, *,  # noqa: PLR0912
            desired: dict[str, bytes | None], writes: dict[str, bytes | None],
            current: dict[str, bytes | None], meta: dict[str, Any]) -> None:
    old = {e.path: e for e in journal.entries} if journal else {}

    def mark(data: bytes | None) -> str:
        return jr.ABSENT if data is None else jr.sha256(data)

    def entry(rel: str, *states: bytes | None) -> jr.Entry:
        written = tuple(dict.fromkeys(mark(d) for d in states))
        if rel in old:
            return dataclasses.replace(old[rel], written=written)
        data = tree.pristine_bytes(rel)
        return jr.Entry(rel, data is not None, jr.sha256(data) if data is not None else None,
                        written)

    final = tuple(entry(rel, desired[rel]) for rel in sorted(desired))
    if not writes:
        if not final and not meta["build_excludes"]:
            if journal is not None:
                jr.clear_state(root)
            return
        if journal is not None and journal.state == "complete" and journal.meta == meta \
                and journal.entries == final:
            return  # the same plan again: touch nothing at all
        jr.write_journal(root, jr.Journal("complete", final, meta,
                                          journal.created_dirs if journal else (),
                                          tree=str(root)))
        return
    jr.check_writable(root, list(writes))
    # Every state a file may be in until the run is complete: before it and after it.
    union = tuple(entry(rel, current[rel] if rel in writes else tree.disk_bytes(rel),
                        writes.get(rel, desired.get(rel, tree.disk_bytes(rel))))
                  for rel in sorted(set(old) | set(desired)))
    created = list(journal.created_dirs) if journal else []
    for rel, data in writes.items():
        parent = Path(rel).parent
        while data is not None and str(parent) not in (".", "") and \
                not (root / parent).exists():
            if parent.as_posix() not in created:
                created.append(parent.as_posix())
            parent = parent.parent
    added = {e.path: tree.pristine_bytes(e.path) or b"" for e in union
             if e.original and e.path not in old}
    previous = jr.read_journal_bytes(root) if journal is not None else None
    rel = ".flashbuild"
    try:
        # The journal first: a kill while the originals are saved leaves a `writing` journal
        # whose files all still hold their original bytes (restore needs no saved copy),
        # never originals without a journal.
        jr.write_journal(root, jr.Journal("writing", union, meta, tuple(created),
                                          tree=str(root)))
        jr.save_originals(root, added)
        writer = jr.Writer(root)
        for rel, data in writes.items():
            if data is not None:
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
            writer.put(rel, data)
    except OSError as exc:
        # Disk full, or a permission check_writable could not see (ACLs, a read-only mount,
        # a folder changed since planning): put the tree back as it was before this run.
        raise _roll_back(root, rel, exc, current=current, previous=previous, added=added,
                         new_dirs=[d for d in created if journal is None
                                   or d not in journal.created_dirs]) from exc
    for folder in sorted(created, key=lambda d: -d.count("/")):
        if not (root / folder).exists():
            continue
        if not any((root / folder).iterdir()):
            (root / folder).rmdir()
    if not final and not meta["build_excludes"]:
        jr.clear_state(root)
        return
    jr.write_journal(root, jr.Journal("complete", final, meta, tuple(created), tree=str(root)))
    keep = {jr.original_key(e.path) for e in final if e.original}
    for file in (jr.state_dir(root) / "originals").glob("*"):
        if file.name not in keep:
            file.unlink()


def _roll_back(root: Path, rel: str, exc: OSError, *, current: dict[str, bytes | None],
               previous: bytes | None, added: dict[str, bytes],
               new_dirs: list[str]) -> PatchError:
    """Undo a run whose writing failed at `rel`: every file back to `current` (its bytes before
    this run), the journal and originals as they were. Returns the error to raise."""
    reason = exc.strerror or type(exc).__name__
    try:
        restored = jr.put_back(root, current)
        for folder in sorted(new_dirs, key=lambda d: -d.count("/")):
            with contextlib.suppress(OSError):
                (root / folder).rmdir()  # only when empty
        if previous is None:
            jr.clear_state(root)
        else:
            jr.write_journal_bytes(root, previous)
            for path in added:
                with contextlib.suppress(FileNotFoundError):
                    (jr.state_dir(root) / "originals" / jr.original_key(path)).unlink()
    except OSError as again:
        # The journal still says `writing` (or the old one stands, when the failure came
        # before it was written), so the next run can still repair.
        return PatchError(
            f"could not write `{rel}` ({reason}), nor put the tree back as it was",
            evidence=f"{exc}; then, putting the files back: {again}",
            fix="free disk space or fix the permissions, then run `flashbuild patch` (or "
            "`flashbuild patch --revert`) again: flashbuild's journal in "
            f"{jr.state_dir(root)} lets it restore every file", details={"file": rel})
    return PatchError(
        f"could not write `{rel}` ({reason}); the tree was put back as it was",
        evidence=f"{exc} (after changing {len(restored)} file(s), now restored)",
        fix=("free disk space" if exc.errno == errno.ENOSPC else
             "make that file and its folder writable (check the mount, ACLs and owner)")
        + ", then run the command again", details={"file": rel})


def revert_tree(tree: Path, *, dry_run: bool = False,
                discard_edits: bool = False) -> RevertReport:
    """Restore every file a patch run changed, byte for byte, and remove `.flashbuild/`.
    With `dry_run`, say what would be restored and write nothing (no lock either). A file
    changed by someone else since flashbuild patched it stops the revert (TreeError naming
    it) unless `discard_edits`."""
    root = _root(tree)
    if dry_run:
        return _revert(root, dry_run=True, discard_edits=discard_edits, notes=[])
    with jr.locked(root) as lock:
        return _revert(root, dry_run=False, discard_edits=discard_edits,
                       notes=list(lock.notes))


def _revert(root: Path, *, dry_run: bool, discard_edits: bool,
            notes: list[str]) -> RevertReport:
    journal = _journal_or_orphans(root)
    if journal is None:
        if not dry_run and jr.state_dir(root).is_dir():
            jr.clear_state(root)
        return RevertReport(root, (), had_state=False, notes=tuple(notes), dry_run=dry_run)
    edited = jr.edited_files(root, journal)
    if edited and not (discard_edits or dry_run):
        raise jr.edits_error(root, edited, "reverting")
    if edited:
        notes.append(("changed since flashbuild patched them (a real revert stops on them "
                      "unless --discard-edits): " if not discard_edits else
                      "discarded the edits (--discard-edits) of ") + ", ".join(edited))
    wanted = jr.restore_plan(root, journal)
    pending = tuple(FileDiff(p, _text_or_none(p, _disk_or_none(root, p)), _text_or_none(p, d))
                    for p, d in wanted.items() if _disk_or_none(root, p) != d)
    if dry_run:
        return RevertReport(root, tuple(d.path for d in pending), had_state=True,
                            was_complete=journal.state == "complete", notes=tuple(notes),
                            dry_run=True, pending=pending)
    restored = jr.restore(root, journal, jr.Writer(root), discard_edits=discard_edits)
    jr.clear_state(root)
    return RevertReport(root, tuple(restored), had_state=True,
                        was_complete=journal.state == "complete", notes=tuple(notes),
                        pending=pending)


def _disk_or_none(root: Path, path: str) -> bytes | None:
    target = root / path
    return target.read_bytes() if target.is_file() and not target.is_symlink() else None


def _text_or_none(path: str, data: bytes | None) -> str | None:
    """Text for a diff display; a file that is not text shows as a one-line placeholder."""
    if data is None:
        return None
    try:
        return decode_text(path, data)
    except PatchError:
        return f"(binary or non-UTF-8 content, {len(data)} bytes)\n"


def applied_state(tree: Path) -> AppliedState | None:
    """What the last complete `patch` applied to `tree`, or None (nothing / interrupted)."""
    try:
        journal = jr.read_journal(tree.resolve())
    except TreeError:
        return None  # a journal this tree cannot trust applies nothing (patch says why)
    if journal is None or journal.state != "complete":
        return None
    meta = journal.meta
    return AppliedState(
        recipe=str(meta.get("recipe", "")), context=dict(meta.get("context", {})),
        patches=tuple((str(s["id"]), str(s["sha256"])) for s in meta.get("steps", [])),
        build_excludes=tuple(meta.get("build_excludes", [])),
        files=tuple(e.path for e in journal.entries))
