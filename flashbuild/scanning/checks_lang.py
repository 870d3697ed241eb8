"""C++ that one host compiler rejects although GCC 12 accepts it, and headers that no folder of
the build holds (issue 30).

Per file, on the parse and preprocessor state `checks_cxx` made (`_Ctx`):

* FB113: `M_PI` and the other `M_` constants with no `_USE_MATH_DEFINES` before MSVC's
  `<math.h>` (Windows).
* FB122: GNU inline assembly in code cl.exe compiles (Windows); `asm()` in device code is PTX
  for nvcc and fine.
* FB114: designated initialisers; whether the build compiles the file below C++20 is decided
  tree-wide (`standards`), from the flags the build has.
* FB115: a constexpr local used as a template argument inside a lambda that captures it
  (MSVC's C2975).
* FB116: `c_str()` of a `std::filesystem::path`, which is `const wchar_t*` on Windows.
* the includes and fixed-width integer uses FB117 and FB118 read tree-wide.

Tree-wide: FB117 (a unit whose includes provide no `<cstdint>` under GCC 13) and FB118 (a
library header such as `<cudnn.h>` that neither the tree, the build's include folders nor this
machine's include folders hold).

Every rule fires on positive evidence only: what cannot be decided (a macro in a function's
head, a standard no flag names, an include a macro computes) gives no finding.
"""

from __future__ import annotations

import os
import posixpath
import re
import sysconfig
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashbuild import platforms
from flashbuild.scanning.facts import (
    CstdintFacts,
    DesignatedInitFacts,
    LibraryHeaderFacts,
    MathConstantFacts,
)
from flashbuild.scanning.findings import Category, Finding, Fix, Severity, Truth, source_line
from flashbuild.source import cxx
from flashbuild.source.hostinclude import host_compiler_pass
from flashbuild.source.pp import host_pass
from flashbuild.source.ppgraph import resolver

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from tree_sitter import Node

    from flashbuild.scanning.checks_cxx import _Ctx
    from flashbuild.scanning.findings import FileReport, ScanTarget
    from flashbuild.source.pp import Pass
    from flashbuild.source.reach import Reach
    from flashbuild.source.treemodel import TreeModel

#: Translation units only the host compiler compiles (nvcc is given .cu files).
HOST_ONLY = (".cpp", ".cc", ".cxx", ".c")
_CUDA = (".cu", ".cuh")


def host_of(path: str, platform: str) -> Pass:
    """The pass that compiles `path`'s host code: a plain host compile for a .cpp (no
    `__CUDACC__`), nvcc's host pass for anything nvcc may see."""
    return host_compiler_pass(platform) if path.endswith(HOST_ONLY) else host_pass(platform)


# --- FB113: math constants ---------------------------------------------------------------

#: The constants MSVC's <math.h> defines only under _USE_MATH_DEFINES (corecrt_math_defines.h).
MATH_CONSTANTS = ("M_E", "M_LOG2E", "M_LOG10E", "M_LN2", "M_LN10", "M_PI", "M_PI_2", "M_PI_4",
                  "M_1_PI", "M_2_PI", "M_2_SQRTPI", "M_SQRT2", "M_SQRT1_2")
MATH_PATTERN = r"(?P<mathc>\b(?:" + "|".join(MATH_CONSTANTS) + r")\b)"
_INCLUDE_LINE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*(?P<rest>[^\n]*)", re.MULTILINE)
_MATH_H = re.compile(r"^[<\"]math\.h[>\"]")
_CMATH = re.compile(r"^[<\"]cmath[>\"]")
#: torch's headers define _USE_MATH_DEFINES and include <math.h> again in places
#: (ATen/core/MT19937RNGEngine.h, PhiloxRNGEngine.h): a unit that includes them may get the
#: constants, by the order of its includes.
_TORCH_HEADER = re.compile(r"^[<\"](?:torch|ATen|c10)/")


def math_constants(ctx: _Ctx, sites: Iterable[tuple[Any, int, Node]]) -> None:
    """FB113, one finding per file at its first use of a constant MSVC leaves undefined.

    UCRT's <math.h> has no include guard around the constants: it adds them whenever it is
    included with _USE_MATH_DEFINES defined, while <cmath> is read once. So a define in the
    file counts when a <math.h> include follows it, or a <cmath> include that is the unit's
    first (not in a .cu file: nvcc's cuda_runtime.h includes <cmath> before its first line),
    or when it comes before the file's first include."""
    host = host_of(ctx.file.path, "windows")
    used: dict[str, int] = {}
    for m, start, node in sites:
        name = m.group(0)
        if node.type != "identifier" or ctx.active(node, host) == 0:
            continue
        if name in ctx.defines or name in ctx.inherited:
            continue  # the tree defines the constant itself (`#ifndef M_PI #define M_PI …`)
        used.setdefault(name, start)
    if not used:
        return
    text = ctx.file.text
    cuda = ctx.file.path.endswith(_CUDA)
    incs = [(text.count("\n", 0, m.start()) + 1, m["rest"].strip())
            for m in _INCLUDE_LINE.finditer(text)]
    late = ""
    own = ctx.defines.get("_USE_MATH_DEFINES")
    if own:
        line = min(d.line for d in own)
        after = [rest for n, rest in incs if n > line]
        if any(_MATH_H.match(r) for r in after) or (not cuda and (
                any(_CMATH.match(r) for r in after) or all(n > line for n, _r in incs))):
            return
        late = (f"; _USE_MATH_DEFINES is defined at line {line}, but no <math.h> is included "
                "after it" + (" (nvcc's cuda_runtime.h includes <math.h> and <cmath> before "
                              "the file's first line)" if cuda else
                              ", nor <cmath>, and other headers come before it"))
    elif "_USE_MATH_DEFINES" in ctx.inherited:
        return  # a header of the tree defines it: the order of includes decides, not known
    names = sorted(used, key=lambda n: used[n])
    shown = ", ".join(f"`{n}`" for n in names[:4])
    ctx.add(used[names[0]], "FB113", Category.POSIX, Severity.ERROR,
            f"{shown} {'is' if len(names) == 1 else 'are'} undefined with MSVC unless "
            "_USE_MATH_DEFINES is defined before <math.h>: cl stops with C2065",
            f"{shown} used; no _USE_MATH_DEFINES in the file or its headers" + late,
            Fix(manual="define _USE_MATH_DEFINES for the build (CMake "
                "add_compile_definitions(_USE_MATH_DEFINES); setup.py define_macros="
                "[('_USE_MATH_DEFINES', None)] or -D_USE_MATH_DEFINES)"),
            MathConstantFacts(names=tuple(names[:4])))


