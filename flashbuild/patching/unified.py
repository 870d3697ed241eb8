"""Unified diffs: parsed with `unidiff`, applied by flashbuild's own hunk applier.

Why not an existing applier (FACTS.md, "Applying unified diffs"): `unidiff` only parses,
`whatthepatch` has no offset search and drops CRLF, `patch-ng`'s fuzz writes at the wrong line,
GNU patch fails an LF diff on a CRLF file and `git apply --ignore-whitespace` mixes line endings.

How a hunk is placed: at its own position first, then by offset search (nearest first), then —
only when the step allows `fuzz = N` — with up to N context lines dropped at each edge. Lines are
compared with line endings normalised; every line keeps its own ending and added lines take the
file's dominant one, so a CRLF file stays CRLF and a missing final newline stays missing. A hunk
whose reversed form matches is already applied and is left alone. Planning is pure: the result
is the new bytes of each file; nothing is written here.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchedFile, PatchSet

from flashbuild.errors import PatchError, TreeError
from flashbuild.patching.tree import check_rel, decode_text, encode_like

if TYPE_CHECKING:
    from flashbuild.patching.tree import Tree

HunkStatus = Literal["applied", "already"]
_EOL_SPLIT = re.compile(r"(\r\n|\n)")


@dataclass(frozen=True)
class HunkReport:
    """Where one hunk landed and how."""

    header: str
    status: HunkStatus
    line: int
    """1-based line in the patched file where the hunk starts."""
    offset: int
    """Lines between where the diff said and where the hunk matched."""
    fuzz: int
    """Context lines dropped at each edge to match (0 = exact)."""


@dataclass(frozen=True)
class FileReport:
    path: str
    action: Literal["modify", "create", "delete"]
    status: HunkStatus
    hunks: tuple[HunkReport, ...]


@dataclass(frozen=True)
class DiffResult:
    changes: dict[str, bytes | None]
    """New bytes of every file the diff changes (None = deleted); files already patched are
    absent."""
    files: tuple[FileReport, ...]

    @property
    def hunk_count(self) -> int:
        return sum(len(f.hunks) for f in self.files)


@dataclass(frozen=True)
class _Hunk:
    header: str
    src: list[str]
    dst: list[str]
    lead: int
    """Context lines at the start."""
    trail: int
    """Context lines at the end."""
    pos: int
    """0-based nominal position in the partly patched buffer (target coordinates)."""
    src_no_eol: bool
    dst_no_eol: bool


@dataclass
class _Text:
    lines: list[str]
    eols: list[str]

    @classmethod
    def parse(cls, text: str) -> _Text:
        parts = _EOL_SPLIT.split(text)
        lines = parts[0::2]
        eols = [*parts[1::2], ""]
        if lines and lines[-1] == "" and len(lines) > 1:
            lines.pop()
            eols.pop()
        elif lines == [""]:
            lines, eols = [], []
        return cls(lines, eols)

    @property
    def dominant(self) -> str:
        crlf = sum(1 for e in self.eols if e == "\r\n")
        lf = sum(1 for e in self.eols if e == "\n")
        return "\r\n" if crlf > lf else "\n"

    def render(self) -> str:
        return "".join(line + eol for line, eol in zip(self.lines, self.eols, strict=True))

    def matches(self, at: int, needle: list[str]) -> bool:
        return at >= 0 and at + len(needle) <= len(self.lines) and \
            self.lines[at:at + len(needle)] == needle


def parse_diff(text: str, name: str) -> PatchSet:
    """Parse a diff, refusing text that is not one."""
    try:
        patch = PatchSet(text.replace("\r\n", "\n"))
    except UnidiffParseError as exc:
        raise PatchError(f"{name} is not a valid unified diff", evidence=str(exc),
                         fix="regenerate it with `git diff` or `diff -u`") from exc
    if len(patch) == 0:
        raise PatchError(f"{name} is not a unified diff", evidence="it has no `---`/`+++` "
                         "file headers and no `@@` hunks",
                         fix="point the step at a file made by `git diff` or `diff -u`")
    return patch


def _paths(pf: PatchedFile, name: str) -> str:
    for raw in (pf.source_file, pf.target_file):
        if raw == "/dev/null":
            continue
        stripped = re.sub(r"^[ab]/", "", raw)
        try:
            check_rel(stripped)
        except TreeError as exc:
            raise TreeError(f"{name} names `{raw}`, which is outside the tree",
                            evidence=exc.what, fix=exc.fix) from exc
    if (not pf.is_added_file and not pf.is_removed_file
            and re.sub(r"^[ab]/", "", pf.source_file) != re.sub(r"^[ab]/", "",
                                                                 pf.target_file)):
        raise PatchError(f"{name} renames `{pf.source_file}` to `{pf.target_file}`",
                         evidence="renames are not supported",
                         fix="split the rename into a deletion and a new file")
    return check_rel(str(pf.path))


def _hunks(pf: PatchedFile, reverse: bool) -> list[_Hunk]:
    out = []
    for h in pf:
        src: list[str] = []
        dst: list[str] = []
        src_no_eol = dst_no_eol = False
        last = ""
        types: list[str] = []
        for line in h:
            value = line.value.rstrip("\n").removesuffix("\r")
            if line.line_type == "\\":
                if last in (" ", "-"):
                    src_no_eol = True
                if last in (" ", "+"):
                    dst_no_eol = True
                continue
            last = line.line_type
            types.append(last)
            if last in (" ", "-"):
                src.append(value)
            if last in (" ", "+"):
                dst.append(value)
        lead = next((i for i, t in enumerate(types) if t != " "), len(types))
        trail = next((i for i, t in enumerate(reversed(types)) if t != " "), len(types))
        header = str(h).splitlines()[0] if str(h) else "@@"
        if reverse:
            src, dst, src_no_eol, dst_no_eol = dst, src, dst_no_eol, src_no_eol
        start, length = ((h.source_start, h.source_length) if reverse
                         else (h.target_start, h.target_length))
        pos = start - 1 if length > 0 else start
        out.append(_Hunk(header, src, dst, lead, trail, max(pos, 0), src_no_eol, dst_no_eol))
    return out


def plan_diff(text: str, tree: Tree, *, fuzz: int = 0, name: str = "the diff",
              reverse: bool = False) -> DiffResult:
    """Plan a diff against the tree as planned so far. Raises PatchError / TreeError and
    changes nothing when any hunk does not apply."""
    patch = parse_diff(text, name)
    changes: dict[str, bytes | None] = {}
    reports: list[FileReport] = []
    for pf in patch:
        path = _paths(pf, name)
        if pf.is_binary_file:
            raise PatchError(f"{name} changes the binary file `{path}`",
                             evidence="binary diffs (`GIT binary patch`) cannot be applied "
                             "as text", fix="leave binary files out of the patch")
        added, removed = pf.is_added_file, pf.is_removed_file
        if reverse:
            added, removed = removed, added
        hunks = _hunks(pf, reverse)
        current = tree.read_bytes(path)
        if added:
            new: bytes | None
        if added:
            report, new = _create(path, current, hunks, name)
        elif removed:
            report, new = _delete(path, current, hunks, name)
        else:
            if current is None:
                raise PatchError(f"{name} changes `{path}`, which does not exist in the tree",
                                 fix="check `[source]` / `--source`, or regenerate the patch")
            report, text = _modify(path, decode_text(path, current), hunks, fuzz, name)
            new = encode_like(path, text, current)
        reports.append(report)
        if report.status == "applied":
            changes[path] = new
    return DiffResult(changes, tuple(reports))


def _joined(lines: list[str], no_eol: bool) -> str:
    return "".join(line + "\n" for line in lines)[: -1 if no_eol and lines else None]


def _create(path: str, current: bytes | None, hunks: list[_Hunk],
            name: str) -> tuple[FileReport, bytes]:
    lines = [line for h in hunks for line in h.dst]
    text = _joined(lines, bool(hunks) and hunks[-1].dst_no_eol)
    reports = tuple(HunkReport(h.header, "applied", 1, 0, 0) for h in hunks)
    if current is not None:
        if decode_text(path, current).replace("\r\n", "\n") == text:
            return FileReport(path, "create", "already",
                              tuple(HunkReport(h.header, "already", 1, 0, 0) for h in hunks)), \
                current
        raise PatchError(f"{name} creates `{path}`, which already exists with other content",
                         fix="remove the file or regenerate the patch")
    return FileReport(path, "create", "applied", reports), text.encode("utf-8")


def _delete(path: str, current: bytes | None, hunks: list[_Hunk],
            name: str) -> tuple[FileReport, None]:
    if current is None:
        return FileReport(path, "delete", "already",
                          tuple(HunkReport(h.header, "already", 1, 0, 0) for h in hunks)), None
    expected = [line for h in hunks for line in h.src]
    have = _Text.parse(decode_text(path, current)).lines
    if have != expected:
        raise _failure(path, hunks[0] if hunks else None, have, 0, name,
                       what=f"{name} deletes `{path}`, but its content differs from the patch")
    return FileReport(path, "delete", "applied",
                      tuple(HunkReport(h.header, "applied", 1, 0, 0) for h in hunks)), None


def _search(text: _Text, needle: list[str], pos: int, floor: int) -> int | None:
    """Nearest position ≥ floor where `needle` matches, searching outwards from `pos`."""
    n = len(text.lines)
    pos = min(max(pos, floor), n)
    if not needle:
        return pos
    first = needle[0]
    for distance in range(n + 1):
        for at in (pos - distance, pos + distance) if distance else (pos,):
            if floor <= at <= n - len(needle) and text.lines[at] == first \
                    and text.matches(at, needle):
                return at
        if pos - distance < floor and pos + distance > n - len(needle):
            break
    return None


def _modify(path: str, source: str, hunks: list[_Hunk], fuzz: int,
            name: str) -> tuple[FileReport, str]:
    text = _Text.parse(source)
    eol = text.dominant
    offset = 0
    floor = 0
    reports: list[HunkReport] = []
    for h in hunks:
        pos = h.pos + offset
        placed = _place(text, h, pos, floor, fuzz)
        if placed is None:
            raise _failure(path, h, text.lines, pos, name, fuzz=fuzz)
        status, at, dropped, src, dst = placed
        # Fuzz level N drops at most N leading context lines, fewer when the hunk has fewer.
        offset = at - min(dropped, h.lead) - h.pos
        if status == "already":
            reports.append(HunkReport(h.header, "already", at + 1, offset, dropped))
            floor = at + len(dst)
            continue
        old_eols = text.eols[at:at + len(src)]
        at_end = at + len(src) == len(text.lines)
        # Context lines keep their own ending (aligned through the whole hunk, not index by
        # index: after an insertion the trailing context sits at other indices); new lines
        # take the file's dominant one.
        new_eols = [eol] * len(dst)
        matcher = difflib.SequenceMatcher(None, src, dst, autojunk=False)
        for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
            if tag == "equal":
                new_eols[j1:j1 + i2 - i1] = old_eols[i1:i2]
        text.lines[at:at + len(src)] = dst
        text.eols[at:at + len(src)] = new_eols
        if at_end and text.lines:
            # The file's own final-newline state wins unless the diff changes it.
            if h.dst_no_eol:
                text.eols[-1] = ""
            elif h.src_no_eol:
                text.eols[-1] = eol
            elif old_eols:
                text.eols[-1] = old_eols[-1]
        # No line but the last may lack an ending.
        for i in range(len(text.eols) - 1):
            if text.eols[i] == "":
                text.eols[i] = eol
        floor = at + len(dst)
        reports.append(HunkReport(h.header, "applied", at + 1, offset, dropped))
    overall: HunkStatus = ("already" if all(r.status == "already" for r in reports)
                           else "applied")
    return FileReport(path, "modify", overall, tuple(reports)), text.render()


def _place(text: _Text, h: _Hunk, pos: int, floor: int,
           fuzz: int) -> tuple[HunkStatus, int, int, list[str], list[str]] | None:
    """(status, position, context dropped, source lines, target lines) or None."""
    fwd = text.matches(pos, h.src) and pos >= floor
    rev = text.matches(pos, h.dst) and pos >= floor
    # A pure addition's source is a prefix of its target; when both match, the longer one
    # (the target) is the stronger evidence that the hunk is already there.
    if rev and (not fwd or len(h.dst) > len(h.src)):
        return "already", pos, 0, h.src, h.dst
    if fwd:
        return "applied", pos, 0, h.src, h.dst
    at = _search(text, h.src, pos, floor)
    if at is not None:
        return "applied", at, 0, h.src, h.dst
    at = _search(text, h.dst, pos, floor)
    if at is not None and h.dst != h.src:
        return "already", at, 0, h.src, h.dst
    # A level above the hunk's own context drops nothing more: bound the loop by the context,
    # not by the recipe's `fuzz` (a huge value used to make a failing hunk spin for ever).
    for level in range(1, min(fuzz, max(h.lead, h.trail)) + 1):
        lead, trail = min(level, h.lead), min(level, h.trail)
        src = h.src[lead:len(h.src) - trail]
        dst = h.dst[lead:len(h.dst) - trail]
        if h.src and not src:
            break  # no line left to anchor on: the hunk would "apply" anywhere
        at = _search(text, src, pos + lead, floor)
        if at is not None:
            return "applied", at, level, src, dst
    return None


def _failure(path: str, h: _Hunk | None, lines: list[str], pos: int, name: str, *,
             fuzz: int = 0, what: str = "") -> PatchError:
    expected = h.src if h else []
    best, best_at = 0.0, 0
    size = max(len(expected), 1)
    for at in range(max(len(lines) - size + 1, 1)):
        window = lines[at:at + size]
        matcher = difflib.SequenceMatcher(None, expected, window, autojunk=False)
        if matcher.quick_ratio() > best and matcher.ratio() > best:
            best, best_at = matcher.ratio(), at
    found = lines[best_at:best_at + size]
    show_expected = "\n".join(f"    {line}" for line in expected) or "    (nothing)"
    show_found = "\n".join(f"  {best_at + i + 1:5d}: {line}" for i, line in enumerate(found))
    header = h.header if h else ""
    return PatchError(
        what or f"hunk `{header}` of {name} does not apply to `{path}`",
        evidence=f"expected (around line {pos + 1}):\n{show_expected}\nclosest lines found "
        f"({best:.0%} similar):\n{show_found or '    (the file is empty)'}",
        fix=("the upstream file changed: regenerate the patch against this tree" +
             ("" if fuzz else ", or allow `fuzz = 1` (or 2) in the step if only context "
              "lines moved")),
        details={"file": path, "hunk": header, "closest_line": best_at + 1})
