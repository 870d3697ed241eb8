"""`explicit-instantiations`: guard or remove explicit template instantiations.

MSVC + nvcc choke on the explicit kernel instantiations that Linux trees put after each kernel,
so the Windows playbooks delete them. Deleting them is safe for `__global__` templates: with
CUDA 13's default `-static-global-template-stub=true` a kernel instantiated in one translation
unit cannot be launched from another anyway (FACTS.md). It is *not* safe for a host template
whose specialisation another translation unit calls: that one is kept and reported.

Sites are found on the parse (cxx.py), in every shape:

* `template [__global__] R f<T>(…);` on one line or several, anywhere (after each kernel,
  inside namespaces, inside `#if` branches);
* macro-generated: a function-like `#define` whose body holds an instantiation (directly or
  through another such macro), used at file scope with or without a trailing `;`. The **uses**
  are the sites, and guard/remove acts on them; the `#define` is left as it is, because an
  unused macro costs nothing and a guarded definition would leave its uses undefined;
* already guarded: inside `#if <guard>` / `#ifndef _MSC_VER` (or the `#else` of
  `#ifdef _MSC_VER`) → `already`, left alone; in remove mode a site replaced by the
  `// flashbuild: explicit instantiation removed: …` marker also counts as `already`.

Never matched: `x.template f<…>()`, `A::template B<…>` (calls and types), `template<>`
specialisations and template definitions (`template_declaration` nodes), `extern template`
declarations, class template instantiations.
"""

from __future__ import annotations

from collections.abc import Mapping  # noqa: TC003 (params are introspected at run time)
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from flashbuild.errors import PatchError
from flashbuild.patching import cxx
from flashbuild.patching.transforms import register
from flashbuild.patching.transforms._common import (
    Edit,
    apply_edits,
    check_expect,
    one_line,
    select_files,
)
from flashbuild.patching.transforms.base import (
    Site,
    SiteAction,
    TransformContext,
    TransformDef,
    TransformResult,
    TreeView,
)

if TYPE_CHECKING:
    from tree_sitter import Node

NAME = "explicit-instantiations"
REMOVED_MARKER = "flashbuild: explicit instantiation removed:"
MSVC_GUARDS = frozenset({"!defined(_MSC_VER)", "!_MSC_VER"})
"""Conditions (normalised) under which MSVC never sees the code, besides the recipe's guard."""


@dataclass(frozen=True, kw_only=True)
class ExplicitInstantiationsParams:
    """Parameters of `explicit-instantiations`."""

    files: tuple[str, ...]
    """Files to edit: paths or globs relative to the tree root (`kernels/*.cu`)."""
    mode: Literal["guard", "remove"] = "guard"
    """`guard`: wrap each run of adjacent sites in `#if <guard>` … `#endif` so one tree builds
    with every compiler; `remove`: replace each site with a marker comment."""
    guard: str = "!defined(_MSC_VER)"
    """The preprocessor condition that keeps a site (guard mode); also recognised as an
    existing guard."""
    expect: int | Mapping[str, int] | None = None
    """Expected number of sites (all actions counted): a total, or a table path → count
    (files not named must have none). Unset: at least one. A mismatch is an error."""
    keep_referenced: bool = True
    """Keep (leave unguarded) a host template instantiation whose function another source of
    the recipe references; removing it would break the link."""
    sources: tuple[str, ...] = field(default_factory=tuple)
    """Extra files (globs) searched for cross-file references and instantiation macros, in
    addition to the recipe's sources (TransformContext.sources)."""


@dataclass(frozen=True)
class _Found:
    path: str
    start: int
    end: int
    name: str
    target: str
    kernel: bool
    via_macro: str
    node: Node


@dataclass(frozen=True)
class _MacroInfo:
    kernel: bool
    name: str
    where: str


