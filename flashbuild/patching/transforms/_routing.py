"""Where a condition edit sends the target: refuse one that routes it into a trap.

A `macro-edit` that widens `__CUDA_ARCH__ == 1000` to also accept 1200 is right when the
sm_100 branch holds code that runs on sm_120 (csrc's tile path), and wrong when that branch is a
stub: sm_120 then compiles a kernel that traps at its first launch, where before it took a
branch with a real body. This module answers, for one edit, which `#if` chains it changes
(the one whose condition it edits; for a `#define` body, every chain in the recipe's sources
whose condition names the macro, directly or through another macro), which branch each target
arch's device pass takes before and after, and whether the branch it takes after only traps
(source/traps.py). Conservative: a chain whose conditions cannot be decided, or a branch that
holds anything but traps, is not refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flashbuild.arch import parse_arch
from flashbuild.errors import PatchError, TreeError, UsageError
from flashbuild.source import cxx, traps
from flashbuild.source.pp import Evaluator, device_pass

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from tree_sitter import Node

    from flashbuild.patching.transforms.base import TransformContext, TreeView

_CONDITIONS = ("preproc_if", "preproc_elif")
_TOKEN = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class ConditionEdit:
    """One planned edit of a condition or a `#define` body."""

    path: str
    node: Node
    """The `preproc_if`/`preproc_elif` whose condition changes, or the `#define`."""
    old: str
    """The condition (or macro body) before the edit."""
    new: str


class Router:
    """Answers `refusal(edit)` for the edits of one step; parses each file once."""

    def __init__(self, tree: TreeView, ctx: TransformContext) -> None:
        self._tree = tree
        self._ctx = ctx
        self._sources: dict[str, cxx.Source | None] = {}
        archs = []
        for sm in ctx.archs:
            try:
                archs.append(parse_arch(sm).arch)
            except UsageError:
                continue
        self._passes = [(a.sm, device_pass(ctx.platform, a)) for a in archs]

    def refusal(self, edit: ConditionEdit) -> str:
        """Why the edit must be refused ('' when it may go ahead)."""
        if not self._passes:
            return ""
        src = self._source(edit.path)
        if src is None:
            return ""
        if edit.node.type in _CONDITIONS:
            return self._chain_refusal(src, traps.chain_top(edit.node), edit.path,
                                       replaced=(edit.node.start_byte, edit.new))
        name_node = edit.node.child_by_field_name("name")
        if name_node is None or edit.node.child_by_field_name("parameters") is not None:
            return ""  # a function-like macro is not evaluated in a condition here
        name = src.node_text(name_node)
        for path, top in self._chains_naming(name, edit.path):
            other = self._source(path)
            if other is None:
                continue
            why = self._chain_refusal(other, top, edit.path, edited=(name, edit.old, edit.new))
            if why:
                return why
        return ""

    # -- reading ---------------------------------------------------------------------------

    def _source(self, path: str) -> cxx.Source | None:
        if path not in self._sources:
            try:
                self._sources[path] = cxx.parse(self._tree.read(path), path)
            except (PatchError, TreeError):  # unreadable: it holds no chain to check
                self._sources[path] = None
        return self._sources[path]

    def _chains_naming(self, name: str, defined_in: str) -> list[tuple[str, Node]]:
        """(path, chain top) of every `#if` chain in the sources whose conditions name `name`
        or a macro defined (in that file or `defined_in`) through it."""
        word = re.compile(rf"\b{re.escape(name)}\b")
        out: list[tuple[str, Node]] = []
        seen: set[tuple[str, int]] = set()
        for path in sorted({defined_in, *self._ctx.sources}):
            src = self._source(path) if self._tree.exists(path) else None
            if src is None or not word.search(src.text):
                continue
            names = _through(name, self._macros(src, defined_in))
            for node in cxx.walk(src.root):
                if node.type not in _CONDITIONS:
                    continue
                cond = node.child_by_field_name("condition")
                if cond is None or names.isdisjoint(_TOKEN.findall(src.node_text(cond))):
                    continue
                top = traps.chain_top(node)
                if (path, top.start_byte) not in seen:
                    seen.add((path, top.start_byte))
                    out.append((path, top))
        return out

    def _macros(self, src: cxx.Source, defined_in: str) -> dict[str, list[str]]:
        """Object-like macros of `src` and of the edited file: name → bodies."""
        out: dict[str, list[str]] = {}
        files = [src] + [s for s in (self._source(defined_in),)
                         if s is not None and s.path != src.path]
        for s in files:
            for m in cxx.macro_definitions(s):
                if m.params is None and m.name:
                    out.setdefault(m.name, []).append(m.body)
        return out

    # -- deciding --------------------------------------------------------------------------

    def _chain_refusal(self, src: cxx.Source, top: Node, defined_in: str, *,
                       replaced: tuple[int, str] | None = None,
                       edited: tuple[str, str, str] | None = None) -> str:
        """`replaced`: (start of the `#if`/`#elif` node, its new condition); `edited`: (macro,
        old body, new body)."""
        branches = traps.chain(src, top)
        after = list(branches)
        if replaced is not None:
            line = src.line_of(replaced[0])
            after = [traps.Branch(replaced[1], b.line, b.body, b.comments)
                     if b.line == line else b for b in branches]
        macros = self._macros(src, defined_in)
        old = {edited[0]: edited[1]} if edited else {}
        new = {edited[0]: edited[2]} if edited else {}
        trap_macro = self._trap_macros(macros)
        for sm, pass_ in self._passes:
            was = traps.taken(branches, Evaluator(pass_, _resolver(macros, old)))
            now = traps.taken(after, Evaluator(pass_, _resolver(macros, new)))
            if now is None or now == was or now >= len(after):
                continue
            why = traps.placeholder(src, after[now], trap_macro)
            if not why:
                continue
            branch = after[now]
            what = f"#if {_short(branch.condition)}" if branch.condition else "#else"
            through = f" (through {edited[0]})" if edited else ""
            return (f"routes {sm} into the `{what}` branch at {src.path}:{branch.line}"
                    f"{through}, which does no work there: {why}; leave {sm} on the branch "
                    "it takes now, or give it a branch with a real body")
        return ""

    @staticmethod
    def _trap_macros(macros: Mapping[str, Sequence[str]]) -> Callable[[str], bool]:
        return lambda name: bool(macros.get(name)) and all(
            traps.trap_macro_body(b) for b in macros[name])


def _through(name: str, macros: Mapping[str, Sequence[str]]) -> set[str]:
    """`name` and every macro whose body names it, directly or through another (fixpoint)."""
    names = {name}
    changed = True
    while changed:
        changed = False
        for other, bodies in macros.items():
            if other not in names and any(not names.isdisjoint(_TOKEN.findall(b))
                                          for b in bodies):
                names.add(other)
                changed = True
    return names


def _resolver(macros: Mapping[str, Sequence[str]], override: Mapping[str, str]
              ) -> Callable[[str], str | None]:
    """A macro's body for the evaluator: the override, else its one definition; None
    (unknown) for a macro defined more than once (under conditions not followed here)."""
    def resolve(name: str) -> str | None:
        if name in override:
            return override[name]
        bodies = set(macros.get(name, ()))
        return next(iter(bodies)) if len(bodies) == 1 else None
    return resolve


def _short(text: str, limit: int = 50) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
