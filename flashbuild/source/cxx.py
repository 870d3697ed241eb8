"""C++/CUDA parsing helpers on tree-sitter (the PyPI `tree-sitter-cuda` grammar).

The grammar understands `__global__`, `__launch_bounds__` and `<<<…>>>`, and yields a
`template_instantiation` node for `template __global__ void k<T>(…);` even when it is split over
lines (FACTS.md, "Parsing C++/CUDA"). What it cannot know is what a macro expands to: a top-level
macro use without a semicolon (`INST(__half)`) comes out as an `ERROR` node or an expression
statement with a missing `;`, and an `ERROR` node can swallow the `#define` that follows it.
`macro_definitions` and `macro_uses` handle those shapes so callers do not have to.

Everything here works on `Source`, an immutable parsed file. Offsets are **byte** offsets into
the UTF-8 encoding (what tree-sitter reports); `Source.line_of` maps them to 1-based lines.
These helpers are shared by the patch transforms and `flashbuild scan`.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser, Query, QueryCursor, Tree

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = [
    "Call",
    "Conditional",
    "ContinuedLine",
    "FunctionDecl",
    "Include",
    "Instantiation",
    "MacroDef",
    "MacroUse",
    "Source",
    "calls",
    "comment_ranges",
    "continued_line",
    "declared_name",
    "enclosing_conditionals",
    "error_nodes",
    "function_declarations",
    "identifier_references",
    "includes",
    "language",
    "macro_definitions",
    "macro_uses",
    "nodes_of_type",
    "normalize_condition",
    "parse",
    "template_instantiations",
    "walk",
]


@functools.cache
def language() -> Language:
    """The CUDA grammar. tree-sitter ≥ 0.22 builds a `Language` from the capsule that the
    grammar package's `language()` returns (tree-sitter-cuda 0.21 ships ABI 15 for 0.26)."""
    return Language(tree_sitter_cuda.language())


@functools.cache
def _parser() -> Parser:
    return Parser(language())