def apply(tree: TreeView, params: ExplicitInstantiationsParams,
          ctx: TransformContext) -> TransformResult:
    files = select_files(tree, params.files, transform=NAME)
    context = sorted(set(ctx.sources) | set(select_files(tree, params.sources, transform=NAME))
                     | set(files))
    parsed = {p: cxx.parse(tree.read(p), p) for p in context if tree.exists(p)}
    macros = _instantiation_macros(parsed)
    kernels: dict[str, bool] = {}
    for src in parsed.values():
        for name, kernel in cxx.template_definitions(src).items():
            kernels[name] = kernels.get(name, False) or kernel

    result = TransformResult()
    for path in files:
        _edit_file(parsed[path], params, parsed=parsed, macros=macros, kernels=kernels,
                   result=result)
    result.sites.sort(key=lambda s: (s.path, s.line))
    check_expect(NAME, params.expect, result.sites, files, what="instantiation sites")
    return result


def _edit_file(src: cxx.Source, params: ExplicitInstantiationsParams, *,
               parsed: Mapping[str, cxx.Source], macros: Mapping[str, _MacroInfo],
               kernels: Mapping[str, bool], result: TransformResult) -> None:
    path = src.path
    edits: list[Edit] = []
    run: list[_Found] = []
    for item in _find_sites(src, macros, kernels):
        action, note = _decide(item, src, params, parsed)
        result.sites.append(Site(
            path=path, line=src.line_of(item.start),
            kind="kernel-instantiation" if item.kernel else "host-instantiation",
            action=action,
            note=note or (f"via macro {item.via_macro}" if item.via_macro else ""),
            snippet=one_line(src.slice(item.start, item.end)),
        ))
        if action != "edit":
            continue
        _check_own_lines(src, item)
        if params.mode == "remove":
            edits.append(_removal(src, item))
        elif run and _adjacent(src, run[-1], item):
            run.append(item)
        else:
            if run:
                edits.extend(_guard(src, run, params.guard))
            run = [item]
    if run:
        edits.extend(_guard(src, run, params.guard))
    for marker in _removed_markers(src):
        result.sites.append(Site(path=path, line=src.line_of(marker.start_byte),
                                 kind="removed-instantiation", action="already",
                                 snippet=one_line(src.node_text(marker))))
    if edits:
        new = apply_edits(src.data, edits)
        if new != src.text:
            result.changes[path] = new


# --------------------------------------------------------------------------- finding


def _instantiation_macros(parsed: Mapping[str, cxx.Source]) -> dict[str, _MacroInfo]:
    """Function-like macros whose expansion holds an explicit instantiation, directly or
    through another such macro (resolved to a fixpoint)."""
    bodies: dict[str, tuple[cxx.Source, str]] = {}
    for path, src in parsed.items():
        for m in cxx.macro_definitions(src):
            if m.params is not None and m.body:
                text = m.body if m.body.rstrip().endswith(";") else m.body + ";"
                bodies.setdefault(m.name, (cxx.parse(text), f"{path}:{m.line}"))
    known: dict[str, _MacroInfo] = {}
    for name, (body, where) in bodies.items():
        insts = cxx.template_instantiations(body)
        if insts:
            known[name] = _MacroInfo(kernel=any(i.is_kernel for i in insts),
                                     name=insts[0].name, where=where)
    changed = True
    while changed:
        changed = False
        for name, (body, where) in bodies.items():
            if name in known:
                continue
            uses = cxx.macro_uses(body, known, top_level_only=False)
            if uses:
                inner = known[uses[0].name]
                known[name] = _MacroInfo(kernel=inner.kernel, name=inner.name, where=where)
                changed = True
    return known


def _find_sites(src: cxx.Source, macros: Mapping[str, _MacroInfo],
                kernels: Mapping[str, bool]) -> list[_Found]:
    nodes = {n.start_byte: n for n in cxx.walk(src.root) if n.type == "template_instantiation"}
    found = [
        _Found(src.path, i.start, i.end, i.name, i.target,
               i.is_kernel or kernels.get(i.name, False), "", nodes[i.start])
        for i in cxx.template_instantiations(src)
    ]
    for use in cxx.macro_uses(src, macros):
        info = macros[use.name]
        found.append(_Found(src.path, use.start, use.end, info.name,
                            f"{use.name}({use.args})", info.kernel or kernels.get(info.name,
                                                                                 False),
                            use.name, use.node))
    return sorted(found, key=lambda f: f.start)


