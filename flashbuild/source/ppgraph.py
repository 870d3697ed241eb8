"""Macros along the include graph: what the headers a file includes `#define`, and under which
preprocessor conditions, so a check in the file can resolve a macro defined elsewhere (a
project's `#if … __CUDA_ARCH__ >= 900 … #define HAS_WGMMA`) for the pass it evaluates.

Headers are read with a line scanner, not parsed: `#if/#ifdef/#ifndef/#elif/#else/#endif`
keep a stack of conditions, and every `#define` records its name, body and the conditions
around it. An include guard (`#ifndef X` + `#define X` first) is not a condition. Includes are
resolved next to the including file, then through the build's include folders, then by a path
suffix that names exactly one file of the tree.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

_INCLUDE = re.compile(r'[<"]([^>"]+)[>"]')
_DEFINE = re.compile(r"([A-Za-z_]\w*)(\()?")


@dataclass(frozen=True)
class Cond:
    """One condition a define sits under: `#if`/`#elif` text, or `defined(X)` for #ifdef,
    negated for an #else branch (or for an earlier branch of an #elif chain)."""

    condition: str
    negated: bool


@dataclass(frozen=True)
class HeaderDefine:
    name: str
    body: str
    function_like: bool
    conds: tuple[Cond, ...]
    path: str
    line: int


_DIRECTIVE_LINE = re.compile(
    r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif|define|include)\b"
    r"((?:[^\n\\]|\\[^\n]|\\\n)*)",
    re.MULTILINE)


def _directives(text: str) -> list[tuple[int, str, str]]:
    """(line, directive, rest with comments and continuations removed): only the directive
    lines are visited (one regex pass in C), not every line of the file."""
    out = []
    line = 1
    pos = 0
    for m in _DIRECTIVE_LINE.finditer(text):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        rest = re.sub(r"/\*.*?\*/|//[^\n]*", "", m[2].replace("\\\n", " "), flags=re.S)
        out.append((line, m[1], rest.strip()))
    return out


def scan_header(path: str, text: str) -> tuple[list[HeaderDefine], list[str]]:
    """The defines of one file with their conditions, and its includes as spelled."""
    found = _directives(text)
    conds_only = [(n, k, r) for n, k, r in found if k != "include"]
    guard = ""
    if len(conds_only) >= 2 and conds_only[0][1] == "ifndef" and \
            conds_only[1][1] == "define" and conds_only[1][2].split()[:1] == [conds_only[0][2]]:
        guard = conds_only[0][2]
    defines: list[HeaderDefine] = []
    includes: list[str] = []
    # Each level: the conditions of the branch now open (earlier branches negated).
    stack: list[list[Cond]] = []
    seen_first = False
    for line_no, kind, rest in found:
        if kind == "include":
            inc = _INCLUDE.search(rest)
            if inc:
                includes.append(inc[1].strip())
            continue
        if kind in ("if", "ifdef", "ifndef"):
            if guard and not seen_first:
                stack.append([])  # the include guard is no condition
            else:
                stack.append([Cond({"if": rest, "ifdef": f"defined({rest})",
                                    "ifndef": f"!defined({rest})"}[kind], negated=False)])
            seen_first = True
            continue
        seen_first = True
        if kind == "elif" and stack and stack[-1]:
            last = stack[-1][-1]
            stack[-1] = [*stack[-1][:-1], Cond(last.condition, not last.negated),
                         Cond(rest, negated=False)]
        elif kind == "else" and stack and stack[-1]:
            last = stack[-1][-1]
            stack[-1] = [*stack[-1][:-1], Cond(last.condition, not last.negated)]
        elif kind == "endif" and stack:
            stack.pop()
        elif kind == "define":
            dm = _DEFINE.match(rest)
            if dm is None or dm[1] == guard:
                continue
            body = rest[dm.end():] if not dm[2] else rest[rest.find(")") + 1:]
            conds = tuple(c for level in stack for c in level)
            defines.append(HeaderDefine(dm[1], body.strip(), bool(dm[2]), conds, path,
                                        line_no))
    return defines, includes


@dataclass
class MacroGraph:
    """Per tree file: its own defines and resolved includes; `inherited(path)` gives the
    defines of every header it includes, transitively."""

    defines: dict[str, list[HeaderDefine]]
    includes: dict[str, list[str]]

    def inherited(self, path: str, limit: int = 400) -> dict[str, list[HeaderDefine]]:
        out: dict[str, list[HeaderDefine]] = {}
        seen = {path}
        stack = list(self.includes.get(path, ()))
        while stack and len(seen) < limit:
            cur = stack.pop()
            if cur in seen:
                continue
            seen.add(cur)
            for d in self.defines.get(cur, ()):
                if not d.function_like:
                    out.setdefault(d.name, []).append(d)
            stack.extend(self.includes.get(cur, ()))
        return out


def build_graph(files: Sequence[str], read: Callable[[str], str | None],
                include_dirs: Sequence[str] = ()) -> MacroGraph:
    """Read and scan `files`, then resolve their includes (see `graph_from`)."""
    facts = []
    for path in files:
        text = read(path)
        facts.append((path, scan_header(path, text) if text is not None else ([], [])))
    return graph_from(facts, include_dirs)


def graph_from(facts: Sequence[tuple[str, tuple[list[HeaderDefine], list[str]]]],
               include_dirs: Sequence[str] = ()) -> MacroGraph:
    """The graph from each file's `scan_header` result: includes resolved next to the
    including file, then through `include_dirs`, then by a unique path suffix."""
    resolve = resolver([path for path, _f in facts], include_dirs)
    graph = MacroGraph({}, {})
    for path, (defs, spelled) in facts:
        graph.defines[path] = defs
        graph.includes[path] = [hit for inc in spelled if (hit := resolve(path, inc))]
    return graph


def resolver(files: Sequence[str], include_dirs: Sequence[str] = ()
             ) -> Callable[[str, str], str | None]:
    """`resolve(including_file, spelled)`: the tree file an include names, looked for next to
    the including file, then in `include_dirs`, then as the one file of the tree whose path
    ends with it; None when it is not a file of `files` (a library's or the system's)."""
    known = frozenset(files)
    by_suffix: dict[str, list[str]] = {}
    for f in known:
        parts = f.split("/")
        for i in range(len(parts)):
            by_suffix.setdefault("/".join(parts[i:]), []).append(f)

    def resolve(path: str, inc: str) -> str | None:
        folder = posixpath.dirname(path)
        cands = [posixpath.normpath(posixpath.join(folder, inc)),
                 *(posixpath.normpath(posixpath.join(d, inc)) for d in include_dirs)]
        hit = next((c for c in cands if c in known), None)
        if hit is None:
            unique = by_suffix.get(posixpath.normpath(inc), [])
            hit = unique[0] if len(unique) == 1 else None
        return hit

    return resolve


def as_wire(defs: Mapping[str, list[HeaderDefine]]) -> dict[str, list[tuple[str, tuple[
        tuple[str, bool], ...], str]]]:
    """A compact, picklable form for worker processes: name → [(body, conds, where)]."""
    return {name: [(d.body, tuple((c.condition, c.negated) for c in d.conds),
                    f"{d.path}:{d.line}") for d in items] for name, items in defs.items()}