def math_constants_with_torch(findings: Sequence[Finding], reports: Sequence[FileReport],
                              include_dirs: Sequence[str] = ()) -> list[Finding]:
    """FB113 in a file that some file including it reaches torch's headers through (or that
    includes them itself) is a note: those headers define _USE_MATH_DEFINES and include
    <math.h> again, so the constants may exist at the use (flash-attention's softmax.h builds
    on Windows this way)."""
    hits = [f for f in findings if f.rule == "FB113" and f.severity is Severity.ERROR]
    if not hits:
        return list(findings)
    by_path = {r.path: r for r in reports}
    resolve = resolver(list(by_path), include_dirs)
    reached: dict[str, str] = {}
    for path in sorted(by_path):
        closure, _outside, torch = _closure(path, by_path, resolve, _TORCH_HEADER)
        if torch:
            for member in closure:
                reached.setdefault(member, path)
    out: list[Finding] = []
    for f in findings:
        via = reached.get(f.path) if f in hits else None
        out.append(replace(
            f, severity=Severity.NOTE,
            evidence=f"{f.evidence}; but {via} reaches torch's headers, which define it and "
            "include <math.h> again (ATen/core/MT19937RNGEngine.h): the order of includes "
            "decides") if via else f)
    return out


# --- FB122: GNU inline assembly ---------------------------------------------------------

ASM_PATTERN = r"(?P<asm>\b(?:__asm__|__asm|asm)\b)"
#: PTX has a dot in nearly every instruction (`mov.u32`, `ld.global.nc`, `mma.sync`); the few
#: without one end in `;`. x86 assembly (`rdtsc`, `pause`, `cpuid`, "" with a memory clobber)
#: has neither.
_PTX = re.compile(r"\b[a-z][a-z0-9_]*\.[a-z0-9]|\b(?:trap|exit|brkpt|pmevent|nanosleep)\b")
_MACRO_WORD = re.compile(r"\b[A-Z_][A-Z0-9_]{2,}\b")


def inline_asm(ctx: _Ctx, sites: Iterable[tuple[Any, int, Node]]) -> None:
    """FB122: `asm(...)` / `__asm__ volatile(...)` in code certainly compiled by cl.exe."""
    host = host_of(ctx.file.path, "windows")
    seen: set[int] = set()
    for _m, _start, node in sites:
        asm: Node | None = node
        while asm is not None and asm.type != "gnu_asm_expression":
            asm = asm.parent if asm.type in ("asm", "__asm__", "__asm", "ERROR") else None
        if asm is None or asm.start_byte in seen:
            continue
        seen.add(asm.start_byte)
        if ctx.active(asm, host) == 0:
            continue
        where = _host_code(ctx, asm)
        if not where:
            continue
        code = " ".join(ctx.src.node_text(asm).split())
        ctx.add(asm.start_byte, "FB122", Category.GCC, Severity.ERROR,
                "GNU inline assembly in host code: cl.exe has no inline assembler for x64",
                f"`{code[:80]}` in {where}",
                Fix(manual="use the MSVC intrinsic behind #ifdef _MSC_VER (__rdtsc, _mm_pause, "
                    "__cpuid; std::atomic_signal_fence for an empty asm with a \"memory\" "
                    "clobber), or move it to device code or a .asm file"))


def _host_code(ctx: _Ctx, asm: Node) -> str:
    """Where an asm statement sits when that is certainly host code ("" when it is device code
    or cannot be told): a .cpp file, or a host function (`host_function`) with no PTX in the
    asm's text."""
    if ctx.file.path.endswith(HOST_ONLY):
        return f"a {posixpath.splitext(ctx.file.path)[1]} file, which only the host compiler " \
            "compiles"
    template = next((c for c in asm.named_children if c.type in ("string_literal",
                                                                  "concatenated_string")),
                    None)
    if template is None or _PTX.search(ctx.src.node_text(template)):
        return ""
    return host_function(ctx, asm)


_DEVICE_VARIABLE = re.compile(r"\b__(?:device|constant|shared|managed|global)__\b")


