"""`macro-edit`, `insert-block`, `replace-block`, `replace-file`.

`macro-edit` works on the parse: it rewrites text only inside preprocessor conditions
(`#if`/`#elif`) and `#define` bodies, never in code or comments. It refuses (reports, leaves
as it is) a match whose edit would route a target arch's device pass into a branch that only
traps (_routing.py), and a replacement that would break a directive's line. The block
transforms anchor on whole lines (a literal line, compared without surrounding whitespace, or
a regex that must match the whole line), and refuse an anchor whose insertion, or a region
whose replacement, would split a backslash-continued `#define`. Recipe-relative files
(`block_file`, `from_file`) arrive from the engine as resolved absolute paths; they live
outside the tree, so they are read from disk here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from flashbuild.errors import PatchError, RecipeError
from flashbuild.patching.transforms import register
from flashbuild.patching.transforms._common import (
    Edit,
    apply_edits,
    check_expect,
    newline_of,
    one_line,
    select_files,
    split_refusal,
)
from flashbuild.patching.transforms._routing import ConditionEdit, Router
from flashbuild.patching.transforms.base import (
    Site,
    TransformContext,
    TransformDef,
    TransformResult,
    TreeView,
)
from flashbuild.platforms.files import read_regular
from flashbuild.source import cxx

if TYPE_CHECKING:
    from flashbuild.recipes.transforms import (
        InsertBlockParams,
        MacroEditParams,
        ReplaceBlockParams,
        ReplaceFileParams,
    )

# --------------------------------------------------------------------------- macro-edit

_MACRO_NODES = {
    "if": ("preproc_if", "condition"),
    "elif": ("preproc_elif", "condition"),
    "define": ("preproc_def", "value"),
    "define-function": ("preproc_function_def", "value"),
}


def macro_edit(tree: TreeView, params: MacroEditParams,
               ctx: TransformContext) -> TransformResult:
    files = select_files(tree, params.files, transform="macro-edit")
    find = re.compile(params.find if params.regex else re.escape(params.find))
    done_text = params.already or (params.replace if not params.regex else "")
    if params.regex and not params.already:
        raise RecipeError("macro-edit: a regex edit needs `already`",
                          fix="set `already` to a pattern that matches an edited condition, "
                          "so re-applying the recipe is a no-op")
    done = re.compile(done_text if params.regex else re.escape(done_text)) if done_text else None
    wanted = {_MACRO_NODES[d] for d in params.directives}
    result = TransformResult()
    router = Router(tree, ctx)
    for path in files:
        src = cxx.parse(tree.read(path), path)
        edits: list[Edit] = []
        for node in cxx.walk(src.root):
            field = next((f for t, f in wanted if t == node.type), None)
            part = node.child_by_field_name(field) if field else None
            if part is None:
                continue
            text = src.node_text(part)
            covered = [m.span() for m in done.finditer(text)] if done else []
            for s, _e in covered:
                result.sites.append(_macro_site(src, part.start_byte, text, s, "already"))
            for m in find.finditer(text):
                if any(s <= m.start() and m.end() <= e for s, e in covered):
                    continue
                replacement = m.expand(params.replace) if params.regex else params.replace
                new_text = text[:m.start()] + replacement + text[m.end():]
                refusal = _line_break_refusal(replacement, node.type) or router.refusal(
                    ConditionEdit(path=path, node=node, old=text, new=new_text))
                result.sites.append(_macro_site(src, part.start_byte, text, m.start(),
                                                "refused" if refusal else "edit",
                                                note=refusal))
                if refusal:
                    continue
                start = part.start_byte + len(text[:m.start()].encode())
                end = part.start_byte + len(text[:m.end()].encode())
                edits.append(Edit(start, end, replacement))
        if edits:
            result.changes[path] = apply_edits(src.data, edits)
    result.sites.sort(key=lambda s: (s.path, s.line))
    check_expect("macro-edit", params.expect, result.sites, files,
                 what="preprocessor matches")
    return result


def _macro_site(src: cxx.Source, base: int, text: str, at: int, action: Literal[
        "edit", "already", "refused"], *, note: str = "") -> Site:
    offset = base + len(text[:at].encode())
    line_text = src.slice(src.line_start(offset), src.line_end(offset))
    return Site(path=src.path, line=src.line_of(offset), kind="preprocessor-condition",
                action=action, note=note, snippet=one_line(line_text))


def _line_break_refusal(replacement: str, node_type: str) -> str:
    """A replacement that breaks a line inside a directive without a backslash ends the
    directive there: the rest of the `#define` body (or `#if` condition) becomes code."""
    for line in replacement.split("\n")[:-1]:
        if not line.rstrip(" \t\r").endswith("\\"):
            what = "#define" if node_type.startswith("preproc_") and "def" in node_type \
                else "#if"
            return (f"the replacement breaks a line inside the {what} without a backslash: "
                    "the directive would end there (no transform splits a macro definition)")
    return ""


# --------------------------------------------------------------------------- blocks


def _block_text(block: str, block_file: str, transform: str) -> str:
    if bool(block) == bool(block_file):
        raise RecipeError(f"{transform}: give exactly one of `block` and `block_file`")
    if block_file:
        try:
            block = read_regular(Path(block_file)).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RecipeError(f"{transform}: cannot read {block_file}",
                              evidence=exc.strerror or str(exc) if isinstance(exc, OSError)
                              else str(exc),
                              fix="name a regular UTF-8 file (relative to the recipe)"
                              ) from exc
    text = block.replace("\r\n", "\n")
    return text if text.endswith("\n") else text + "\n"


def _lines(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content without newline) per line, as str offsets."""
    out: list[tuple[int, int, str]] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        out.append((pos, pos + len(line), line.rstrip("\r\n")))
        pos += len(line)
    return out