@dataclass(frozen=True, eq=False)
class Source:
    """A parsed file: its text, its UTF-8 bytes, the syntax tree and a line index."""

    path: str
    text: str
    data: bytes
    tree: Tree
    _line_starts: tuple[int, ...] = field(repr=False)

    @property
    def root(self) -> Node:
        return self.tree.root_node

    @property
    def newline(self) -> str:
        """The file's line-ending style (CRLF if any CRLF is present, else LF)."""
        return "\r\n" if "\r\n" in self.text else "\n"

    def node_text(self, node: Node) -> str:
        return self.slice(node.start_byte, node.end_byte)

    def slice(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8", errors="replace")

    def line_of(self, offset: int) -> int:
        """1-based line number of a byte offset."""
        return bisect.bisect_right(self._line_starts, offset)

    def line_start(self, offset: int) -> int:
        """Byte offset of the first character of the line holding `offset`."""
        return self._line_starts[self.line_of(offset) - 1]

    def line_end(self, offset: int) -> int:
        """Byte offset just past the newline of the line holding `offset` (or end of file)."""
        line = self.line_of(offset)
        return self._line_starts[line] if line < len(self._line_starts) else len(self.data)


@functools.lru_cache(maxsize=512)
def _parse_cached(path: str, text: str) -> Source:
    data = text.encode("utf-8")
    starts = [0]
    pos = data.find(b"\n")
    while pos != -1:
        starts.append(pos + 1)
        pos = data.find(b"\n", pos + 1)
    return Source(path=path, text=text, data=data, tree=_parser().parse(data),
                  _line_starts=tuple(starts))


def parse(text: str, path: str = "<memory>") -> Source:
    """Parse C++/CUDA text. Results are cached by (path, text), so callers may re-parse freely."""
    return _parse_cached(path, text)


# --------------------------------------------------------------------------- tree walking


def walk(node: Node) -> Iterator[Node]:
    """Every node below (and including) `node`, in document order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _of_type(node: Node, types: Iterable[str]) -> Iterator[Node]:
    """The nodes of `types` below (and including) `node`, in document order as `walk` visits
    them (an outer node before one that starts with it). Found by a tree-sitter query, in C:
    walking every node in Python was most of the static scan's time on CUTLASS-sized files
    (the same nodes in the same order for every type this module asks for, on all 6,625 C++
    files of the corpus)."""
    nodes = QueryCursor(_type_query(tuple(types))).captures(node).get("n", [])
    return iter(sorted(nodes, key=lambda n: (n.start_byte, -n.end_byte)))


def nodes_of_type(node: Node, types: Iterable[str]) -> list[Node]:
    """The nodes of `types` below (and including) `node`, in document order (see `_of_type`:
    one query, in C)."""
    return list(_of_type(node, types))


def declared_name(declarator: Node | None) -> Node | None:
    """The identifier a declarator declares (`x` of `int* x = …`, `f` of `void f(…)`)."""
    return _declared_name(declarator)


@functools.cache
def _type_query(types: tuple[str, ...]) -> Query:
    return Query(language(), " ".join(f"({t}) @n" for t in types))


def _ancestors(node: Node) -> Iterator[Node]:
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


_PREPROC_DEFS = ("preproc_def", "preproc_function_def")


def error_nodes(src: Source) -> list[Node]:
    """`ERROR` nodes: where the grammar gave up, typically a top-level macro use."""
    return [n for n in walk(src.root) if n.is_error]


def comment_ranges(src: Source) -> list[tuple[int, int]]:
    return [(n.start_byte, n.end_byte) for n in _of_type(src.root, ("comment",))]


# --------------------------------------------------------------------------- continued lines
#
# The preprocessor joins a line that ends in a backslash with the next one before it reads
# anything else (C++ [lex.phases] phase 2), so a `#define` continued over several lines is one
# directive. GCC and Clang also join a backslash followed by spaces or tabs (with a warning),
# which tree-sitter does not: there its parse ends the directive early and reads the rest as
# code. A line inserted between two joined lines, or a run of lines removed from inside one,
# changes the directive (an `#if` spliced into a `#define` body: the file compiles nowhere).

_ENDS_CONTINUED = re.compile(rb"\\[ \t\f\v]*\r?\n\Z")
_DIRECTIVE_HEAD = re.compile(r"#\s*(\w+)(?:\s+([A-Za-z_]\w*))?")


@dataclass(frozen=True)
class ContinuedLine:
    """A logical line made of several physical lines joined by backslashes."""

    start: int
    end: int
    """Byte offsets: its first line's start, past its last line's newline."""
    line: int
    last_line: int
    directive: str
    """`define`, `if`, … when it is a preprocessor directive, else ''."""
    name: str
    """The macro a `#define` defines ('' otherwise)."""

    def describe(self) -> str:
        """`the #define INSTANTIATE (lines 4-6)`, for a refusal message."""
        what = (f"the #{self.directive} {self.name}".rstrip() if self.directive else
                "a backslash-continued line")
        return f"{what} (lines {self.line}-{self.last_line})"


def _line_bounds(data: bytes, offset: int) -> tuple[int, int]:
    """(start, end past the newline) of the physical line holding byte `offset`."""
    start = data.rfind(b"\n", 0, offset) + 1
    nl = data.find(b"\n", offset)
    return start, (len(data) if nl == -1 else nl + 1)


def _continues(data: bytes, line_start: int, line_end: int) -> bool:
    return _ENDS_CONTINUED.search(data, line_start, line_end) is not None


def continued_line(data: bytes, *offsets: int) -> ContinuedLine | None:
    """The backslash-continued logical line that an edit boundary would split, or None.

    Each offset is a line boundary an edit uses: where a line is inserted, or the start and
    the end of a run of lines removed or replaced. A boundary splits a logical line when the
    physical line before it ends in a backslash (spaces or tabs after it count, as GCC and
    Clang read them). An edit inside one line (a macro-edit of a `#define` body) splits
    nothing and is not asked about."""
    for offset in offsets:
        if offset <= 0 or offset > len(data) or data[offset - 1:offset] != b"\n":
            continue
        prev_start = data.rfind(b"\n", 0, offset - 1) + 1
        if not _continues(data, prev_start, offset):
            continue
        start = prev_start
        while start > 0:
            before = data.rfind(b"\n", 0, start - 1) + 1
            if not _continues(data, before, start):
                break
            start = before
        end = offset
        while end < len(data):
            _s, line_end = _line_bounds(data, end)
            end = line_end
            if not _continues(data, _s, line_end):
                break
        head = _DIRECTIVE_HEAD.match(data[start:end].decode("utf-8", "replace").lstrip())
        directive = head.group(1) if head else ""
        return ContinuedLine(
            start=start, end=end, line=data.count(b"\n", 0, start) + 1,
            last_line=data.count(b"\n", 0, max(start, end - 1)) + 1, directive=directive,
            name=(head.group(2) or "") if head and directive == "define" else "")
    return None


# --------------------------------------------------------------------------- declarators


def _declared_name(declarator: Node | None) -> Node | None:
    """The identifier a (function) declarator declares: unwraps pointers, references,
    qualified names (`ns::f`) and template ids (`f<T>`)."""
    node = declarator
    while node is not None:
        if node.type in ("identifier", "field_identifier", "operator_name", "destructor_name"):
            return node
        if node.type in {"template_function", "qualified_identifier"}:
            node = node.child_by_field_name("name")
        else:
            node = node.child_by_field_name("declarator")
    return None


def _function_declarator(node: Node | None) -> Node | None:
    """The `function_declarator` under a declaration's declarator (through pointers)."""
    while node is not None:
        if node.type == "function_declarator":
            return node
        node = node.child_by_field_name("declarator")
    return None


# --------------------------------------------------------------------------- instantiations


@dataclass(frozen=True)
class Instantiation:
    """An explicit function template instantiation (`template [__global__] R f<T>(…);`)."""

    start: int
    end: int
    line: int
    name: str
    """Unqualified function name (`k` for `template __global__ void ns::k<float>(…)`)."""
    target: str
    """The instantiated entity as written, e.g. `k<float>`."""
    is_kernel: bool
    """Declared `__global__` here (callers may also know it from the template definition)."""
    text: str
    shape: Shape | None = None
    """The qualifier shape of its parameter list (`parameter_shape`), None where unreadable."""


def _instantiation(src: Source, node: Node) -> Instantiation | None:
    if any(c.type == "extern" for c in node.children):
        return None  # `extern template …;` suppresses instantiation; it is not one
    decl = _function_declarator(node.child_by_field_name("declarator"))
    if decl is None:
        return None  # class instantiations (`template struct S<int>;`) are not in scope
    inner = decl.child_by_field_name("declarator")
    name = _declared_name(inner)
    if inner is None or name is None:
        return None
    return Instantiation(
        start=node.start_byte,
        end=node.end_byte,
        line=src.line_of(node.start_byte),
        name=src.node_text(name),
        target=src.node_text(inner),
        is_kernel=any(c.type == "__global__" for c in node.children),
        text=src.node_text(node),
        shape=parameter_shape(src, decl),
    )


def template_instantiations(src: Source) -> list[Instantiation]:
    """Every explicit function template instantiation in the parse, at any depth (namespaces,
    `#if` branches). `template<>` specialisations are `template_declaration` nodes and
    `x.template f<…>()` is a call, so neither is returned; nor are `extern template`
    declarations or class instantiations."""
    found = (_instantiation(src, n) for n in _of_type(src.root, ("template_instantiation",)))
    return [i for i in found if i is not None]


@dataclass(frozen=True)
class TemplateSignature:
    """A function template's declaration or definition: where, and its parameter list."""

    name: str
    line: int
    kernel: bool
    """Declared `__global__`."""
    is_definition: bool
    shape: Shape | None
    """`parameter_shape` of its parameter list, None where unreadable."""
    parameters: tuple[str, ...]
    """Each parameter as written (names included)."""


def template_signatures(src: Source) -> list[TemplateSignature]:
    """Every function template declared or defined in the file, in file order."""
    out: list[TemplateSignature] = []
    for node in _of_type(src.root, ("template_declaration",)):
        for child in node.named_children:
            if child.type not in ("function_definition", "declaration"):
                continue
            fdecl = _function_declarator(child.child_by_field_name("declarator"))
            name = _declared_name(fdecl)
            if fdecl is None or name is None:
                continue
            plist = fdecl.child_by_field_name("parameters")
            out.append(TemplateSignature(
                name=src.node_text(name), line=src.line_of(child.start_byte),
                kernel=any(c.type == "__global__" for c in child.children),
                is_definition=child.type == "function_definition",
                shape=parameter_shape(src, fdecl),
                parameters=tuple(" ".join(src.node_text(p).split())
                                 for p in (plist.named_children if plist is not None else ())
                                 if p.type != "comment")))
    return out


# --------------------------------------------------------------------------- parameter shapes
#
# What an explicit instantiation must repeat of its template's parameter list for MSVC: the
# Microsoft ABI mangles a parameter's qualifiers as spelled, `__restrict` and the top-level
# `const` of a pointer included (`int*` is `PEAH`, `int* const` is `QEAH`), where the Itanium
# ABI drops both; so an instantiation that leaves out a `__restrict__` of its definition names
# a function that does not exist for MSVC (docs/scan.md, "Explicit instantiations"). The shape
# keeps exactly those: per parameter the pointee's `const`/`volatile` and, per pointer or
# reference level, its qualifiers. Type names are left out: `T` against `__half` is the
# substitution itself.

Shape = tuple[str, ...]
"""Per parameter: `c` for a const pointee, then one `*`/`&`/`&&` per level with its
qualifiers sorted (`c` const, `r` restrict, `v` volatile): `c*r` is `const T* __restrict__`.
A plain value's top-level `const` is dropped (no ABI keeps it)."""

#: A parameter "name" that is a qualifier spelled through a macro (`RESTRICT`, `__RESTRICT__`,
#: `KAT_RESTRICT`, `CONST_PTR`): upper case, naming restrict or const.
_MACRO_QUALIFIER = re.compile(r"_*[A-Z0-9_]*(?:RESTRICT|CONST)[A-Z0-9_]*")

_QUALIFIER_LETTER = {"const": "c", "volatile": "v", "__restrict__": "r", "__restrict": "r",
                     "restrict": "r"}


def parameter_shape(src: Source, fdecl: Node) -> Shape | None:
    """The shape of a function declarator's parameter list (see `Shape`), or None when it
    cannot be read: a parse error in it (a qualifier spelled through a macro), a parameter
    pack, a function pointer."""
    plist = fdecl.child_by_field_name("parameters")
    if plist is None or plist.has_error:
        return None
    out: list[str] = []
    for p in plist.named_children:
        if p.type == "comment":
            continue
        if p.type not in ("parameter_declaration", "optional_parameter_declaration"):
            return None  # `...`, a pack
        declarator = p.child_by_field_name("declarator")
        pointee = "".join(sorted({
            _QUALIFIER_LETTER.get(src.node_text(c), "?") for c in p.children
            if c.type == "type_qualifier" and (declarator is None
                                               or c.start_byte < declarator.start_byte)}))
        levels: list[str] = []
        node = declarator
        name = _declared_name(declarator)
        if name is not None and _MACRO_QUALIFIER.fullmatch(src.node_text(name)):
            return None  # `T* RESTRICT` with no name: the macro read as the parameter's name
        while node is not None and node.type not in ("identifier", "field_identifier"):
            if node.type in ("pointer_declarator", "abstract_pointer_declarator",
                             "reference_declarator", "abstract_reference_declarator"):
                mark = next((src.node_text(c) for c in node.children
                             if c.type in ("*", "&", "&&")), "*")
                quals = {_QUALIFIER_LETTER.get(src.node_text(q), "?")
                         for c in node.children if c.type in ("type_qualifier",
                                                              "ms_pointer_modifier")
                         for q in ([c] if c.type == "type_qualifier" else c.children)}
                levels.append(mark + "".join(sorted(quals)))
            elif node.type in ("array_declarator", "abstract_array_declarator"):
                levels.append("*")  # a parameter's array is a pointer
            else:
                return None  # a function pointer, a parenthesised declarator
            node = node.child_by_field_name("declarator")
        if "?" in pointee or any("?" in level for level in levels):
            return None
        out.append((pointee if levels else "") + "".join(levels))
    return tuple(out)


# --------------------------------------------------------------------------- conditionals


@dataclass(frozen=True)
class Conditional:
    """A preprocessor conditional enclosing a node, innermost first."""

    directive: Literal["#if", "#ifdef", "#ifndef", "#elif", "#elifdef", "#elifndef"]
    condition: str
    """The condition as written (the macro name for #ifdef/#ifndef)."""
    branch: Literal["then", "else"]
    """`then`: the node is in this directive's own block; `else`: in its #else/#elif part."""
    start: int
    line: int


_ALTERNATIVES = ("preproc_else", "preproc_elif", "preproc_elifdef")


def enclosing_conditionals(src: Source, node: Node) -> list[Conditional]:
    """The `#if`/`#ifdef`/`#ifndef`/`#elif` blocks around a node, innermost first.

    tree-sitter nests `#elif`/`#else` inside the conditional they continue, so a node in an
    `#else` is reported as the `else` branch of each directive of the chain."""
    out: list[Conditional] = []
    child = node
    for parent in _ancestors(node):
        if parent.type in ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef"):
            alternative = parent.child_by_field_name("alternative")
            in_else = alternative is not None and child.id == alternative.id
            head = parent.children[0]
            directive = head.type
            if parent.type in ("preproc_ifdef", "preproc_elifdef"):
                cond_node = parent.child_by_field_name("name")
            else:
                cond_node = parent.child_by_field_name("condition")
            condition = src.node_text(cond_node) if cond_node is not None else ""
            out.append(Conditional(
                directive=directive,  # type: ignore[arg-type]
                condition=condition.strip(),
                branch="else" if in_else else "then",
                start=parent.start_byte,
                line=src.line_of(parent.start_byte),
            ))
        child = parent
    return out


def normalize_condition(condition: str) -> str:
    """A condition with whitespace and redundant outer parentheses removed, and
    `defined X` spelled `defined(X)`, for comparing conditions as written."""
    text = re.sub(r"\bdefined\s+([A-Za-z_]\w*)", r"defined(\1)", condition)
    text = re.sub(r"\s+", "", text)
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1]
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