def host_function(ctx: _Ctx, node: Node) -> str:
    """Where `node` sits when that is certainly host code (`host function f`, `file scope`,
    `a .cpp file`), or "" when it is device code or cannot be told: a function or
    lambda whose head says `__device__`/`__global__` (without `__host__`), or holds a macro
    the tree does not define without them (CUTLASS_DEVICE, a vendored library's), or a
    `__device__`/`__constant__` variable. cl.exe never sees a device function's body."""
    if ctx.file.path.endswith(HOST_ONLY):
        return f"a {posixpath.splitext(ctx.file.path)[1]} file"
    n: Node | None = node.parent
    while n is not None and n.type != "function_definition":
        if n.type == "lambda_expression":
            body = n.child_by_field_name("body")
            head = ctx.src.slice(n.start_byte, body.start_byte if body else n.end_byte)
            if "__device__" in head or not _known_host_words(ctx, head):
                return ""
        n = n.parent
    if n is None:
        top: Node = node
        while top.parent is not None and top.parent.type not in ("translation_unit",
                                                                  "declaration_list"):
            top = top.parent
        text = ctx.src.slice(top.start_byte, node.start_byte)
        return "" if _DEVICE_VARIABLE.search(text) or not _known_host_words(ctx, text) \
            else "file scope"
    body = n.child_by_field_name("body")
    head = ctx.src.slice(n.start_byte, body.start_byte if body else n.end_byte)
    if "__global__" in head or ("__device__" in head and "__host__" not in head):
        return ""
    if not _known_host_words(ctx, head):
        return ""
    name = cxx.declared_name(n.child_by_field_name("declarator"))
    return f"host function `{ctx.src.node_text(name) if name else '?'}`"


def _known_host_words(ctx: _Ctx, head: str) -> bool:
    """Whether every macro-like word of a function head is a macro the tree defines without
    `__device__`/`__global__` (CUTLASS_DEVICE and friends make a function device code)."""
    for word in set(_MACRO_WORD.findall(head)):
        bodies = [d.body for d in ctx.defines.get(word, ())] + \
            [b for b, _c, _w in ctx.inherited.get(word, ())]
        if not bodies or any(("__device__" in b and "__host__" not in b) or "__global__" in b
                             for b in bodies):
            return False
    return True


# --- FB114: designated initialisers -----------------------------------------------------

_DESIGNATOR_HINT = re.compile(r"[{,]\s*\.[A-Za-z_]\w*\s*=[^=]")


def designated_initializers(ctx: _Ctx) -> None:
    """FB114 candidates: each braced list that opens with a `.field = value` designator in
    host-compiled C++ (a C file has had them since C99). The tree-wide pass keeps them only
    when the build compiles the file below C++20."""
    if ctx.file.path.endswith(".c") or not _DESIGNATOR_HINT.search(ctx.file.text):
        return
    host = host_of(ctx.file.path, "windows")
    path = ctx.file.path
    language = "CUDA" if path.endswith(_CUDA) else "CXX" if path.endswith(HOST_ONLY) else "any"
    seen: set[int] = set()
    for pair in cxx.nodes_of_type(ctx.src.root, ("initializer_pair",)):
        lst = pair.parent
        if lst is None or lst.id in seen or not any(d.type == "field_designator"
                                                    for d in pair.children):
            continue
        seen.add(lst.id)  # one finding per braced list, at its first designator
        if not host_function(ctx, pair) or ctx.active(pair, host) == 0:
            continue
        text = " ".join(ctx.src.node_text(pair).split())
        ctx.add(pair.start_byte, "FB114", Category.MSVC_CXX, Severity.ERROR,
                "designated initialiser: MSVC accepts it only from /std:c++20 (C7555)",
                f"`{text[:60]}` in a braced initialiser list",
                Fix(manual="build with C++20 (-std=c++20, which torch 2.14 and later need "
                    "anyway), or initialise the members by position or by assignment"),
                DesignatedInitFacts(language=language))


@dataclass(frozen=True)
class Standard:
    """A C++ standard the build asks for, and where."""

    language: str
    """`CXX`, `CUDA` or `any` (a flag given to every compiler)."""
    year: int
    where: str
    by_build: bool = False
    """Read from the configured build (`truth = build`), not from the build files' text."""


#: `-std=c++17`, `--std=gnu++14`, `/std:c++17`, `-std:c++latest` (nvcc takes `--std c++17`).
_STD = re.compile(r"(?:^|[\s,=\"'])(?:--?std[=\s]\s*|[/-]std:)(?:c|gnu)?\+\+(?P<v>latest|\w+)")
_YEARS = {"98": 1998, "03": 2003, "11": 2011, "0x": 2011, "14": 2014, "1y": 2014, "17": 2017,
          "1z": 2017, "20": 2020, "2a": 2020, "23": 2023, "2b": 2023, "26": 2026, "2c": 2026,
          "latest": 2026}


def std_year(flags: Iterable[str]) -> tuple[int, str] | None:
    """The C++ standard a list of compiler flags asks for (year, the flag as written), the
    last one when several do; None when none does."""
    found = None
    for m in _STD.finditer(" ".join(flags)):
        year = _YEARS.get(m["v"])
        if year is not None:
            found = (year, m.group(0).strip(" ,=\"'"))
    return found


def standards(reports: Sequence[FileReport], reach: Reach | None,
              model: TreeModel | None) -> tuple[Standard, ...]:
    """The C++ standards the build asks for: the configured build's flags per unit (when they
    name one: CMake keeps its own standard flag apart), else setup.py's flags per extension,
    else the CMake files' settings (`CMAKE_CXX_STANDARD`,
    `cxx_std_17`, a `-std=` option); empty when nothing names one (then torch or the compiler
    chooses, which the scan does not guess)."""
    out: list[Standard] = []
    if model is not None:
        for target in model.targets:
            for unit in target.sources:
                found = std_year(unit.flags)
                if found:
                    out.append(Standard(unit.language, found[0],
                                        f"`{found[1]}` for {unit.path} ({model.via})",
                                        by_build=True))
        if out:
            return tuple(out)
    setup = reach.setup if reach is not None else None
    if setup is not None:
        for ext in setup.built_for_target():
            for language, flags in (("CXX", ext.cxx_flags), ("CUDA", ext.nvcc_flags)):
                found = std_year(flags)
                if found:
                    out.append(Standard(language, found[0], f"`{found[1]}` in "
                                        f"{setup.path}:{ext.nvcc_line or ext.line}"))
        return tuple(out)
    for r in reports:
        out.extend(Standard(lang, year, where) for lang, year, where in
                   r.facts.get("standards", ()))
    return tuple(out)


