"""Code that does no work for a device pass: a trap, a report, nothing. And which branch of a
preprocessor conditional a pass takes.

Two readers use it. The scan (scanning/placeholders.py, FB154) asks of a kernel's body which
statements the target's pass keeps, and whether they only trap. A patch step that rewrites a
condition (`macro-edit`, patching/transforms/text_edits.py) asks which branch of each `#if`
chain the target's device pass takes before and after the edit, and refuses an edit that moves
the target into a branch that only traps: widening `__CUDA_ARCH__ == 1000` to 1200 is right
when the sm_100 branch holds the real code, and ships a kernel that traps at its first launch
on sm_120 when that branch is a stub.

The reading is conservative in what it calls a trap: a branch is a placeholder only when every
statement of it certainly does no work and one of them stops (`__trap()`, `asm("trap;")`,
`__brkpt()`, `assert(0 …)`, `CUTE_INVALID_CONTROL_PATH`, a macro of the tree whose body is one
of those), when it is an `#error`, or when it is empty and a comment in it says the arch is not
supported. Anything else (a nested `#if`, a declaration, a call) is work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flashbuild.source import cxx

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from tree_sitter import Node

    from flashbuild.source.pp import Evaluator

#: Calls that stop or only report: a body of these does no work.
TRAP_CALLS = frozenset({"__trap", "__brkpt", "__builtin_trap", "__builtin_unreachable",
                        "printf", "abort", "CUTE_INVALID_CONTROL_PATH",
                        "CUTLASS_NOT_IMPLEMENTED"})
#: Calls a trap takes only when its argument is false (`assert(0 && "msg")`).
FALSE_ASSERTS = frozenset({"assert", "CUTE_RUNTIME_ASSERT", "CUTLASS_ASSERT"})
_FALSE = re.compile(r"^\(\s*(?:0|false)\b")
#: A macro body that traps (`#define FAIL() __trap()`), and words that mean it also works.
TRAP_BODY = re.compile(r"\b(?:__trap|__brkpt|__builtin_trap|CUTE_INVALID_CONTROL_PATH)\s*\(|"
                       r"asm\s*(?:volatile\s*)?\(\s*\"(?:trap|brkpt);")
_WORK_WORDS = re.compile(r"[=\[]|\breturn\b\s*[^;\s]")
#: A comment that marks an empty branch as a deliberate "not here".
_UNSUPPORTED = re.compile(r"unsupported|not\s+supported|not\s+implemented|unimplemented",
                          re.IGNORECASE)
_PREPROC_IF = ("preproc_if", "preproc_ifdef")
_PREPROC_NESTED = ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef",
                   "preproc_else")


def no_trap_macro(_name: str) -> bool:
    return False


def callee(call: Node) -> str:
    """The name a call expression calls (`Kernel::run` → `run`), '' when it has none."""
    fn = call.child_by_field_name("function")
    while fn is not None and fn.type in ("qualified_identifier", "template_function",
                                         "field_expression"):
        fn = fn.child_by_field_name("name") or fn.child_by_field_name("field")
    return fn.text.decode("utf-8", "replace") if fn is not None and fn.text else ""


def trap_macro_body(body: str) -> bool:
    """A macro body that names a trap and assigns, indexes or returns nothing."""
    return bool(TRAP_BODY.search(body)) and not _WORK_WORDS.search(
        re.sub(r"\"(?:[^\"\\]|\\.)*\"", "", body))


def does_no_work(  # noqa: PLR0911 - one return per kind of statement
        src: cxx.Source, node: Node,
        trap_macro: Callable[[str], bool] = no_trap_macro) -> tuple[bool, bool]:
    """(does no work, holds a trap) for one statement: a trap, a report, an `if` around those,
    `return;`, a declaration without a call, an empty statement. `trap_macro(name)` says
    whether a called macro of the tree only traps."""
    kind = node.type
    if kind in (";", "comment") or (kind == "return_statement" and not node.named_children):
        return True, False
    if kind == "declaration":
        return not any(n.type == "call_expression" for n in cxx.walk(node)), False
    if kind == "compound_statement":
        return _all(src, node.named_children, trap_macro)
    if kind == "if_statement":
        parts = [p for p in (node.child_by_field_name("consequence"),
                             node.child_by_field_name("alternative")) if p is not None]
        return _all(src, parts, trap_macro)
    if kind == "else_clause":
        return _all(src, node.named_children, trap_macro)
    if kind == "do_statement":
        inner = node.child_by_field_name("body")
        return _all(src, [inner] if inner is not None else [], trap_macro)
    if kind != "expression_statement" or not node.named_children:
        return False, False
    expr = node.named_children[0]
    if expr.type == "gnu_asm_expression":
        asm = src.node_text(expr)
        return ("trap;" in asm or "brkpt;" in asm), True
    if expr.type != "call_expression":
        return False, False
    name = callee(expr)
    args = expr.child_by_field_name("arguments")
    if name in TRAP_CALLS or (name in FALSE_ASSERTS and args is not None and
                              _FALSE.match(src.node_text(args))):
        return True, True
    return (True, True) if trap_macro(name) else (False, False)


def _all(src: cxx.Source, nodes: Sequence[Node],
         trap_macro: Callable[[str], bool]) -> tuple[bool, bool]:
    seen = [does_no_work(src, n, trap_macro) for n in nodes if n.type not in ("comment",)
            and n.type != "condition_clause"]
    return all(ok for ok, _t in seen), any(t for _ok, t in seen)


def first_trap(src: cxx.Source, node: Node,
               trap_macro: Callable[[str], bool] = no_trap_macro) -> Node:
    """The first trap statement inside `node` (the `printf` inside `if (thread0()) {…}`)."""
    for n in cxx.walk(node):
        if n.type == "expression_statement" and does_no_work(src, n, trap_macro)[1]:
            return n
    return node


# --- branches of a conditional ----------------------------------------------------------------


@dataclass(frozen=True)
class Branch:
    """One branch of an `#if`/`#ifdef` … `#elif` … `#else` chain."""

    condition: str
    """As a condition the evaluator reads (`defined(X)` for `#ifdef X`); '' for `#else`."""
    line: int
    """The line of its directive."""
    body: tuple[Node, ...]
    """Its children: statements, declarations, nested directives (no comments)."""
    comments: tuple[str, ...]


def chain_top(node: Node) -> Node:
    """The `#if`/`#ifdef` that starts the chain an `#elif`/`#else` node belongs to."""
    while node.parent is not None and node.type not in _PREPROC_IF:
        node = node.parent
    return node


def chain(src: cxx.Source, top: Node) -> list[Branch]:
    """The branches of the chain `top` starts, in order (the last is the `#else`, if any)."""
    out: list[Branch] = []
    node: Node | None = top
    while node is not None:
        kind = node.type
        cond_node = (node.child_by_field_name("condition")
                     if kind in ("preproc_if", "preproc_elif") else
                     node.child_by_field_name("name") if kind in ("preproc_ifdef",
                                                                  "preproc_elifdef")
                     else None)
        alternative = node.child_by_field_name("alternative") if kind != "preproc_else" \
            else None
        if kind in ("preproc_ifdef", "preproc_elifdef"):
            head = src.node_text(node.children[0])
            name = src.node_text(cond_node) if cond_node is not None else ""
            condition = f"!defined({name})" if head.endswith("ndef") else f"defined({name})"
        elif kind == "preproc_else":
            condition = ""
        else:
            condition = src.node_text(cond_node) if cond_node is not None else "?"
        skip = {n.id for n in (cond_node, alternative) if n is not None}
        body = [c for c in node.named_children if c.id not in skip]
        out.append(Branch(
            condition=condition, line=src.line_of(node.start_byte),
            body=tuple(c for c in body if c.type != "comment"),
            comments=tuple(src.node_text(c) for c in body if c.type == "comment")))
        node = alternative
    return out


def taken(branches: Sequence[Branch], evaluator: Evaluator) -> int | None:
    """The index of the branch a pass takes (`len(branches)` when none is), None when a
    condition before it cannot be decided."""
    for i, branch in enumerate(branches):
        if not branch.condition:
            return i
        value = evaluator.eval(branch.condition)
        if value is None:
            return None
        if value:
            return i
    return len(branches)


def placeholder(  # noqa: PLR0911 - one return per way a branch can be (or not be) a stub
        src: cxx.Source, branch: Branch,
                trap_macro: Callable[[str], bool] = no_trap_macro) -> str:
    """Why a branch does no work (`only \\`__trap();\\` (line 12)`), '' when it may: its
    statements (or the bodies of the functions it defines) only trap, it is an `#error`, or it
    is empty and a comment in it says "unsupported" / "not implemented"."""
    if not branch.body:
        marked = next((c for c in branch.comments if _UNSUPPORTED.search(c)), "")
        return f"empty, marked `{_short(marked)}`" if marked else ""
    traps: list[Node] = []
    for node in branch.body:
        if node.type == "preproc_call" and src.node_text(
                node.child_by_field_name("directive") or node).strip() == "#error":
            return f"`{_short(src.node_text(node))}` (line {src.line_of(node.start_byte)})"
        if node.type in _PREPROC_NESTED:
            return ""  # a nested conditional: not read here, so not called a placeholder
        stmts = [node]
        if node.type == "function_definition":
            fn_body = node.child_by_field_name("body")
            stmts = list(fn_body.named_children) if fn_body is not None else []
            if not [s for s in stmts if s.type != "comment"]:
                return ""  # an empty function in a branch: a declaration's stand-in
        for stmt in stmts:
            if stmt.type in _PREPROC_NESTED:
                return ""
            no_work, trap = does_no_work(src, stmt, trap_macro)
            if not no_work:
                return ""
            if trap:
                traps.append(first_trap(src, stmt, trap_macro))
    if not traps:
        return ""
    first = traps[0]
    return f"only `{_short(src.node_text(first))}` (line {src.line_of(first.start_byte)})"


def _short(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