# --------------------------------------------------------------------------- macros


@dataclass(frozen=True)
class MacroDef:
    """A `#define`: object-like (`params is None`) or function-like."""

    name: str
    params: tuple[str, ...] | None
    body: str
    start: int
    end: int
    """End of the directive (past its newline when the grammar includes it)."""
    line: int
    recovered: bool = False
    """True when the `#define` sat inside an ERROR node and was read by the preprocessor's
    line rule (a directive ends at a newline not preceded by a backslash)."""


@functools.cache
def _definitions_query() -> Query:
    return Query(language(), " ".join(f"({t}) @def" for t in _PREPROC_DEFS) + " (ERROR) @error")


def macro_definitions(src: Source) -> list[MacroDef]:
    """Every `#define` of the file, in file order. The nodes are found by a tree-sitter query
    (in C) rather than by walking every node in Python: on CUTLASS-sized headers the walk was
    most of the static scan's time (FlashRT's 6,625 C++ files of the corpus: 24 s → 3.9 s, the
    same definitions). Each definition is one node's or one `#define` token's, so sorting by
    start gives the order the walk gave."""
    out: list[MacroDef] = []
    captures = QueryCursor(_definitions_query()).captures(src.root)
    for node in captures.get("def", []):
        name = node.child_by_field_name("name")
        params = node.child_by_field_name("parameters")
        value = node.child_by_field_name("value")
        out.append(MacroDef(
            name=src.node_text(name) if name is not None else "",
            params=None if params is None else tuple(
                src.node_text(p) for p in params.named_children),
            body=src.node_text(value).strip() if value is not None else "",
            start=node.start_byte, end=node.end_byte, line=src.line_of(node.start_byte),
        ))
    for node in captures.get("error", []):
        out.extend(_recover_defines(src, node))
    return sorted(out, key=lambda m: m.start)