def below_cxx20(finding: Finding, language: str, known: Sequence[Standard]) -> Finding | None:
    """FB114 kept, with the standard in its evidence, when every standard the build names for
    the file's language is older than C++20; dropped when none is named or one is 20+."""
    relevant = [s for s in known if language == "any" or s.language in (language, "any")]
    if not relevant or max(s.year for s in relevant) >= 2020:
        return None
    first = min(relevant, key=lambda s: s.year)
    more = f" and {len(relevant) - 1} more" if len(relevant) > 1 else ""
    return replace(finding, evidence=f"{finding.evidence}; compiled as "
                   f"C++{first.year % 100:02d} ({first.where}{more})",
                   truth=Truth.BUILD if first.by_build else finding.truth)


# --- FB115: constexpr locals in capturing lambdas --------------------------------------

#: A lambda that captures: `[&]`, `[=]`, `[&, x]`, `[N]`.
_CAPTURE_HINT = re.compile(r"\[\s*(?:[&=]|&?\s*[A-Za-z_]\w*\s*[,\]])")


def constexpr_captures(ctx: _Ctx) -> None:
    """FB115: `constexpr T N = …;` (not static) in a function body, then `f<…, N, …>` inside a
    lambda of that body that captures by default (`[&]`, `[=]`) or names N: MSVC makes the
    captured N a non-constant (C2975). A lambda with no capture does not capture N at all."""
    text = ctx.file.text
    if "constexpr" not in text or not _CAPTURE_HINT.search(text):
        return
    host = host_of(ctx.file.path, "windows")
    capturing = [lam for lam in cxx.nodes_of_type(ctx.src.root, ("lambda_expression",))
                 if _capture_spec(lam) is not None]
    if not capturing:
        return
    reported: set[int] = set()
    for qualifier in cxx.nodes_of_type(ctx.src.root, ("type_qualifier",)):
        decl = qualifier.parent
        if decl is None or decl.type != "declaration" or \
                ctx.src.node_text(qualifier) != "constexpr":
            continue
        if any(c.type == "storage_class_specifier" and ctx.src.node_text(c) == "static"
               for c in decl.children):
            continue
        scope = decl.parent
        if scope is None or scope.type != "compound_statement" or \
                not host_function(ctx, decl) or ctx.active(decl, host) == 0:
            continue
        inside = [lam for lam in capturing if lam.start_byte >= decl.end_byte
                  and lam.end_byte <= scope.end_byte]
        if not inside:
            continue
        for init in (c for c in decl.named_children if c.type == "init_declarator"):
            name_node = _name_of(init.child_by_field_name("declarator"))
            if name_node is None:
                continue
            name = ctx.src.node_text(name_node)
            use = _template_use_in_lambda(ctx, inside, scope, name)
            if use is None or use[0].start_byte in reported:
                continue
            arg, lam = use
            reported.add(arg.start_byte)
            ctx.add(arg.start_byte, "FB115", Category.MSVC_CXX, Severity.WARNING,
                    f"`{name}` is a constexpr local captured by a lambda and used as a template "
                    "argument there: MSVC rejects it (C2975, expected compile-time constant "
                    "expression)",
                    f"`{name}` declared constexpr at line {ctx.src.line_of(decl.start_byte)}; "
                    f"the lambda at line {ctx.src.line_of(lam.start_byte)} captures with "
                    f"`{ctx.src.node_text(_capture_spec(lam) or lam)}`",
                    Fix(manual=f"declare it `static constexpr` (or make `{name}` a template "
                        "parameter, or declare the constant inside the lambda)"))


def _capture_spec(lam: Node) -> Node | None:
    """The capture list of a lambda that captures something (`[&]`, `[=]`, `[N]`); None for
    `[]`."""
    capture = lam.child_by_field_name("captures")
    return capture if capture is not None and capture.named_child_count else None


def _template_use_in_lambda(ctx: _Ctx, lambdas: Sequence[Node], scope: Node, name: str
                            ) -> tuple[Node, Node] | None:
    """The first template argument spelled `name` inside one of `lambdas` whose innermost
    lambda captures it, with that lambda; None when there is none."""
    for outer in lambdas:
        for lst in cxx.nodes_of_type(outer, ("template_argument_list",)):
            arg = next((a for a in lst.named_children
                        if ctx.src.node_text(a).strip() == name), None)
            if arg is None:
                continue
            lam = _innermost_lambda(arg, scope)
            if lam is None or _declares(ctx, lam, name) or not _captures(ctx, lam, name):
                continue
            return arg, lam
    return None


def _innermost_lambda(node: Node, stop: Node) -> Node | None:
    n: Node | None = node.parent
    while n is not None and n.id != stop.id:
        if n.type == "lambda_expression":
            return n
        n = n.parent
    return None


