"""`exclude-sources`: leave sources out of the build (e.g. `sm90/**` on Windows or sm_120).

The excluded paths always come back in `TransformResult.build_excludes`, which the build stage
passes to CMake (csrc's CMakeLists reads a `FLASHKERN_SOURCES_EXCLUDE` cache variable), so
trees that glob their sources are covered. Optionally the transform also edits explicit
source lists: in a CMakeLists.txt a listed source on its own line is commented out
(`# flashbuild: excluded: …`); in a setup.py an element of a `sources=[…]` list (found with
Python's own `ast`) is commented out the same way.

When the build links device code across units (`ctx.separable`: `-rdc=true`,
CUDA_SEPARABLE_COMPILATION), a source that defines a kernel or `__device__` function another
source references is not left out: the site is refused and says which source needs it.
"""

from __future__ import annotations

import ast
import fnmatch
import posixpath
import re
from typing import TYPE_CHECKING

from flashbuild.errors import PatchError, TreeError
from flashbuild.patching.transforms import register
from flashbuild.patching.transforms._common import check_expect, newline_of, select_files
from flashbuild.patching.transforms.base import (
    Site,
    TransformContext,
    TransformDef,
    TransformResult,
    TreeView,
)
from flashbuild.source import cxx

if TYPE_CHECKING:
    from flashbuild.recipes.transforms import ExcludeSourcesParams

NAME = "exclude-sources"
MARK = "# flashbuild: excluded: "
_SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c", ".cuh", ".h", ".hpp")
_CMAKE_PREFIXES = ("${CMAKE_CURRENT_SOURCE_DIR}/", "${CMAKE_CURRENT_LIST_DIR}/",
                   "${PROJECT_SOURCE_DIR}/", "${CMAKE_SOURCE_DIR}/")
_CMAKE_TOKEN = re.compile(r'"[^"]*"|[^\s()"#]+')


def _excluded(path: str, globs: tuple[str, ...]) -> bool:
    # fnmatch's `*` crosses `/`, so `sm90/**` covers the whole folder, like the tree's glob.
    return any(fnmatch.fnmatchcase(path, g) for g in globs)


def apply(tree: TreeView, params: ExcludeSourcesParams,
          ctx: TransformContext) -> TransformResult:
    result = TransformResult()
    excluded: set[str] = set()
    for pattern in params.globs:
        excluded.update(tree.glob(pattern))
    refused = _linked_elsewhere(tree, excluded, ctx) if ctx.separable else {}
    result.build_excludes = sorted(excluded - set(refused))
    result.sites = sorted(
        [Site(path=p, line=1, kind="excluded-source", action="edit",
              note="left out of the build") for p in result.build_excludes]
        + [Site(path=p, line=line, kind="excluded-source", action="refused", note=why)
           for p, (line, why) in refused.items()], key=lambda s: s.path)
    check_expect(NAME, params.expect, result.sites, sorted(excluded) or list(params.globs),
                 what="excluded sources")
    keep = frozenset(refused)
    for path in select_files(tree, params.cmake_lists, transform=NAME):
        _edit_cmake(tree, path, params.globs, result, keep)
    for path in select_files(tree, params.setup_py, transform=NAME):
        _edit_setup_py(tree, path, params.globs, result, keep)
    return result


_COMPILED = (".cu", ".cpp", ".cc", ".cxx", ".c")
_DEVICE_HEAD = re.compile(r"\b(?:__global__|__device__)\b")
_NOT_LINKED = re.compile(r"\b(?:static|inline|__forceinline__|__inline__)\b")


def _linked_elsewhere(tree: TreeView, excluded: set[str], ctx: TransformContext
                      ) -> dict[str, tuple[int, str]]:
    """Under separable compilation, the excluded sources that define a kernel or `__device__`
    function another source references: path → (line of the definition, why it stays). With
    relocatable device code the device linker resolves such a reference across units, so the
    unit that defines it cannot leave the build (an undefined device symbol, LNK2019 on
    Windows). Read on the text: a reference is an identifier use (a call, a launch, an address
    taken) in any other source of the recipe, headers included."""
    others = [p for p in ctx.sources if p not in excluded and tree.exists(p)]
    out: dict[str, tuple[int, str]] = {}
    for path in sorted(excluded):
        src = _parse(tree, path) if path.endswith(_COMPILED) else None
        if src is None:
            continue
        for fn in cxx.function_declarations(src):
            if not fn.is_definition or not _DEVICE_HEAD.search(fn.head) or \
                    _NOT_LINKED.search(fn.head):
                continue
            ref = _reference(tree, others, fn.name)
            if ref:
                out[path] = (fn.line, f"{fn.name} (defined here, line {fn.line}) is referenced "
                             f"from {ref} and the build links device code across units "
                             f"({ctx.separable}): leaving this source out breaks the device "
                             "link")
                break
    return out