_DEFINE_LINE = re.compile(
    rb"#[ \t]*define[ \t]+(?P<name>[A-Za-z_]\w*)(?P<params>\([^)]*\))?(?P<body>.*)", re.S)


def _recover_defines(src: Source, error: Node) -> list[MacroDef]:
    """`#define` tokens that an ERROR node swallowed, re-read with the preprocessor's rule."""
    out: list[MacroDef] = []
    for child in error.children:
        if child.type != "#define":
            continue
        start = child.start_byte
        end = start
        while True:  # the directive runs to the first newline not escaped by a backslash
            nl = src.data.find(b"\n", end)
            if nl == -1:
                end = len(src.data)
                break
            end = nl + 1
            if not src.data[:nl].rstrip(b"\r").endswith(b"\\"):
                break
        match = _DEFINE_LINE.match(src.data[start:end])
        if match is None:
            continue
        params = match.group("params")
        out.append(MacroDef(
            name=match.group("name").decode(),
            params=None if params is None else tuple(
                p.strip() for p in params[1:-1].decode().split(",") if p.strip()),
            body=match.group("body").decode("utf-8", "replace").replace("\\\r\n", " ")
            .replace("\\\n", " ").strip(),
            start=start, end=end, line=src.line_of(start), recovered=True,
        ))
    return out