def _declares(ctx: _Ctx, lam: Node, name: str) -> bool:
    """Whether the lambda declares `name` itself (a parameter, a local that shadows it)."""
    for decl in cxx.nodes_of_type(lam, ("init_declarator", "parameter_declaration",
                                        "optional_parameter_declaration")):
        declared = _name_of(decl.child_by_field_name("declarator"))
        if declared is not None and ctx.src.node_text(declared) == name:
            return True
    return False


def _captures(ctx: _Ctx, lam: Node, name: str) -> bool:
    capture = lam.child_by_field_name("captures")
    if capture is None:
        return False
    if any(c.type == "lambda_default_capture" for c in capture.children):
        return True
    return any(ctx.src.node_text(c).lstrip("&").strip() == name for c in capture.named_children)


# --- FB116: std::filesystem::path::c_str() ----------------------------------------------

_PATH_TYPE = re.compile(r"^(?:::)?(?:std::)?(?:experimental::)?(?:filesystem|fs)::path$|"
                        r"^(?:::)?boost::filesystem::path$")
#: Callees that take a wide string: the Windows `…W` API, the CRT's `_w…` functions.
_WIDE_CALLEE = re.compile(r"(?:^|::)(?:_w\w+|\w+W|wcs\w+|std::wstring|wstring)$")


def path_c_str(ctx: _Ctx) -> None:
    """FB116: `p.c_str()` or `p.native().c_str()` where `p` is declared a filesystem path in
    the same function or at file scope, not handed to a wide-string function."""
    text = ctx.file.text
    if "c_str" not in text or "path" not in text:
        return
    host = host_of(ctx.file.path, "windows")
    for member in cxx.nodes_of_type(ctx.src.root, ("field_identifier",)):
        field = member.parent
        call = field.parent if field is not None else None
        if ctx.src.node_text(member) != "c_str" or field is None or \
                field.type != "field_expression" or call is None or \
                call.type != "call_expression":
            continue
        receiver = field.child_by_field_name("argument")
        name = _path_receiver(ctx, receiver, call)
        if name is None or ctx.active(call, host) == 0 or not host_function(ctx, call):
            continue
        callee = _outer_callee(ctx, call)
        if callee is not None and _WIDE_CALLEE.search(callee):
            continue
        code = ctx.src.node_text(call)
        ctx.add(call.start_byte, "FB116", Category.MSVC_CXX, Severity.WARNING,
                f"`{code}` is `const wchar_t*` on Windows (a path holds wchar_t there): "
                "it does not convert to `const char*`",
                f"`{name}` is declared a filesystem path"
                + (f"; the result goes to `{callee}`" if callee else ""),
                Fix(manual=f"use `{name}.string().c_str()` for a char string (or the wide "
                    "API on Windows)"))


def _path_receiver(ctx: _Ctx, receiver: Node | None, call: Node) -> str | None:
    """The name of the path `c_str()` is called on (`p`, or `p` of `p.native()`), when it is
    declared a filesystem path; None otherwise."""
    if receiver is not None and receiver.type == "call_expression":
        inner = receiver.child_by_field_name("function")
        if inner is not None and inner.type == "field_expression":
            member = inner.child_by_field_name("field")
            if member is not None and ctx.src.node_text(member) == "native":
                receiver = inner.child_by_field_name("argument")
        elif inner is not None and _PATH_TYPE.match("".join(ctx.src.node_text(inner).split())):
            return ctx.src.node_text(inner)  # `std::filesystem::path(s).c_str()`
    if receiver is None or receiver.type != "identifier":
        return None
    name = ctx.src.node_text(receiver)
    return name if _declared_path(ctx, name, call) else None


def _declared_path(ctx: _Ctx, name: str, use: Node) -> bool:
    """Whether `name` is declared with a filesystem path type in the function around `use`
    (its parameters or body) or at file scope."""
    fn: Node | None = use.parent
    while fn is not None and fn.type != "function_definition":
        fn = fn.parent
    scopes = [fn] if fn is not None else []
    scopes.append(ctx.src.root)
    for scope in scopes:
        for decl in cxx.nodes_of_type(scope, ("declaration", "parameter_declaration",
                                              "field_declaration")):
            if scope.id == ctx.src.root.id and _inside_function(decl):
                continue
            type_node = decl.child_by_field_name("type")
            if type_node is None:
                continue
            spelled = "".join(ctx.src.node_text(type_node).split())
            for d in decl.children_by_field_name("declarator"):
                value = d.child_by_field_name("value") if d.type == "init_declarator" else None
                declared = _name_of(d.child_by_field_name("declarator")
                                    if d.type == "init_declarator" else d)
                if declared is None or ctx.src.node_text(declared) != name:
                    continue
                if _PATH_TYPE.match(spelled):
                    return True
                if spelled == "auto" and value is not None and _PATH_TYPE.match(
                        "".join(ctx.src.node_text(value).split("(")[0].split())):
                    return True
    return False


def _name_of(declarator: Node | None) -> Node | None:
    """The name a declarator declares, through `&`/`&&` (which carry no field in the
    grammar) as well as what `cxx.declared_name` unwraps."""
    while declarator is not None and declarator.type == "reference_declarator":
        declarator = declarator.named_children[-1] if declarator.named_children else None
    return cxx.declared_name(declarator)


def _inside_function(node: Node) -> bool:
    n: Node | None = node.parent
    while n is not None:
        if n.type in ("function_definition", "lambda_expression"):
            return True
        n = n.parent
    return False


def _outer_callee(ctx: _Ctx, call: Node) -> str | None:
    """The function a call's result is passed to (`fopen` of `fopen(p.c_str(), "r")`)."""
    parent = call.parent
    if parent is None or parent.type != "argument_list" or parent.parent is None:
        return None
    fn = parent.parent.child_by_field_name("function")
    return "".join(ctx.src.node_text(fn).split()) if fn is not None else None