def _decide(item: _Found, src: cxx.Source, params: ExplicitInstantiationsParams,
            parsed: Mapping[str, cxx.Source]) -> tuple[SiteAction, str]:
    guard = _guarded_by(src, item.node, params.guard)
    if guard:
        return "already", guard
    if not item.kernel and params.keep_referenced:
        ref = _referenced_elsewhere(item, parsed)
        if ref:
            return "keep", f"host template {item.name} is referenced from {ref}"
    return "edit", ""


def _guarded_by(src: cxx.Source, node: Node, guard: str) -> str:
    """The enclosing conditional that already hides the site from MSVC, as text, or ''."""
    hidden = MSVC_GUARDS | {cxx.normalize_condition(guard)}
    for cond in cxx.enclosing_conditionals(src, node):
        name = cxx.normalize_condition(cond.condition)
        if cond.directive in ("#ifdef", "#elifdef"):
            visible_when = f"defined({name})"
        elif cond.directive in ("#ifndef", "#elifndef"):
            visible_when = f"!defined({name})"
        else:
            visible_when = name
        if cond.branch == "else":
            visible_when = _negate(visible_when)
        if visible_when in hidden:
            where = "inside" if cond.branch == "then" else "in the #else of"
            return f"already {where} `{cond.directive} {cond.condition}` (line {cond.line})"
    return ""


def _negate(condition: str) -> str:
    """`!c` of a normalised condition, in the normalised spelling."""
    compound = any(op in condition for op in ("&&", "||", "==", "!=", "<", ">", "?"))
    if condition.startswith("!") and not compound:
        return condition[1:]
    return f"!({condition})" if compound else f"!{condition}"


def _referenced_elsewhere(item: _Found, parsed: Mapping[str, cxx.Source]) -> str:
    for path, other in parsed.items():
        if path == item.path:
            continue
        refs = cxx.identifier_references(other, item.name)
        if refs:
            return f"{path}:{other.line_of(refs[0])}"
    return ""


def _removed_markers(src: cxx.Source) -> list[Node]:
    return [n for n in cxx.walk(src.root)
            if n.type == "comment" and REMOVED_MARKER in src.node_text(n)]


# --------------------------------------------------------------------------- editing


def _check_own_lines(src: cxx.Source, item: _Found) -> None:
    before = src.slice(src.line_start(item.start), item.start)
    after = src.slice(item.end, src.line_end(item.end)).strip()
    if before.strip() or (after and not after.startswith(("//", "/*"))):
        raise PatchError(
            f"{NAME}: cannot edit the instantiation at {src.path}:{src.line_of(item.start)} "
            "safely: it shares its line with other code",
            evidence=one_line(src.slice(src.line_start(item.start), src.line_end(item.end))),
            fix="use a unified diff (`patches/*.patch`) for this site, or a `replace-block` "
            "step that first puts it on its own line",
        )


def _adjacent(src: cxx.Source, prev: _Found, item: _Found) -> bool:
    """Only whitespace and comments between the two sites."""
    gap_start, gap_end = src.line_end(prev.end), src.line_start(item.start)
    if gap_end < gap_start:
        return False
    comments = [(s, e) for s, e in cxx.comment_ranges(src) if s < gap_end and e > gap_start]
    for offset in range(gap_start, gap_end):
        if src.data[offset] in b" \t\r\n":
            continue
        if not any(s <= offset < e for s, e in comments):
            return False
    return True


def _guard(src: cxx.Source, run: list[_Found], guard: str) -> list[Edit]:
    nl = src.newline
    start = src.line_start(run[0].start)
    end = src.line_end(run[-1].end)
    closing = "#endif" + nl
    if end == len(src.data) and not src.data.endswith(b"\n"):
        closing = nl + "#endif" + nl
    return [Edit(start, start, f"#if {guard}{nl}"), Edit(end, end, closing)]


def _removal(src: cxx.Source, item: _Found) -> Edit:
    start = src.line_start(item.start)
    end = src.line_end(item.end)
    indent = src.slice(start, item.start)
    target = one_line(item.target, 80)
    ending = src.newline if src.data[:end].endswith(b"\n") else ""
    return Edit(start, end, f"{indent}// {REMOVED_MARKER} {target}{ending}")


register(TransformDef(
    name=NAME,
    params=ExplicitInstantiationsParams,
    apply=apply,
    summary="guard (`#if !defined(_MSC_VER)`) or remove explicit template instantiations",
))