@dataclass(frozen=True)
class MacroUse:
    """A use of a function-like macro outside any `#define` and outside function bodies."""

    name: str
    start: int
    end: int
    """Past the closing parenthesis and the `;` that follows it, if any."""
    line: int
    args: str
    semicolon: bool
    node: Node = field(compare=False, repr=False)


_NAME_TYPES = ("identifier", "type_identifier", "field_identifier", "namespace_identifier")


def macro_uses(src: Source, names: Iterable[str], *, top_level_only: bool = True
               ) -> list[MacroUse]:
    """Uses `NAME(args)` of the given function-like macros. The grammar parses these in
    several ways (an ERROR node, a declaration, an expression statement with a missing `;`),
    so the extent is taken from the tokens: balanced parentheses after the name, then an
    optional `;` on the same line. Identifiers inside `#define` bodies (also recovered ones)
    and, with `top_level_only`, inside function bodies are not uses."""
    wanted = set(names)
    if not wanted:
        return []
    define_ranges = [(m.start, m.end) for m in macro_definitions(src)]
    out: list[MacroUse] = []
    last_end = -1
    for node in walk(src.root):
        if node.type not in _NAME_TYPES or node.start_byte < last_end:
            continue
        text = src.node_text(node)
        if text not in wanted or any(s <= node.start_byte < e for s, e in define_ranges):
            continue
        if top_level_only and any(a.type in ("compound_statement", "field_declaration_list")
                                  for a in _ancestors(node)):
            continue
        extent = _call_extent(src.data, node.end_byte)
        if extent is None:
            continue
        args_end, end, semicolon = extent
        out.append(MacroUse(
            name=text, start=node.start_byte, end=end, line=src.line_of(node.start_byte),
            args=src.slice(node.end_byte, args_end).strip()[1:-1], semicolon=semicolon,
            node=node,
        ))
        last_end = end
    return out