# --- per-file facts for FB117 and FB118 ----------------------------------------------------

#: The fixed-width names, found by their literal `int` (a pattern that opens with a literal is
#: searched in C; one that opens with `\b(?:std::)?u?` is tried at every position). Which
#: spellings need <cstdint> is decided by what precedes the match (`_int_use`).
_INT_NAME = re.compile(r"int(?:8|16|32|64|ptr|max|_least\d+|_fast\d+)_t\b")
_TYPEDEF_WORD = re.compile(r"(?:typedef|using)\b")
_TYPEDEF_NAME = re.compile(r"\b(u?int\w*_t)\s*(?:;|=)")


def _int_use(text: str, m: re.Match[str]) -> str | None:
    """The spelling at an `_INT_NAME` match that needs <cstdint>: `std::` anything, or an
    unqualified `uintN_t`/`uintptr_t`. glibc's <sys/types.h>, which its <stdlib.h> includes
    when _GNU_SOURCE is on (g++ turns it on), declares the signed intN_t: they are left
    out, as is a name another namespace qualifies (`cute::int32_t`)."""
    start = m.start()
    unsigned = start > 0 and text[start - 1] == "u"
    begin = start - 1 if unsigned else start
    before = text[begin - 1] if begin > 0 else ""
    if before.isalnum() or before == "_":
        return None
    name = ("u" if unsigned else "") + m.group(0)
    if text.endswith("std::", 0, begin):
        return f"std::{name}"
    if before == ":" or not unsigned or "least" in name or "fast" in name or "max" in name:
        return None
    return name


def _int_typedefs(text: str) -> set[str]:
    """The fixed-width names a file declares itself (`typedef unsigned uint32_t;`)."""
    out: set[str] = set()
    for m in _TYPEDEF_WORD.finditer(text):
        if m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] == "_"):
            continue
        end = text.find(";", m.end(), m.end() + 300)
        found = _TYPEDEF_NAME.search(text, m.end(), end + 1 if end >= 0 else m.end() + 300)
        if found:
            out.add(found[1])
    return out


def wants_parse(text: str) -> bool:
    """Whether a file none of `checks_cxx`'s candidates matched still holds something these
    rules read (a fixed-width type in a header with no include, a designator, a c_str)."""
    return bool(_INT_NAME.search(text) or _DESIGNATOR_HINT.search(text)) or \
        "c_str" in text or ("constexpr" in text and bool(_CAPTURE_HINT.search(text)))


def include_facts(ctx: _Ctx) -> None:
    """What FB117/FB118 read tree-wide: every `#include` of the file as written (`(spelled,
    line, certainly compiled)`; a computed include is spelled ""), the first use of each
    fixed-width type that needs <cstdint>, and the ones the file typedefs itself."""
    text = ctx.file.text
    host = host_of(ctx.file.path, ctx.target.platform)
    includes: list[tuple[str, int, bool]] = []
    line, pos = 1, 0
    for m in _INCLUDE_LINE.finditer(text):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        rest = m["rest"].strip()
        spelled = re.match(r"^([<\"])([^>\"]+)[>\"]", rest)
        header = spelled[2].strip() if spelled else ""
        active = True
        if header in LIBRARY_HEADERS:
            # Only FB118 asks whether the include is certainly compiled (an optional library
            # behind `#ifdef USE_NCCL` is not required); the parse is asked for these alone.
            start = ctx.byte(m.start())
            node = ctx.node_at(start, start + 1)
            if any(a.type == "comment" for a in _self_and_ancestors(node)):
                continue
            active = ctx.active(node, host) == 1
        includes.append((f"{spelled[1]}{header}" if spelled else "", line, active))
    ctx.report.facts["includes"] = includes
    uses: dict[str, tuple[int, int]] = {}
    for m in _INT_NAME.finditer(text):
        name = _int_use(text, m)
        if name is None or name in uses:
            continue
        begin = m.start() - (len(name) - len(m.group(0)))
        start = ctx.byte(begin)
        node = ctx.node_at(start, start + len(name))
        if not ctx.in_code(node) or any(a.type == "preproc_include"
                                        for a in _self_and_ancestors(node)) or \
                ctx.active(node, host) == 0:
            continue
        uses[name] = ctx.pos(start)
    if uses:
        ctx.report.facts["int_uses"] = sorted((n, line, col) for n, (line, col) in uses.items())
    own = _int_typedefs(text)
    if own:
        ctx.report.facts["int_typedefs"] = sorted(own)


def _self_and_ancestors(node: Node) -> Iterator[Node]:
    n: Node | None = node
    while n is not None:
        yield n
        n = n.parent


# --- FB117: <cstdint> under GCC 13 ---------------------------------------------------------

#: Headers that declare the fixed-width types.
CSTDINT = frozenset({"cstdint", "stdint.h", "cinttypes", "inttypes.h"})
#: Standard headers a unit may include and still get no <cstdint> from libstdc++ 13 (its
#: porting notes: <string>, <system_error> and others stopped including it). A unit that
#: includes any other outside header (<memory>, <atomic>, <random>, <chrono>, torch's,
#: CUDA's, a POSIX header) is not judged: one of those may declare the types.
PLAIN_STD = frozenset({
    "string", "string_view", "vector", "array", "deque", "list", "forward_list", "map", "set",
    "unordered_map", "unordered_set", "queue", "stack", "iostream", "istream", "ostream",
    "sstream", "fstream", "iosfwd", "iomanip", "ios", "streambuf", "stdexcept",
    "system_error", "exception", "utility", "tuple", "optional", "variant", "any",
    "functional", "algorithm", "numeric", "iterator", "type_traits", "limits",
    "initializer_list", "new", "typeinfo", "cassert", "cstddef", "cstdio", "cstdlib",
    "cstring", "cmath", "cctype", "cerrno", "climits", "cfloat", "assert.h", "stddef.h",
    "stdio.h", "stdlib.h", "string.h", "math.h", "ctype.h", "errno.h", "limits.h", "float.h"})