def _matcher(anchor: str, regex: bool) -> re.Pattern[str]:
    return re.compile(anchor if regex else r"\s*" + re.escape(anchor.strip()) + r"\s*")


def _has_block(text: str, block: str) -> bool:
    return block.strip("\n") in text.replace("\r\n", "\n")


def insert_block(tree: TreeView, params: InsertBlockParams,
                 ctx: TransformContext) -> TransformResult:
    block = _block_text(params.block, params.block_file, "insert-block")
    text = tree.read(params.file)
    nl = newline_of(text)
    anchor = _matcher(params.anchor, params.anchor_regex)
    hits = [(s, e, c) for s, e, c in _lines(text) if anchor.fullmatch(c)]
    result = TransformResult()
    already = _has_block(text, block)
    data = text.encode("utf-8")
    safe: list[tuple[int, int, str]] = []
    for start, end, content in hits:
        line = text.count("\n", 0, start) + 1
        at = start if params.where == "before" else end
        refusal = "" if already else split_refusal(data, _byte(text, at))
        result.sites.append(Site(path=params.file, line=line, kind="anchor",
                                 action="already" if already else
                                 "refused" if refusal else "edit",
                                 note=refusal, snippet=one_line(content)))
        if not refusal:
            safe.append((start, end, content))
    check_expect("insert-block", params.expect, result.sites, [params.file],
                 what="anchor lines")
    if not already and safe:
        body = block.replace("\n", nl)
        new = text
        for start, end, _content in reversed(safe):
            if params.where == "before":
                new = new[:start] + body + new[start:]
            else:
                sep = "" if new[:end].endswith("\n") else nl
                new = new[:end] + sep + body + new[end:]
        result.changes[params.file] = new
    return result


def replace_block(tree: TreeView, params: ReplaceBlockParams,
                  ctx: TransformContext) -> TransformResult:
    block = _block_text(params.block, params.block_file, "replace-block")
    text = tree.read(params.file)
    nl = newline_of(text)
    start_re = _matcher(params.anchor, params.anchor_regex)
    end_re = _matcher(params.end_anchor, params.anchor_regex) if params.end_anchor else None
    lines = _lines(text)
    regions: list[tuple[int, int, int]] = []
    i = 0
    while i < len(lines):
        if start_re.fullmatch(lines[i][2]):
            j = i
            if end_re is not None:
                j = next((k for k in range(i, len(lines)) if end_re.fullmatch(lines[k][2])), -1)
                if j < 0:
                    raise PatchError(
                        f"replace-block: {params.file}:{i + 1} starts a region but no line "
                        f"after it matches the end anchor `{params.end_anchor}`",
                        fix="check `end_anchor` against the file; upstream may have changed")
            regions.append((lines[i][0], lines[j][1], i + 1))
            i = j + 1
        else:
            i += 1
    result = TransformResult()
    if not regions and _has_block(text, block):
        result.sites.append(Site(path=params.file, line=_block_line(text, block),
                                 kind="block", action="already"))
    data = text.encode("utf-8")
    safe: list[tuple[int, int, int]] = []
    for start, end, line in regions:
        refusal = split_refusal(data, _byte(text, start), _byte(text, end))
        result.sites.append(Site(path=params.file, line=line, kind="block",
                                 action="refused" if refusal else "edit", note=refusal,
                                 snippet=one_line(lines[line - 1][2])))
        if not refusal:
            safe.append((start, end, line))
    check_expect("replace-block", params.expect, result.sites, [params.file],
                 what="regions")
    if safe:
        body = block.replace("\n", nl)
        new = text
        for start, end, _line in reversed(safe):
            new = new[:start] + body + new[end:]
        result.changes[params.file] = new
    return result


def _byte(text: str, offset: int) -> int:
    """The UTF-8 byte offset of a str offset (the continued-line check reads bytes)."""
    return len(text[:offset].encode("utf-8"))


def _block_line(text: str, block: str) -> int:
    normalised = text.replace("\r\n", "\n")
    return normalised.count("\n", 0, normalised.index(block.strip("\n"))) + 1


# --------------------------------------------------------------------------- replace-file


def replace_file(tree: TreeView, params: ReplaceFileParams,
                 ctx: TransformContext) -> TransformResult:
    try:
        new = Path(params.from_file).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"replace-file: cannot read {params.from_file}", evidence=str(exc),
                          fix="check `from_file` (relative to the recipe, UTF-8 text)") from exc
    current = tree.read(params.path) if tree.exists(params.path) else None
    result = TransformResult()
    action: Literal["edit", "already"] = "already" if current == new else "edit"
    result.sites.append(Site(path=params.path, line=1, kind="file", action=action,
                             note="created" if current is None else ""))
    check_expect("replace-file", params.expect, result.sites, [params.path], what="files")
    if action == "edit":
        result.changes[params.path] = new
    return result


register(TransformDef.built_in("macro-edit", macro_edit))
register(TransformDef.built_in("insert-block", insert_block))
register(TransformDef.built_in("replace-block", replace_block))
register(TransformDef.built_in("replace-file", replace_file))