def _call_extent(data: bytes, pos: int) -> tuple[int, int, bool] | None:
    """After a macro name: (end of `(…)`, end including a same-line `;`, has `;`)."""
    i = pos
    while i < len(data) and data[i] in b" \t\r\n":
        i += 1
    if i >= len(data) or data[i] != ord("("):
        return None
    close = _matching_paren(data, i)
    if close is None:
        return None
    args_end = close + 1
    j = args_end
    while j < len(data) and data[j] in b" \t":
        j += 1
    if j < len(data) and data[j] == ord(";"):
        return args_end, j + 1, True
    return args_end, args_end, False


def matching_paren(data: bytes, i: int) -> int | None:
    """Offset of the `)` closing the `(` at byte `i`, or None (string literals skipped)."""
    return _matching_paren(data, i)


def _matching_paren(data: bytes, i: int) -> int | None:
    """Offset of the `)` closing the `(` at `i`, skipping string and character literals."""
    depth = 0
    quote = 0
    while i < len(data):
        ch = data[i]
        if quote:
            if ch == ord("\\"):
                i += 1
            elif ch == quote:
                quote = 0
        elif ch in b"\"'":
            quote = ch
        elif ch == ord("("):
            depth += 1
        elif ch == ord(")"):
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


# --------------------------------------------------------------------------- references