def cstdint_findings(reports: Sequence[FileReport], target: ScanTarget,
                     compiled: Callable[[str], bool], read: Callable[[str], str | None],
                     include_dirs: Sequence[str] = ()) -> list[Finding]:
    """FB117 for each compiled host-only unit (.cpp/.cc/.cxx) whose includes, followed
    through the tree, reach no <cstdint>/<stdint.h> and no outside header other than
    `PLAIN_STD`, at the first use of a fixed-width type in each file of that closure. A
    warning for Linux (GCC 13 and later stop there); a note for Windows (MSVC's library
    includes <cstdint> from its containers, so only the Linux build breaks)."""
    by_path = {r.path: r for r in reports}
    resolve = resolver(list(by_path), include_dirs)
    flagged: dict[str, Finding] = {}
    for unit in sorted(p for p in by_path if p.endswith((".cpp", ".cc", ".cxx"))):
        if not compiled(unit):
            continue
        closure, outside, _torch = _closure(unit, by_path, resolve)
        # A unit with no outside header at all would not compile anywhere: its includes were
        # misread, so it is not judged.
        if not outside or outside & CSTDINT or not outside <= PLAIN_STD:
            continue
        own = {n for p in closure for n in by_path[p].facts.get("int_typedefs", ())}
        for path in closure:
            uses = [u for u in by_path[path].facts.get("int_uses", ())
                    if u[0].removeprefix("std::") not in own]
            if not uses or path in flagged:
                continue
            first = min(uses, key=lambda u: (u[1], u[2]))
            names = ", ".join(f"`{u[0]}`" for u in sorted(uses, key=lambda u: u[1])[:3])
            shown = ", ".join(f"<{h}>" for h in sorted(outside)[:4]) or "no outside header"
            text = read(path) or ""
            flagged[path] = Finding(
                rule="FB117", category=Category.INCLUDES, path=path, line=first[1],
                col=first[2], severity=Severity.WARNING if target.platform == "linux"
                else Severity.NOTE,
                message=f"{names} with no <cstdint>: GCC 13 and later stop with \"was not "
                "declared in this scope\"" + ("" if target.platform == "linux" else
                                              " (MSVC's library still declares them)"),
                evidence=f"unit {unit} includes {shown}, none of which declares them under "
                "libstdc++ 13 (static reading; not compiled)",
                snippet=source_line(text, first[1]) if text else "",
                fix=Fix(manual=f"add `#include <cstdint>` to {path}"),
                facts=CstdintFacts(names=tuple(u[0] for u in uses[:3]), unit=unit))
    return list(flagged.values())


def _closure(unit: str, by_path: Mapping[str, FileReport],
             resolve: Callable[[str, str], str | None], watch: re.Pattern[str] | None = None,
             ) -> tuple[list[str], set[str] | None, bool]:
    """The tree files `unit` includes (itself first), the outside headers they name (bare
    names; None when an include cannot be read: a macro computes it), and whether an include
    spelled as `watch` matches is among them."""
    closure = [unit]
    outside: set[str] | None = set()
    seen = {unit}
    watched = False
    i = 0
    while i < len(closure):
        for spelled, _line, _active in by_path[closure[i]].facts.get("includes", ()):
            if not spelled:
                outside = None
                continue
            watched = watched or bool(watch and watch.match(spelled))
            hit = resolve(closure[i], spelled[1:])
            if hit is None or hit not in by_path or spelled[1:] in CSTDINT:
                # <stdint.h> counts as declaring the types wherever it resolves (a tree may
                # hold a file of that name: the include still finds the types).
                if outside is not None:
                    outside.add(spelled[1:])
            elif hit not in seen:
                seen.add(hit)
                closure.append(hit)
        i += 1
    return closure, outside, watched


# --- FB118: library headers no folder holds ------------------------------------------------

@dataclass(frozen=True)
class Library:
    name: str
    key: str
    """The word its environment variables and CMake packages carry (`CUDNN_HOME`,
    `find_package(NCCL)`)."""
    packages: tuple[str, ...]


