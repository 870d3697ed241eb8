"""Whether a kernel compiled for the target reaches an instruction (FB160).

Inline PTX that the target lacks breaks a build only when ptxas sees it, and ptxas sees a
device function only when a kernel of a compiled translation unit calls it: an inline device
function that no `__global__` function reaches is never emitted (FlashMLA's
`kerutils/device/sm100/*.cuh` tcgen05 wrappers compile for sm_120, because every caller sits
behind a `__CUDA_ARCH__ >= 1000 && < 1200` or `KERUTILS_ENABLE_SM100A` gate).

The graph is read by name over the files the build compiles or includes: every place that
names the function holding the asm (or, for a member, its class: MMA atoms are used as
types, not called by name) is found, the `#if` branches around it are evaluated for the
target's device pass (with the macros its headers define), and the entity around it is
followed the same way up to a kernel. The reading errs towards "reached": a name used in host
code, at namespace scope, in a file that cannot be parsed, or past the search budget counts as
reaching a kernel, so the rule only ever drops a finding on positive evidence that every use
is compiled out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flashbuild.scanning.checks_cxx import context_for
from flashbuild.scanning.findings import FileText
from flashbuild.source.cxx import _declared_name, _function_declarator

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from tree_sitter import Node

    from flashbuild.scanning.findings import ScanTarget
    from flashbuild.source.pp import Pass

_KERNEL = re.compile(r"\b__global__\b|\b[A-Z_]*GLOBAL[A-Z_]*\b|\b__launch_bounds__\b")
_DEVICE = re.compile(r"\b__device__\b|\b[A-Z_]*DEVICE[A-Z_]*\b")
_CLASSES = ("class_specifier", "struct_specifier", "union_specifier")
_MACROS = ("preproc_def", "preproc_function_def")
#: Names explored per question before the answer is "reached" (a bound on the work, not a
#: verdict: running out keeps the finding).
BUDGET = 256


@dataclass(frozen=True)
class Owner:
    """What a place in the code belongs to, for the call graph."""

    kind: str
    """`kernel` (a __global__ function), `host` (a function nvcc compiles for the host only),
    `entity` (a device function, class, alias or macro: follow its own uses) or `top`
    (namespace scope or unknown: counts as reached)."""
    names: tuple[str, ...] = ()


def owner_of(  # noqa: PLR0911 - one return per kind of owner
        src_text: Callable[[Node], str], node: Node, searched: str = "") -> Owner:
    """The entity `node` sits in (see `Owner`). `src_text` gives a node's text. A class
    specialised on `searched` (`struct MMA_Traits<searched<…>>`) belongs to `searched`: it is
    used only where `searched` is, so it adds nothing to follow."""
    fn: Node | None = None
    n: Node | None = node.parent
    while n is not None:
        if n.type in _MACROS:
            name = n.child_by_field_name("name")
            return Owner("entity", (src_text(name),)) if name is not None else Owner("top")
        if n.type == "function_definition" and fn is None:
            fn = n
        elif n.type in _CLASSES:
            name = n.child_by_field_name("name")
            if name is not None:
                if fn is not None and _is_kernel(src_text, fn):
                    return Owner("kernel")
                base, _, args = src_text(name).partition("<")
                if searched and re.search(rf"\b{re.escape(searched)}\b", args):
                    return Owner("entity")
                return Owner("entity", (base.strip(),))
        elif n.type in ("alias_declaration", "type_definition") and fn is None:
            name = n.child_by_field_name("name") or n.child_by_field_name("declarator")
            if name is not None:
                return Owner("entity", (src_text(name),))
        n = n.parent
    if fn is None:
        return Owner("top")
    if _is_kernel(src_text, fn):
        return Owner("kernel")
    head = _head(src_text, fn)
    if not _DEVICE.search(head):
        return Owner("host")
    fname = _function_name(src_text, fn)
    return Owner("entity", (fname,)) if fname else Owner("top")


def _head(src_text: Callable[[Node], str], fn: Node) -> str:
    body = fn.child_by_field_name("body")
    text = src_text(fn)
    if body is None:
        return text
    return text[:body.start_byte - fn.start_byte]


def _is_kernel(src_text: Callable[[Node], str], fn: Node) -> bool:
    return bool(_KERNEL.search(_head(src_text, fn)))


def _function_name(src_text: Callable[[Node], str], fn: Node) -> str:
    decl = _function_declarator(fn.child_by_field_name("declarator"))
    name = _declared_name(decl.child_by_field_name("declarator")) if decl is not None else None
    return src_text(name) if name is not None else ""


@dataclass
class CallGraph:
    """Answers `reached(names)` over the compiled files of one scan, for one device pass."""

    files: Mapping[str, Any]
    """Tree-relative C++ path → the macros its headers define (`ppgraph.as_wire`)."""
    read: Callable[[str], str | None]
    target: ScanTarget
    device: Pass
    _texts: dict[str, str | None] = field(default_factory=dict)
    _ctx: dict[str, Any] = field(default_factory=dict)
    _memo: dict[str, bool] = field(default_factory=dict)

    def reached(self, names: tuple[str, ...]) -> bool:
        """Whether a kernel compiled for the target may use any of `names` (transitively)."""
        seen: set[str] = set()
        queue = [n for n in names if n]
        if not queue:
            return True
        while queue:
            name = queue.pop()
            if name in seen:
                continue
            if self._memo.get(name):
                return True
            seen.add(name)
            if len(seen) > BUDGET or len(name) < 3:
                return True
            for owner in self._uses(name):
                if owner.kind in ("kernel", "host", "top"):
                    for n in seen:
                        self._memo[n] = True
                    return True
                queue.extend(n for n in owner.names if n not in seen)
        return False

    def _uses(self, name: str) -> list[Owner]:
        word = re.compile(rf"\b{re.escape(name)}\b")
        out: list[Owner] = []
        for path in self.files:
            text = self._text(path)
            if text is None or name not in text:
                continue
            hits = list(word.finditer(text))
            if not hits:
                continue
            ctx = self._context(path, text)
            if ctx is None:
                return [Owner("top")]
            for m in hits:
                start = ctx.byte(m.start())
                node = ctx.node_at(start, start + len(name.encode("utf-8")))
                if not ctx.in_code(node) or ctx.active(node, self.device) == 0:
                    continue
                owner = owner_of(ctx.src.node_text, node, name)
                if owner.kind == "entity" and name in owner.names:
                    continue  # its own definition (or a recursive use)
                out.append(owner)
        return out

    def _text(self, path: str) -> str | None:
        if path not in self._texts:
            self._texts[path] = self.read(path)
        return self._texts[path]

    def _context(self, path: str, text: str) -> Any:
        if path not in self._ctx:
            self._ctx[path] = context_for(FileText(path, "cxx", text), self.target,
                                          self.files.get(path))
        return self._ctx[path]