@dataclass(frozen=True)
class Call:
    """A call expression: `f(x)`, `ns::f<T>(x)`, `k<T><<<g, b>>>(x)`, `obj.m(x)`."""

    name: str
    """The unqualified callee name."""
    callee: str
    """The callee as written."""
    start: int
    line: int
    is_launch: bool
    """A kernel launch with `<<<…>>>`."""


def _callee_name(node: Node | None) -> Node | None:
    while node is not None:
        if node.type in ("identifier", "field_identifier"):
            return node
        if node.type in ("template_function", "qualified_identifier", "template_method"):
            node = node.child_by_field_name("name")
        elif node.type == "field_expression":
            node = node.child_by_field_name("field")
        else:
            return None
    return None


def calls(src: Source) -> list[Call]:
    out: list[Call] = []
    for node in _of_type(src.root, ("call_expression",)):
        fn = node.child_by_field_name("function")
        name = _callee_name(fn)
        if fn is None or name is None:
            continue
        out.append(Call(
            name=src.node_text(name), callee=src.node_text(fn), start=node.start_byte,
            line=src.line_of(node.start_byte),
            is_launch=any(c.type == "kernel_call_syntax" for c in node.children),
        ))
    return out


def identifier_references(src: Source, name: str) -> list[int]:
    """Byte offsets where `name` is used (called, passed, its address taken), excluding the
    places that declare or define it and `#define` bodies."""
    out: list[int] = []
    defines = [(m.start, m.end) for m in macro_definitions(src) if m.recovered]
    for node in _of_type(src.root, ("identifier", "field_identifier")):
        if src.node_text(node) != name:
            continue
        if any(a.type in _PREPROC_DEFS for a in _ancestors(node)):
            continue
        if any(s <= node.start_byte < e for s, e in defines):
            continue
        if _is_declared_name(node):
            continue
        out.append(node.start_byte)
    return out


def _is_declared_name(node: Node) -> bool:
    """True when `node` is the name a declarator introduces (`void f(…)`, `int x`)."""
    child = node
    for parent in _ancestors(node):
        if parent.type in ("template_function", "qualified_identifier"):
            child = parent
            continue
        if parent.type == "function_declarator":
            declarator = parent.child_by_field_name("declarator")
            return declarator is not None and declarator.id == child.id
        return False
    return False


# --------------------------------------------------------------------------- includes


@dataclass(frozen=True)
class Include:
    path: str
    system: bool
    """`<…>` (True) or `"…"` (False)."""
    start: int
    end: int
    """End of the directive line (past its newline)."""
    line: int
    path_start: int
    path_end: int
    """Byte range of the `<…>` / `"…"` token, delimiters included."""


def includes(src: Source) -> list[Include]:
    out: list[Include] = []
    for node in _of_type(src.root, ("preproc_include",)):
        target = node.child_by_field_name("path")
        if target is None:
            continue
        raw = src.node_text(target)
        out.append(Include(
            path=raw[1:-1], system=raw.startswith("<"), start=node.start_byte,
            end=node.end_byte, line=src.line_of(node.start_byte),
            path_start=target.start_byte, path_end=target.end_byte,
        ))
    return out


# --------------------------------------------------------------------------- functions


@dataclass(frozen=True)
class Parameter:
    text: str
    """As written, without a default argument."""
    name: str
    default: str | None


@dataclass(frozen=True)
class FunctionDecl:
    """A function declaration or definition, with its signature as written."""

    name: str
    return_type: str
    """Everything before the name that is part of the type: `const char*`, `void*`,
    `cudaError_t` (storage classes, `inline` and attributes removed)."""
    parameters: tuple[Parameter, ...]
    is_definition: bool
    extern_c: bool
    """Inside `extern "C"` (a linkage specification)."""
    specifiers: tuple[str, ...]
    """Storage class and other leading specifiers as written (`static`, `inline`, macros)."""
    start: int
    """Start of the declaration (after any `extern "C"` that wraps only it)."""
    end: int
    line: int
    signature: str
    """`R name(params)` as it would head a definition (no defaults, no trailing `;`)."""
    decl_node_start: int
    """Start of the first token after the specifiers, i.e. where an export macro would go."""
    scope: tuple[str, ...] = ()
    """Enclosing namespaces, outermost first."""
    head: str = ""
    """The text from the start of the declaration to the function name (specifiers, return
    type, attributes as written)."""


