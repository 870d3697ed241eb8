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
  `// flashbuild: explicit instantiation removed: …` marker also counts as `already`;
* refused (reported, left as it is): a site whose lines belong to a backslash-continued
  `#define` (tree-sitter reads a macro body as code when a space follows a backslash: the
  guard would land inside the macro), and, when the build links device code across units
  (`ctx.separable`), a kernel instantiation another file references.

Never matched: `x.template f<…>()`, `A::template B<…>` (calls and types), `template<>`
specialisations and template definitions (`template_declaration` nodes), `extern template`
declarations, class template instantiations.
"""

from __future__ import annotations

from collections.abc import Mapping  # noqa: TC003 (params are introspected at run time)
from typing import TYPE_CHECKING

from flashbuild.errors import PatchError
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
    TransformContext,
    TransformDef,
    TransformResult,
    TreeView,
)
from flashbuild.source import cxx
from flashbuild.source.instantiations import InstantiationAnalysis, file_facts

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tree_sitter import Node

    from flashbuild.recipes.transforms import ExplicitInstantiationsParams
    from flashbuild.source.instantiations import InstantiationSite

NAME = "explicit-instantiations"
REMOVED_MARKER = "flashbuild: explicit instantiation removed:"


def apply(tree: TreeView, params: ExplicitInstantiationsParams,
          ctx: TransformContext) -> TransformResult:
    files = select_files(tree, params.files, transform=NAME)
    context = sorted(set(ctx.sources) | set(select_files(tree, params.sources, transform=NAME))
                     | set(files))
    texts = {p: tree.read(p) for p in context if tree.exists(p)}
    # Parsed only where the analysis looks (file_facts: a file that can hold an instantiation
    # or a function-like macro; the analysis' loads): parsing every source of the context
    # first was most of `recipe init`'s time on FlashRT (1,634 files, 40 s of tree-sitter).
    facts = {p: file_facts(p, text) for p, text in sorted(texts.items())}
    analysis = InstantiationAnalysis(
        facts, lambda p: cxx.parse(texts[p], p) if p in texts else None)
    result = TransformResult()
    for path in files:
        _edit_file(cxx.parse(texts[path], path),
                   analysis.sites([path], params, separable=ctx.separable), params, result)
    result.sites.sort(key=lambda s: (s.path, s.line))
    check_expect(NAME, params.expect, result.sites, files, what="instantiation sites")
    return result


def _edit_file(src: cxx.Source, sites: Sequence[InstantiationSite],
               params: ExplicitInstantiationsParams, result: TransformResult) -> None:
    path = src.path
    edits: list[Edit] = []
    run: list[InstantiationSite] = []
    for item in sites:
        via = item.found.via_macro
        result.sites.append(Site(
            path=path, line=item.line,
            kind="kernel-instantiation" if item.kernel else "host-instantiation",
            action=item.action,
            note=item.note or (f"via macro {via}" if via else ""),
            snippet=one_line(item.found.text),
        ))
        if item.action != "edit":
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


def find_sites(sources: Mapping[str, cxx.Source], files: Sequence[str],
               params: ExplicitInstantiationsParams, *, separable: str = ""
               ) -> list[InstantiationSite]:
    """The sites of `files` as the transform decides them, with `sources` (which include
    `files`) as the tree searched for references and macros."""
    return InstantiationAnalysis.of_sources(sources).sites(files, params, separable=separable)


def _removed_markers(src: cxx.Source) -> list[Node]:
    return [n for n in cxx.walk(src.root)
            if n.type == "comment" and REMOVED_MARKER in src.node_text(n)]


# --------------------------------------------------------------------------- editing


def _check_own_lines(src: cxx.Source, item: InstantiationSite) -> None:
    before = src.slice(src.line_start(item.start), item.start)
    line_end = src.line_end(item.end)
    # What follows the site on its line must be only comments that also end on that line:
    # the guard's `#endif` (or the removal) goes at the line end, and inside a `/* …` that
    # runs on, the preprocessor would never see it.
    rest = bytearray(src.data[item.end:line_end])
    for s, e in cxx.comment_ranges(src):
        if item.end <= s < line_end and e <= line_end:
            rest[s - item.end:e - item.end] = b" " * (e - s)
    after = rest.decode("utf-8", "replace").strip()
    if before.strip() or after:
        raise PatchError(
            f"{NAME}: cannot edit the instantiation at {src.path}:{src.line_of(item.start)} "
            "safely: it shares its line with other code",
            evidence=one_line(src.slice(src.line_start(item.start), src.line_end(item.end))),
            fix="use a unified diff (`patches/*.patch`) for this site, or a `replace-block` "
            "step that first puts it on its own line",
            details={"path": src.path, "line": src.line_of(item.start)},
        )


def _adjacent(src: cxx.Source, prev: InstantiationSite, item: InstantiationSite) -> bool:
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


def _guard(src: cxx.Source, run: list[InstantiationSite], guard: str) -> list[Edit]:
    nl = src.newline
    start = src.line_start(run[0].start)
    end = src.line_end(run[-1].end)
    closing = "#endif" + nl
    if end == len(src.data) and not src.data.endswith(b"\n"):
        closing = nl + "#endif" + nl
    return [Edit(start, start, f"#if {guard}{nl}"), Edit(end, end, closing)]


def _removal(src: cxx.Source, item: InstantiationSite) -> Edit:
    start = src.line_start(item.start)
    end = src.line_end(item.end)
    indent = src.slice(start, item.start)
    target = one_line(item.found.target, 80)
    ending = src.newline if src.data[:end].endswith(b"\n") else ""
    return Edit(start, end, f"{indent}// {REMOVED_MARKER} {target}{ending}")


register(TransformDef.built_in(NAME, apply))