_CUDNN = Library("cuDNN", "CUDNN", ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12"))
_NVSHMEM = Library("NVSHMEM", "NVSHMEM", ("nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12"))
#: Headers of libraries that ship apart from the CUDA toolkit and torch.
LIBRARY_HEADERS: dict[str, Library] = {
    "cudnn.h": _CUDNN,
    "nccl.h": Library("NCCL", "NCCL", ("nvidia-nccl-cu13", "nvidia-nccl-cu12")),
    "mpi.h": Library("MPI", "MPI", ()),
    "cusparseLt.h": Library("cuSPARSELt", "CUSPARSELT",
                            ("nvidia-cusparselt-cu13", "nvidia-cusparselt-cu12")),
    "cutensor.h": Library("cuTENSOR", "CUTENSOR", ("cutensor-cu13", "cutensor-cu12")),
    "nvshmem.h": _NVSHMEM,
    "nvshmemx.h": _NVSHMEM,
    "cudss.h": Library("cuDSS", "CUDSS", ("nvidia-cudss-cu13", "nvidia-cudss-cu12")),
}


def machine_include_dirs(platform: str, env: Mapping[str, str]) -> tuple[Path, ...]:
    """The folders a compiler on this machine searches without being told, for a build of
    `platform` here: the toolkit's include folder, the compiler's own and its environment's
    (CPATH, INCLUDE), cuDNN's where torch's cpp_extension adds it (CUDNN_HOME); empty when
    the target is another platform (its machine is not this one)."""
    if platforms.current().name != platform:
        return ()
    out: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDNN_HOME", "CUDNN_PATH"):
        if env.get(var):
            out.append(Path(env[var]) / "include")
    for var in ("CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "INCLUDE"):
        out += [Path(p) for p in env.get(var, "").split(os.pathsep) if p]
    if platform == "linux":
        out += [Path("/usr/local/cuda/include"), Path("/usr/local/include"),
                Path("/usr/include")]
    return tuple(dict.fromkeys(out))


def wheel_include_dirs() -> tuple[Path, ...]:
    """The include folders of PyPI's nvidia-* wheels in this Python (`nvidia/<lib>/include`):
    they hold the header but no compiler searches them unless the build says so."""
    found: list[Path] = []
    for key in ("purelib", "platlib"):
        base = Path(sysconfig.get_paths()[key]) / "nvidia"
        if base.is_dir():
            found += sorted(p for p in base.glob("*/include") if p.is_dir())
    return tuple(dict.fromkeys(found))


def library_header_findings(  # noqa: PLR0917 - the tree-wide pass hands what it holds
        root: Path, reports: Sequence[FileReport], compiled: Callable[[str], bool],
        read: Callable[[str], str | None], reach: Reach | None, model: TreeModel | None,
        machine: Sequence[Path], wheels: Sequence[Path] = ()) -> list[Finding]:
    """FB118: one finding per library header (`LIBRARY_HEADERS`) that a compiled file includes
    unconditionally and that neither the tree, the build's include folders nor `machine`
    holds. A note when the build reads the library's place from the environment
    (`CUDNN_HOME`) or a CMake package finds it (`find_package(NCCL)`): then the machine
    decides."""
    sites: dict[str, list[tuple[str, int]]] = {}
    for r in sorted(reports, key=lambda r: r.path):
        for spelled, line, active in r.facts.get("includes", ()):
            header = spelled[1:]
            if header in LIBRARY_HEADERS and active and compiled(r.path):
                sites.setdefault(header, []).append((r.path, line))
    if not sites:
        return []
    tree_files = {r.path for r in reports}
    dirs = _build_include_dirs(root, reach, model)
    found_cmake = {w for r in reports for w in r.facts.get("find_packages", ())}
    env_reads = {name for name, _line in reach.setup.env_switches} \
        if reach is not None and reach.setup is not None else set()
    out: list[Finding] = []
    for header, where in sorted(sites.items()):
        lib = LIBRARY_HEADERS[header]
        if any(p == header or p.endswith(f"/{header}") for p in tree_files):
            continue
        holder = next((d for d in (*dirs, *machine) if (d / header).is_file()), None)
        if holder is not None:
            continue
        path, line = where[0]
        if any(lib.key in _words(w) for w in found_cmake):
            continue  # CMake's configure finds it (or stops there with its own message)
        env = sorted(n for n in env_reads if lib.key in _words(n))
        wheel = next((d for d in wheels if (d / header).is_file()), None)
        more = f" (and {len(where) - 1} more file(s))" if len(where) > 1 else ""
        looked = "the tree, the build's include folders" + (
            ", this machine's toolkit and system folders" if machine else "")
        pip = f"pip install {lib.packages[0]} (CUDA 13; {lib.packages[1]} for CUDA 12) and " \
            if lib.packages else ""
        evidence = (f"<{header}> is in none of {looked}{more}"
                    + (f"; it is in {wheel}, which no include folder names" if wheel else "")
                    + (f"; setup.py reads {', '.join(env)}" if env else ""))
        text = read(path) or ""
        out.append(Finding(
            rule="FB118", category=Category.INCLUDES, path=path, line=line, col=1,
            severity=Severity.NOTE if env else Severity.WARNING,
            message=f"<{header}> ({lib.name}) is not part of the CUDA toolkit nor torch: the "
            "compile stops with \"No such file or directory\" (C1083 with cl) unless the "
            "build is given its folder",
            evidence=evidence, snippet=source_line(text, line) if text else "",
            fix=Fix(manual=f"{pip}add its include folder to the build's include folders"
                    + (f" (or set {env[0]})" if env else "")),
            facts=LibraryHeaderFacts(header=header, library=lib.name, packages=lib.packages)))
    return out


def _words(name: str) -> set[str]:
    """`NCCL_INCLUDE_DIR` -> {NCCL, INCLUDE, DIR}: a library's key is a whole word of it."""
    return set(re.split(r"[^A-Z0-9]+", name.upper())) - {""}


def _build_include_dirs(root: Path, reach: Reach | None, model: TreeModel | None
                        ) -> list[Path]:
    """The include folders the build gives its units (tree-relative ones under `root`)."""
    spelled: list[str] = []
    if model is not None:
        spelled += [d for t in model.targets for u in t.sources for d in u.includes]
    if reach is not None:
        spelled += list(reach.include_dirs)
        spelled += [d for u in reach.units.values() for d in u.include_dirs]
        if reach.setup is not None:
            spelled += [d for e in reach.setup.extensions for d in e.include_dirs]
    out = [Path(d) if Path(d).is_absolute() else root / d for d in spelled]
    return list(dict.fromkeys(out))