_STORAGE = ("storage_class_specifier", "attribute_specifier", "attribute_declaration",
            "ms_declspec_modifier", "virtual", "explicit_function_specifier")


def function_declarations(src: Source, *, include_members: bool = False) -> list[FunctionDecl]:
    """Functions declared or defined at namespace scope (optionally also class members)."""
    out: list[FunctionDecl] = []
    for node in _of_type(src.root, ("declaration", "function_definition", "field_declaration")):
        if node.type == "field_declaration" and not include_members:
            continue
        if any(a.type in ("compound_statement", "template_declaration")
               for a in _ancestors(node)):
            continue
        if not include_members and any(a.type == "field_declaration_list"
                                       for a in _ancestors(node)):
            continue
        declarator = node.child_by_field_name("declarator")
        fdecl = _function_declarator(declarator)
        if declarator is None or fdecl is None:
            continue
        name_node = _declared_name(fdecl.child_by_field_name("declarator"))
        if name_node is None:
            continue
        out.append(_function_decl(src, node, declarator, fdecl, name_node))
    return out


def _function_decl(src: Source, node: Node, declarator: Node, fdecl: Node,
                   name_node: Node) -> FunctionDecl:
    type_node = node.child_by_field_name("type")
    specifiers: list[str] = []
    type_parts: list[str] = []
    first_type_start = type_node.start_byte if type_node is not None else declarator.start_byte
    for child in node.children:
        if child.start_byte >= declarator.start_byte:
            break
        if child.start_byte >= first_type_start or (
                child.type == "type_qualifier" and child.type not in _STORAGE):
            type_parts.append(src.node_text(child))
        else:  # storage classes, `inline`, `__host__ __device__`, attributes
            specifiers.append(src.node_text(child))
    # Pointer/reference declarators belong to the return type: `void* f(…)`, `char** g(…)`.
    prefix = src.slice(declarator.start_byte, fdecl.start_byte).strip()
    return_type = " ".join(type_parts) + (prefix if prefix else "")
    params: list[Parameter] = []
    plist = fdecl.child_by_field_name("parameters")
    for p in plist.named_children if plist is not None else ():
        if p.type == "comment":
            continue
        default = p.child_by_field_name("default_value")
        if default is not None:
            text = src.slice(p.start_byte, default.start_byte).rstrip().rstrip("=").rstrip()
        else:
            text = src.node_text(p)
        pname = _declared_name(p.child_by_field_name("declarator"))
        params.append(Parameter(text=text, name=src.node_text(pname) if pname else "",
                                default=src.node_text(default) if default else None))
    params_text = ", ".join(p.text for p in params)
    suffix = src.slice(plist.end_byte, fdecl.end_byte).strip() if plist is not None else ""
    name = src.node_text(name_node)
    signature = f"{return_type} {src.slice(name_node.start_byte, name_node.end_byte)}"
    signature += f"({params_text})" + (f" {suffix}" if suffix else "")
    return FunctionDecl(
        name=name,
        return_type=return_type,
        parameters=tuple(params),
        is_definition=node.type == "function_definition",
        extern_c=any(a.type == "linkage_specification" and '"C"' in src.node_text(
            a.child_by_field_name("value") or a) for a in _ancestors(node)),
        specifiers=tuple(specifiers),
        start=node.start_byte,
        end=node.end_byte,
        line=src.line_of(node.start_byte),
        signature=signature,
        decl_node_start=_first_non_specifier(node, declarator),
        scope=tuple(reversed([
            src.node_text(n) for a in _ancestors(node) if a.type == "namespace_definition"
            and (n := a.child_by_field_name("name")) is not None])),
        head=src.slice(node.start_byte, name_node.start_byte),
    )


def _first_non_specifier(node: Node, declarator: Node) -> int:
    for child in node.children:
        if child.type in _STORAGE:
            continue
        return child.start_byte
    return declarator.start_byte
