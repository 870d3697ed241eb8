"""Three-valued evaluation of preprocessor conditions for one compilation pass.

A pass is what one compiler invocation sees: the host pass of nvcc on Windows defines
`_WIN32`/`_MSC_VER` and not `__CUDA_ARCH__`; the device pass for sm_120a defines
`__CUDA_ARCH__ == 1200` and `__CUDA_ARCH_FEAT_SM120_ALL`. Macros the scan cannot know (a
project's own options) evaluate to *unknown* (None), and unknown propagates (`0 && x` is
still 0, `1 || x` still 1), so a check can ask "is this code certainly compiled", "certainly
not", or "cannot tell".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flashbuild.arch import FIRST_CUDA, Arch, Suffix

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

Value = int | None

_TOKEN = re.compile(r"\s*(?:(?P<num>0[xX][0-9a-fA-F]+|\d+)[uUlL]*|(?P<id>[A-Za-z_]\w*)|"
                    r"(?P<op>\|\||&&|==|!=|<=|>=|<<|>>|[-+*/%<>!()~?:&|^,]))")


@dataclass(frozen=True)
class Pass:
    """The macros one compilation pass is known to define (name → value) and known not to."""

    name: str
    defined: Mapping[str, int]
    undefined: frozenset[str]


#: Macros only IDE indexers and static analysers define (CLion, VS Code, IntelliSense, Qt
#: Creator, clang-tidy's analyser), never a compiler that builds the tree: `#if … ||
#: defined(__CLION_IDE__)` is decided by its other terms (FlashMLA's sm100 kernels).
IDE_ONLY = frozenset({"__CLION_IDE__", "__CLION_IDE_", "__VSCODE_IDE__", "__INTELLISENSE__",
                      "__JETBRAINS_IDE__", "__RESHARPER__", "Q_CREATOR_RUN", "__CDT_PARSER__",
                      "__clang_analyzer__"})


def host_pass(platform: str) -> Pass:
    if platform == "windows":
        # cl.exe has `__has_include` and `__has_cpp_attribute`, never GCC's and Clang's
        # `__has_attribute` and `__has_builtin`: `#if defined(__has_attribute) && …` is false.
        return Pass("host (MSVC)", {"_WIN32": 1, "_WIN64": 1, "_MSC_VER": 1944, "__CUDACC__": 1},
                    frozenset({"__linux__", "__unix__", "__GNUC__", "__clang__", "__APPLE__",
                               "__CUDA_ARCH__", "linux", "unix", "__has_attribute",
                               "__has_builtin", *IDE_ONLY}))
    return Pass("host (GCC)", {"__linux__": 1, "__unix__": 1, "__GNUC__": 13, "__CUDACC__": 1},
                frozenset({"_WIN32", "_WIN64", "_MSC_VER", "__APPLE__", "__CUDA_ARCH__",
                           *IDE_ONLY}))


def device_pass(platform: str, arch: Arch) -> Pass:
    base = host_pass(platform)
    defined = dict(base.defined)
    defined["__CUDA_ARCH__"] = arch.code * 10
    undefined = set(base.undefined) - {"__CUDA_ARCH__"}
    # nvcc defines __CUDA_ARCH_FEAT_SM<code>_ALL only for the `a` target of that code (and
    # __CUDA_ARCH_SPECIFIC__ / __CUDA_ARCH_FAMILY_SPECIFIC__ for a / f targets).
    for code in FIRST_CUDA:
        feat = f"__CUDA_ARCH_FEAT_SM{code}_ALL"
        if code == arch.code and arch.suffix is Suffix.ARCH:
            defined[feat] = 1
        else:
            undefined.add(feat)
    if arch.suffix is Suffix.ARCH:
        defined["__CUDA_ARCH_SPECIFIC__"] = arch.code * 10
    else:
        undefined.add("__CUDA_ARCH_SPECIFIC__")
    if arch.suffix is Suffix.FAMILY:
        defined["__CUDA_ARCH_FAMILY_SPECIFIC__"] = arch.code * 10
    else:
        undefined.add("__CUDA_ARCH_FAMILY_SPECIFIC__")
    return Pass(f"device {arch.sm}", defined, frozenset(undefined))


@dataclass
class Evaluator:
    """Evaluates condition text. `macro` resolves a project macro: its body text when it is
    certainly defined in this pass, "" for defined-but-empty, None when unknown, and
    `NOT_DEFINED` when certainly not defined."""

    pass_: Pass
    macro: Callable[[str], str | None] = field(default=lambda name: None)
    depth: int = 0

    def eval(self, text: str) -> Value:
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text.replace("\\\n", " "), flags=re.S)
        tokens = [m.group(0).strip() for m in _TOKEN.finditer(text)]
        if "".join(tokens).replace(" ", "") != re.sub(r"\s+", "", text):
            return None  # something we do not tokenise (strings, casts): cannot tell
        parser = _Parser(tokens, self)
        try:
            value = parser.expr(0)
        except (IndexError, ValueError, ZeroDivisionError):
            return None
        return value if parser.pos == len(tokens) else None

    def defined(self, name: str) -> Value:
        if name in self.pass_.defined:
            return 1
        if name in self.pass_.undefined:
            return 0
        body = self.macro(name)
        if body is NOT_DEFINED:
            return 0
        return None if body is None else 1

    def ident(self, name: str) -> Value:
        if name in self.pass_.defined:
            return self.pass_.defined[name]
        if name in self.pass_.undefined:
            return 0  # an undefined identifier is 0 in #if
        body = self.macro(name)
        if body is NOT_DEFINED:
            return 0
        if body is None or self.depth > 8:
            return None
        return Evaluator(self.pass_, self.macro, self.depth + 1).eval(body) if body else None


NOT_DEFINED = "\0undefined"

_BINARY: dict[str, tuple[int, Callable[[int, int], int]]] = {
    "*": (10, lambda a, b: a * b), "/": (10, lambda a, b: int(a / b)),
    "%": (10, lambda a, b: a % b), "+": (9, lambda a, b: a + b), "-": (9, lambda a, b: a - b),
    "<<": (8, lambda a, b: a << b), ">>": (8, lambda a, b: a >> b),
    "<": (7, lambda a, b: int(a < b)), ">": (7, lambda a, b: int(a > b)),
    "<=": (7, lambda a, b: int(a <= b)), ">=": (7, lambda a, b: int(a >= b)),
    "==": (6, lambda a, b: int(a == b)), "!=": (6, lambda a, b: int(a != b)),
    "&": (5, lambda a, b: a & b), "^": (4, lambda a, b: a ^ b), "|": (3, lambda a, b: a | b),
    "&&": (2, lambda a, b: int(bool(a and b))), "||": (1, lambda a, b: int(bool(a or b))),
}


@dataclass
class _Parser:
    tokens: list[str]
    ev: Evaluator
    pos: int = 0

    def peek(self) -> str:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ""

    def take(self) -> str:
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def expr(self, min_prec: int) -> Value:
        left = self.unary()
        while True:
            op = self.peek()
            if op == "?" and min_prec <= 0:
                self.take()
                then = self.expr(0)
                if self.take() != ":":
                    raise ValueError(":")
                other = self.expr(0)
                left = None if left is None else (then if left else other)
                continue
            if op not in _BINARY or _BINARY[op][0] < max(min_prec, 1):
                return left
            prec, fn = _BINARY[self.take()]
            right = self.expr(prec + 1)
            if op == "&&":
                left = 0 if left == 0 or right == 0 else (
                    None if left is None or right is None else 1)
            elif op == "||":
                left = 1 if (left not in (0, None)) or (right not in (0, None)) else (
                    None if left is None or right is None else 0)
            else:
                left = None if left is None or right is None else fn(left, right)

    def _skip_arguments(self) -> None:
        depth = 0
        while True:
            tok = self.take()
            depth += {"(": 1, ")": -1}.get(tok, 0)
            if depth == 0:
                return

    def unary(self) -> Value:  # noqa: PLR0911 - one return per operator
        tok = self.take()
        if tok == "!":
            v = self.unary()
            return None if v is None else int(not v)
        if tok == "-":
            v = self.unary()
            return None if v is None else -v
        if tok == "~":
            v = self.unary()
            return None if v is None else ~v
        if tok == "(":
            v = self.expr(0)
            if self.take() != ")":
                raise ValueError(")")
            return v
        if tok == "defined":
            paren = self.peek() == "("
            if paren:
                self.take()
            name = self.take()
            if paren and self.take() != ")":
                raise ValueError(")")
            return self.ev.defined(name)
        if tok[0].isdigit():
            return int(tok.rstrip("uUlL"), 0)
        if tok[0].isalpha() or tok[0] == "_":
            if self.peek() == "(":
                # A function-like use: unknown, unless the pass certainly lacks the name
                # (`__has_attribute(x)` for cl.exe, reached only past `defined(…) &&`).
                self._skip_arguments()
                return 0 if tok in self.ev.pass_.undefined else None
            return self.ev.ident(tok)
        raise ValueError(tok)