def _parse(tree: TreeView, path: str) -> cxx.Source | None:
    try:
        return cxx.parse(tree.read(path), path)
    except (PatchError, TreeError):
        return None  # not text: it defines nothing another source could reference


def _reference(tree: TreeView, paths: list[str], name: str) -> str:
    """`path:line` of the first reference to `name` in `paths`, '' for none."""
    word = re.compile(rf"\b{re.escape(name)}\b")
    for path in paths:
        src = _parse(tree, path)
        if src is None or not word.search(src.text):
            continue
        refs = cxx.identifier_references(src, name)
        if refs:
            return f"{path}:{src.line_of(refs[0])}"
    return ""


def _relative(base_dir: str, token: str) -> str:
    token = token.strip('"')
    for prefix in _CMAKE_PREFIXES:
        token = token.removeprefix(prefix)
    return posixpath.normpath(posixpath.join(base_dir, token)) if base_dir else \
        posixpath.normpath(token)


def _edit_cmake(tree: TreeView, path: str, globs: tuple[str, ...],
                result: TransformResult, keep: frozenset[str]) -> None:
    text = tree.read(path)
    base = posixpath.dirname(path)
    out: list[str] = []
    changed = False
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        body = line.rstrip("\r\n")
        stripped = body.strip()
        if stripped.startswith(MARK.strip()):
            result.sites.append(Site(path=path, line=number, kind="cmake-source",
                                     action="already", snippet=stripped))
            out.append(line)
            continue
        code = stripped.split("#", 1)[0]
        tokens = _CMAKE_TOKEN.findall(code)
        hits = [t for t in tokens if t.strip('"').endswith(_SOURCE_SUFFIXES)
                and _excluded(_relative(base, t), globs) and _relative(base, t) not in keep]
        if not hits:
            out.append(line)
            continue
        if len(tokens) != len(hits) or "(" in code or ")" in code:
            raise PatchError(
                f"{NAME}: {path}:{number} lists an excluded source together with other "
                "arguments, so it cannot be commented out on its own",
                evidence=stripped,
                fix="rely on the build's exclude list (build_excludes) for this file, or put "
                "each source on its own line",
            )
        indent = body[: len(body) - len(body.lstrip())]
        out.append(f"{indent}{MARK}{stripped}{line[len(body):]}")
        changed = True
        result.sites.append(Site(path=path, line=number, kind="cmake-source", action="edit",
                                 snippet=stripped))
    if changed:
        result.changes[path] = "".join(out)


def _edit_setup_py(tree: TreeView, path: str, globs: tuple[str, ...],
                   result: TransformResult, keep: frozenset[str]) -> None:
    text = tree.read(path)
    try:
        module = ast.parse(text)
    except SyntaxError as exc:
        raise PatchError(f"{NAME}: {path} is not valid Python", evidence=str(exc)) from exc
    lines = text.splitlines(keepends=True)
    nl = newline_of(text)
    base = posixpath.dirname(path)
    targets: list[int] = []
    for node in ast.walk(module):
        if isinstance(node, ast.keyword) and node.arg == "sources" and \
                isinstance(node.value, ast.List):
            for element in node.value.elts:
                if isinstance(element, ast.Constant) and isinstance(element.value, str) and \
                        _excluded(_relative(base, element.value), globs) and \
                        _relative(base, element.value) not in keep:
                    if element.lineno != element.end_lineno or _others_on_line(
                            node.value, element):
                        raise PatchError(
                            f"{NAME}: {path}:{element.lineno} lists {element.value!r} on a "
                            "line with other code", fix="put each source on its own line")
                    targets.append(element.lineno)
    for number, line in enumerate(lines, start=1):
        if line.strip().startswith(MARK.strip()):
            result.sites.append(Site(path=path, line=number, kind="setup-py-source",
                                     action="already", snippet=line.strip()))
    for number in targets:
        body = lines[number - 1].rstrip("\r\n")
        indent = body[: len(body) - len(body.lstrip())]
        ending = lines[number - 1][len(body):] or nl
        lines[number - 1] = f"{indent}{MARK}{body.strip()}{ending}"
        result.sites.append(Site(path=path, line=number, kind="setup-py-source",
                                 action="edit", snippet=body.strip()))
    if targets:
        result.changes[path] = "".join(lines)


def _others_on_line(listing: ast.List, element: ast.Constant) -> bool:
    if element.lineno in (listing.lineno, listing.end_lineno):
        return True
    return any(e is not element and element.lineno in (e.lineno, e.end_lineno)
               for e in listing.elts)


register(TransformDef.built_in(NAME, apply))
