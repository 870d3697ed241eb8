"""C++/CUDA checks, on the tree-sitter-cuda parse shared with the transforms
(`flashbuild.source.cxx`).

Candidates are found by a regex over the text (fast, in C) and then judged on the parse: a
match inside a comment or a string is dropped (except PTX inside `asm`), and every site is
checked against the preprocessor branches around it for the compilation pass that matters
(the Windows host pass for POSIX/GCC problems, the target's device pass for arch problems),
with `flashbuild.source.pp`. Explicit instantiations are decided by the
`explicit-instantiations` transform's own public analysis, so scan reports exactly the sites
the transform touches or keeps: its per-file half (`file_facts`) runs here, in the worker, on
the parse the other checks use; its tree-wide half in `instantiation_findings`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flashbuild.arch import Arch, Suffix
from flashbuild.scanning import checks_lang as lang
from flashbuild.scanning import checks_toolkit as toolkit
from flashbuild.scanning.facts import (
    AllowListFacts,
    ArchBranchFacts,
    DlopenFacts,
    InstantiationFacts,
    InstructionFacts,
    PluginExportFacts,
    PosixHeaderFacts,
    RuntimeMajorFacts,
    SharedMemoryFacts,
    TreeCheck,
    WindowsMacroFacts,
)
from flashbuild.scanning.findings import (
    Category,
    FileReport,
    FileText,
    Finding,
    Fix,
    ScanTarget,
    Severity,
    source_line,
)
from flashbuild.scanning.placeholders import HINTS, file_bodies
from flashbuild.scanning.proposals import (
    DeriveTraits,
    ExcludeSources,
    GuardInstantiation,
    PortableDynamicLoading,
    ProposedStep,
    WidenArchCondition,
    arch_when,
)
from flashbuild.scanning.ptx_table import INSTRUCTIONS
from flashbuild.scanning.rules import RULES
from flashbuild.scanning.scan import read_source
from flashbuild.source import cxx
from flashbuild.source import instantiations as inst
from flashbuild.source.pp import NOT_DEFINED, Evaluator, Pass, device_pass, host_pass

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence
    from pathlib import Path

    from tree_sitter import Node

    from flashbuild.scanning.facts import Facts


POSIX_HEADERS = frozenset({"unistd.h", "sys/time.h", "sys/mman.h", "sys/resource.h",
                           "sys/wait.h", "sys/utsname.h", "sys/ioctl.h", "sys/socket.h",
                           "dirent.h", "pthread.h", "sched.h", "libgen.h", "strings.h"})
_ALTERNATIVES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"(?P<inc>#[ \t]*include[ \t]*[<\"](?P<hdr>[\w/.]+)[>\"])", ()),
    (r"(?P<ssize>\bssize_t\b)", ()), (r"(?P<i128>\b__int128(?:_t)?\b)", ()),
    (r"(?P<attr>\b__attribute__\b)", ()), (r"(?P<builtin>\b__builtin_\w+)", ()),
    (r"(?P<small>\bsmall\b)", ()), (r"(?P<minmax>\b(?:min|max)\b(?=\s*\())", ()),
    (r"(?P<eq>\b__CUDA_ARCH__\s*==\s*\d+|\b\d+\s*==\s*__CUDA_ARCH__\b)", ("__CUDA_ARCH__",)),
    (r"(?P<lt>\b__CUDA_ARCH__\s*<=?\s*\d+)", ("__CUDA_ARCH__",)),
    (r"(?P<err>#[ \t]*error\b)", ()),
    (r"(?P<major>(?:\b[\w.>-]*?\b)?\b(?:major|cc_major|sm_major|ccMajor)\s*==\s*\d+\b)",
     ("major", "Major")),
    (r"(?P<instr>\bwgmma\b|\btcgen05\b|kind::(?:f8f6f4|mxf4nvf4|mxf8f6f4|mxf4)\b|"
     r"\bsetmaxnreg\b|cp\.async\.bulk\.tensor)",
     ("wgmma", "tcgen05", "kind::", "setmaxnreg", "cp.async.bulk.tensor")),
    (r"(?P<smem>\b\w*(?:[Ss]mem|SMEM|[Ss]hared_?[Mm]em|SHARED_MEM|[Ss]hmem)\w*\s*=\s*[^;=])",
     ("smem", "Smem", "SMEM", "hared", "HARED", "hmem")),
    (r"(?P<externc>\bextern\s+\"C\")", ()),
    (r"(?P<dl>\bdl(?:open|sym)\b)", ()),
    (lang.MATH_PATTERN, ("M_",)),
    (lang.ASM_PATTERN, ("asm",)),
)
"""The candidate patterns, each with the substrings one of which any match must contain (empty:
always tried). One alternation finds them all left to right in one pass."""
#: Where any alternative can start: a `#`, the unanchored `kind::` / `cp.async.bulk.tensor`,
#: or a word boundary before a word character, `.`, `>` or `-` (every other alternative opens
#: with `\b`). A necessary condition of every alternative, so it changes no match; but `re`
#: tries each alternative at every position of the text, and this one lookahead turns most
#: positions (inside words, spaces) away at once: the candidate search, the costliest step of
#: the static scan on CUTLASS-sized trees, runs about 2.7 times as fast (49.7 MB of FlashRT's
#: C++ with its vendored code: 20.3 s → 7.4 s, the same matches).
_START = r"(?=#|kind::|cp\.async\.bulk\.tensor|\b[\w.>-])"


def _alternation(keep: Iterable[int]) -> re.Pattern[str]:
    return re.compile(_START + "(?:" + "|".join(_ALTERNATIVES[i][0] for i in keep) + ")")


_CANDIDATES = _alternation(range(len(_ALTERNATIVES)))


@functools.cache
def _candidates_without(dropped: frozenset[int]) -> re.Pattern[str]:
    return _alternation(i for i in range(len(_ALTERNATIVES)) if i not in dropped)


def _candidates_for(text: str) -> re.Pattern[str]:
    """`_CANDIDATES` less the costly alternatives that cannot match `text` (none of their
    gating substrings is in it). Same matches: an alternative that matches nowhere changes
    no other match. On the bench tree this cuts the candidate search by about a quarter (the
    lazy `major` and `smem` prefixes are otherwise tried at every word boundary)."""
    dropped = frozenset(i for i, (_p, gate) in enumerate(_ALTERNATIVES)
                        if gate and not any(g in text for g in gate))
    return _candidates_without(dropped) if dropped else _CANDIDATES


_SKIP_TYPES = frozenset({"comment", "string_literal", "raw_string_literal", "char_literal",
                         "string_content", "system_lib_string"})
_FUNCS = ("function_definition",)


def _snippet(file: FileText, line: int) -> str:
    return source_line(file.text, line)


@dataclass
class _Ctx:
    file: FileText
    src: cxx.Source
    target: ScanTarget
    report: FileReport
    defines: dict[str, list[cxx.MacroDef]]
    inherited: Mapping[str, list[tuple[str, tuple[tuple[str, bool], ...], str]]] = \
        field(default_factory=dict)
    """Macros the included headers define: name → [(body, conditions, where)]."""

    def __post_init__(self) -> None:
        self._memo: dict[tuple[str, int], int | None] = {}
        self._guards: dict[int, bool] = {}

    # --- positions -----------------------------------------------------------------
    def byte(self, char_offset: int) -> int:
        return len(self.file.text[:char_offset].encode("utf-8"))

    def node_at(self, start: int, end: int) -> Node:
        return self.src.root.descendant_for_byte_range(start, end) or self.src.root

    def pos(self, byte: int) -> tuple[int, int]:
        line = self.src.line_of(byte)
        col = len(self.src.slice(self.src.line_start(byte), byte)) + 1
        return line, col

    def in_code(self, node: Node) -> bool:
        n: Node | None = node
        while n is not None:
            if n.type in _SKIP_TYPES:
                return False
            n = n.parent
        return True

    # --- preprocessor ---------------------------------------------------------------
    def evaluator(self, pass_: Pass) -> Evaluator:
        """Conditions of this file in `pass_`, with its own and its headers' macros."""
        return Evaluator(pass_, lambda name: self._macro(name, pass_))

    def active(self, node: Node, pass_: Pass) -> int | None:
        """1 certainly compiled in `pass_`, 0 certainly not, None cannot tell."""
        ev = self.evaluator(pass_)
        value: int | None = 1
        for cond in cxx.enclosing_conditionals(self.src, node):
            if cond.directive in ("#ifdef", "#elifdef"):
                v = ev.defined(cond.condition)
            elif cond.directive in ("#ifndef", "#elifndef"):
                d = 0 if self._include_guard(cond, pass_) else ev.defined(cond.condition)
                v = None if d is None else int(not d)
            else:
                v = ev.eval(cond.condition)
            if cond.branch == "else":
                v = None if v is None else int(not v)
            if v == 0:
                return 0
            if v is None:
                value = None
        return value

    def _include_guard(self, cond: cxx.Conditional, pass_: Pass) -> bool:
        """`#ifndef X` followed by `#define X` (empty, or 1) as the block's first line, the
        only definition of X the file, its headers and the pass know: an include guard, taken
        the first time the compiler reads the file. A default value (`#define X 0`) or an X
        a header may define is left to the evaluator."""
        name = cond.condition
        if name in pass_.defined or name in pass_.undefined or name in self.inherited:
            return False
        if cond.start not in self._guards:
            defs = self.defines.get(name, [])
            self._guards[cond.start] = len(defs) == 1 and \
                defs[0].body.strip() in ("", "1") and \
                0 < defs[0].line - cond.line <= 2 and \
                any(c.start == cond.start for c in cxx.enclosing_conditionals(
                    self.src, self.node_at(defs[0].start, defs[0].start + 1)))
        return self._guards[cond.start]

    def undecided(self, node: Node, pass_: Pass) -> list[str]:
        """The macros of the conditions around `node` that evaluate to unknown."""
        ev = self.evaluator(pass_)
        out: list[str] = []
        for cond in cxx.enclosing_conditionals(self.src, node):
            if cond.directive in ("#ifdef", "#elifdef", "#ifndef", "#elifndef"):
                v = ev.defined(cond.condition)
            else:
                v = ev.eval(cond.condition)
            if v is None:
                names = re.findall(r"[A-Za-z_]\w*", cond.condition)
                out.extend(n for n in names if n != "defined" and n not in out and
                           n not in pass_.defined and n not in pass_.undefined)
        return out

    def _macro(self, name: str, pass_: Pass) -> str | None:
        defs = self.defines.get(name)
        if not defs:
            return self._inherited_macro(name, pass_)
        key = (name, id(pass_))
        if key in self._memo:
            return self._memo[key]  # type: ignore[return-value]
        self._memo[key] = None  # recursion guard
        bodies: list[str] = []
        unknown = False
        for d in defs:
            node = self.node_at(d.start, d.start + 1)
            act = self.active(node, pass_)
            if act == 1:
                bodies.append(d.body)
            elif act is None:
                unknown = True
        result: str | None
        if len(bodies) == 1 and not unknown:
            result = bodies[0]
        elif not bodies and not unknown:
            result = NOT_DEFINED
        else:
            result = None
        self._memo[key] = result  # type: ignore[assignment]
        return result

    def _inherited_macro(self, name: str, pass_: Pass) -> str | None:
        """A macro an included header defines, resolved for this pass: its body when exactly
        one definition is active, NOT_DEFINED when none can be, None when undecidable."""
        defs = self.inherited.get(name)
        if not defs:
            return None
        key = (name, id(pass_))
        if key in self._memo:
            return self._memo[key]  # type: ignore[return-value]
        self._memo[key] = None  # recursion guard
        ev = Evaluator(pass_, lambda n: self._macro(n, pass_))
        bodies: list[str] = []
        unknown = False
        for body, conds, _where in defs:
            state: int | None = 1
            for text, negated in conds:
                v = ev.eval(text)
                v = None if v is None else int(bool(v) != negated)
                if v == 0:
                    state = 0
                    break
                if v is None:
                    state = None
            if state == 1:
                bodies.append(body)
            elif state is None:
                unknown = True
        result: str | None
        if len(set(bodies)) == 1 and not unknown:
            result = bodies[0]
        elif not bodies and not unknown:
            result = NOT_DEFINED
        else:
            result = None
        self._memo[key] = result  # type: ignore[assignment]
        return result

    def host_compiled(self, node: Node) -> bool:
        """False inside a `__device__`/`__global__` function that is not also `__host__`:
        nvcc hands cl.exe/gcc a stub, so host-compiler problems do not apply there."""
        n: Node | None = node
        while n is not None:
            if n.type in _FUNCS:
                head = self.src.slice(n.start_byte, (n.child_by_field_name("body") or n)
                                      .start_byte)
                device = "__device__" in head or "__global__" in head
                return not device or "__host__" in head
            n = n.parent
        return True

    # --- output ---------------------------------------------------------------------
    def add(self, byte: int,  # noqa: PLR0917 - one call shape for every rule
            rule: str, category: Category, severity: Severity, message: str,
            evidence: str, fix: Fix, facts: Facts | None = None) -> None:
        line, col = self.pos(byte)
        self.report.findings.append(Finding(
            rule=rule, category=category, path=self.file.path, line=line, col=col,
            severity=severity, message=message, evidence=evidence,
            snippet=_snippet(self.file, line), fix=fix, facts=facts))


def context_for(file: FileText, target: ScanTarget, inherited: Any = None) -> _Ctx | None:
    """The parse and preprocessor state of one file, for the tree-wide call graph
    (`callgraph`); None when the file does not parse."""
    try:
        src = cxx.parse(file.text, file.path)
    except (ValueError, RecursionError):
        return None
    defines: dict[str, list[cxx.MacroDef]] = {}
    for macro in cxx.macro_definitions(src):
        defines.setdefault(macro.name, []).append(macro)
    return _Ctx(file, src, target, FileReport(file.path), defines, inherited or {})


def check_cxx(file: FileText, target: ScanTarget, inherited: Any = None) -> FileReport:
    report = FileReport(file.path)
    text = file.text
    matches = list(_candidates_for(text).finditer(text))
    bodies = any(h in text for h in HINTS)
    src = cxx.parse(text, file.path) if matches or bodies or lang.wants_parse(text) \
        or toolkit.wants(text) else None
    if target.platform == "windows":
        # The per-file half of the `explicit-instantiations` analysis, on this parse, in this
        # worker; `instantiation_findings` does the tree-wide half (only Windows needs it).
        report.facts["instantiations"] = inst.file_facts(file.path, text, src)
    if src is None:
        return report
    if "EXPORT" in text or "_API" in text or "dllexport" in text:
        report.facts["exported"] = sorted({m[1] for m in EXPORTED_DECL.finditer(text)})
    defines: dict[str, list[cxx.MacroDef]] = {}
    for macro in cxx.macro_definitions(src):
        defines.setdefault(macro.name, []).append(macro)
    ctx = _Ctx(file, src, target, report, defines, inherited or {})
    report.facts["dlsym"] = any(m.group(0) == "dlsym" for m, _s, _n in
                                _sites(ctx, [m for m in matches if m.lastgroup == "dl"]))
    windows = target.platform == "windows"
    host = host_pass(target.platform)
    groups: dict[str, list[re.Match[str]]] = {}
    for m in matches:
        assert m.lastgroup is not None
        groups.setdefault(m.lastgroup if m.lastgroup != "hdr" else "inc", []).append(m)
    lang.include_facts(ctx)
    toolkit.cub_debug_synchronous(ctx)
    toolkit.bare_conditions(ctx)
    toolkit.dispatch_type(ctx)
    toolkit.thc(ctx)
    toolkit.at_check(ctx)
    if windows:
        _posix_and_gcc(ctx, groups, host)
        _windows_macros(ctx, groups, host)
        _plugin_exports(ctx, groups, host)
        lang.math_constants(ctx, _sites(ctx, groups.get("mathc", [])))
        lang.inline_asm(ctx, _sites(ctx, groups.get("asm", [])))
        lang.designated_initializers(ctx)
        lang.constexpr_captures(ctx)
        lang.path_c_str(ctx)
    for arch in target.archs:
        dev = device_pass(target.platform, arch)
        _arch_gates(ctx, groups, arch, dev)
        _arch_ranges(ctx, groups, arch, dev)
        _instructions(ctx, groups, arch, dev)
        _smem(ctx, groups, arch, dev)
        if bodies:
            report.facts.setdefault("bodies", {})[arch.sm] = file_bodies(ctx, arch, dev)
    _runtime_major(ctx, groups)
    return report


def _sites(ctx: _Ctx, found: Sequence[re.Match[str]], *, code: bool = True
           ) -> Iterator[tuple[re.Match[str], int, Node]]:
    for m in found:
        start = ctx.byte(m.start())
        node = ctx.node_at(start, start + len(m.group(0).encode("utf-8")))
        if code and not ctx.in_code(node):
            continue
        yield m, start, node


def _includes(ctx: _Ctx, groups: Mapping[str, list[re.Match[str]]], pass_: Pass
              ) -> list[tuple[str, int, Node]]:
    out = []
    for m, start, node in _sites(ctx, groups.get("inc", []), code=False):
        if node.type == "comment" or ctx.active(node, pass_) == 0:
            continue
        out.append((m.group("hdr"), start, node))
    return out


def _posix_and_gcc(ctx: _Ctx, groups: Mapping[str, list[re.Match[str]]], host: Pass) -> None:
    calls = [(m.group(0), ctx.pos(s)[0]) for m, s, n in _sites(ctx, groups.get("dl", []))
             if ctx.active(n, host) != 0]
    for hdr, start, _node in _includes(ctx, groups, host):
        if hdr == "dlfcn.h":
            used = ", ".join(f"{name} (line {line})" for name, line in calls[:4])
            ctx.add(start, "FB101", Category.DYNAMIC_LOADING, Severity.ERROR,
                    "<dlfcn.h> does not exist on Windows",
                    f"#include <dlfcn.h>{'; calls ' + used if used else ''}",
                    Fix(transform="dynamic-loading",
                        params={"mode": "portable", "files": [ctx.file.path]},
                        step=PortableDynamicLoading(file=ctx.file.path, role="loader")),
                    DlopenFacts(calls=tuple(c[0] for c in calls)))
        elif hdr in POSIX_HEADERS:
            ctx.add(start, "FB110", Category.POSIX, Severity.ERROR,
                    f"<{hdr}> is POSIX-only; MSVC has no such header",
                    f"#include <{hdr}> in code the MSVC host pass compiles",
                    Fix(manual=f"remove <{hdr}> or put it behind `#ifndef _WIN32` with the "
                        "Windows equivalent"), PosixHeaderFacts(header=hdr))
    simple = {
        "ssize": ("FB111", Category.POSIX, "ssize_t is POSIX-only; MSVC has no ssize_t",
                  "use ptrdiff_t or int64_t (or SSIZE_T from <BaseTsd.h> on Windows)"),
        "i128": ("FB112", Category.GCC, "__int128 is a GCC/Clang extension MSVC lacks",
                 "use two 64-bit halves or _umul128/__umulh on MSVC"),
        "attr": ("FB120", Category.GCC, "GCC `__attribute__` syntax: cl.exe rejects it",
                 "wrap it in a macro: __declspec(...) (or nothing) on _MSC_VER"),
        "builtin": ("FB121", Category.GCC, "GCC builtin in host-compiled code: MSVC has none",
                    "use the MSVC intrinsic (e.g. _BitScanForward, __assume) behind "
                    "#ifdef _MSC_VER, or std:: equivalents"),
    }
    ev = ctx.evaluator(host)
    for group, (rule, cat, message, fix) in simple.items():
        for m, start, node in _sites(ctx, groups.get(group, [])):
            if ctx.active(node, host) == 0 or not ctx.host_compiled(node):
                continue
            name = m.group(0)
            if _defines_name(node) or ev.defined(name) == 1 or \
                    (group == "ssize" and _declares_type(ctx, name, host)):
                # The tree's own MSVC shim: `#define __builtin_popcount (int)__popcnt` or
                # `typedef SSIZE_T ssize_t;` under `#ifdef _MSC_VER` (pytorch3d's pulsar).
                continue
            ctx.add(start, rule, cat, Severity.ERROR, message,
                    f"`{name}` in code the MSVC host pass compiles", Fix(manual=fix))


def _defines_name(node: Node) -> bool:
    """`node` is the name a `#define` defines."""
    parent = node.parent
    return parent is not None and parent.type in ("preproc_def", "preproc_function_def") and \
        parent.child_by_field_name("name") == node


def _declares_type(ctx: _Ctx, name: str, host: Pass) -> bool:
    """The file declares type `name` (a typedef or a using alias) where `host` compiles."""
    for node in cxx.nodes_of_type(ctx.src.root, ("type_definition", "alias_declaration")):
        declared = node.child_by_field_name("declarator") or \
            node.child_by_field_name("name")
        if declared is not None and ctx.src.node_text(declared) == name and \
                ctx.active(node, host) == 1:
            return True
    return False


def _windows_macros(ctx: _Ctx, groups: Mapping[str, list[re.Match[str]]], host: Pass) -> None:
    incs = [(h, s) for h, s, _n in _includes(ctx, groups, host)
            if h.lower() in ("windows.h", "dlfcn.h")]
    if not incs:
        return
    hdr, _ = incs[0]
    via = ("<windows.h>" if hdr.lower() == "windows.h" else
           "<windows.h> (the dynamic-loading compat layer that replaces <dlfcn.h> includes it)")
    nominmax = "NOMINMAX" in ctx.defines
    for group, name_fix in (("small", "rename the identifier (windows.h: #define small char)"),
                            ("minmax", "define NOMINMAX for the target, or write (std::min)(a, "
                             "b)")):
        if group == "minmax" and nominmax:
            continue
        for m, start, node in _sites(ctx, groups.get(group, [])):
            if ctx.active(node, host) == 0 or node.type not in ("identifier",
                                                                 "field_identifier",
                                                                 "type_identifier"):
                continue
            ctx.add(start, "FB130", Category.WINDOWS_MACROS, Severity.WARNING,
                    f"`{m.group(0)}` is a macro once this file includes {via}",
                    f"identifier `{m.group(0)}` in a file that includes <{hdr}>"
                    + ("" if group == "small" else " and no NOMINMAX"),
                    Fix(manual=name_fix), WindowsMacroFacts(
                        needs=TreeCheck.NO_NOMINMAX if group == "minmax" else None))


def _plugin_exports(ctx: _Ctx, groups: Mapping[str, list[re.Match[str]]], host: Pass) -> None:
    if not groups.get("externc"):
        return
    for decl in cxx.function_declarations(ctx.src):
        if not (decl.extern_c and decl.is_definition):
            continue
        head = decl.head
        if "dllexport" in head or re.search(r"\b\w*(EXPORT|_API)\w*\b", head):
            continue
        node = ctx.node_at(decl.start, decl.start + 1)
        if ctx.active(node, host) == 0 or _in_anonymous_namespace(node):
            continue  # internal linkage: not an entry point anyone can dlsym
        ctx.report.findings.append(Finding(
            rule="FB102", category=Category.DYNAMIC_LOADING, path=ctx.file.path,
            line=decl.line, col=1, severity=Severity.ERROR,
            message=f"`{decl.name}` is exported with extern \"C\" only: a Windows DLL exports "
            "nothing without __declspec(dllexport)",
            evidence=f"extern \"C\" definition of {decl.name} in a shared library the tree "
            "loads with dlsym",
            snippet=_snippet(ctx.file, decl.line),
            fix=Fix(transform="dynamic-loading",
                    params={"mode": "portable", "plugin_files": [ctx.file.path]},
                    step=PortableDynamicLoading(file=ctx.file.path, role="plugin")),
            facts=PluginExportFacts(symbol=decl.name)))


def _in_anonymous_namespace(node: Node) -> bool:
    n: Node | None = node
    while n is not None:
        if n.type == "namespace_definition" and n.child_by_field_name("name") is None:
            return True
        n = n.parent
    return False


#: A function declared with an export macro (`FOO_API int f(`, `__declspec(dllexport) void
#: g(`): a definition elsewhere of the same name is exported through that declaration.
EXPORTED_DECL = re.compile(r"(?:\b\w*(?:EXPORT|_API)\w*|__declspec\s*\(\s*dllexport\s*\))"
                           r"[^;{}()]*?\b(\w+)\s*\(")


def _arch_gates(ctx: _Ctx, groups: Mapping[str, list[re.Match[str]]], arch: Arch,
                dev: Pass) -> None:
    target_value = arch.code * 10
    for _m, start, node in _sites(ctx, groups.get("err", []), code=False):
        if ctx.active(node, dev) != 1:
            continue
        conds = cxx.enclosing_conditionals(ctx.src, node)
        gate = next((c for c in conds if "ARCH" in c.condition), None)
        if gate is None:
            continue
        values = sorted({int(v) for v in re.findall(r"__CUDA_ARCH__\s*==\s*(\d+)",
                                                       gate.condition)})
        directives = (gate.directive.lstrip("#"),)
        find = f"__CUDA_ARCH__ == {values[-1]}" if values else ""
        replace = f"{find} || __CUDA_ARCH__ == {target_value}" if values else ""
        widen = WidenArchCondition(file=ctx.file.path, arch=arch, kind="allow-list", find=find,
                                   replace=replace, directives=directives,
                                   summary=RULES["FB150"].short)
        ctx.add(start, "FB150", Category.ARCH_GATING, Severity.ERROR,
                f"#error for {arch.sm}: the __CUDA_ARCH__ allow-list does not list "
                f"{target_value}",
                f"`#if {gate.condition}` (line {gate.line}) is false for __CUDA_ARCH__ == "
                f"{target_value}, so the #error branch is compiled",
                Fix(transform="macro-edit", params={
                    "files": [ctx.file.path], "find": find, "replace": replace}, step=widen)
                if values else
                Fix(manual=f"add {target_value} to the allow-list at line {gate.line}",
                    step=widen),
                AllowListFacts(arch=arch, gate_line=gate.line, listed=tuple(values),
                               directives=directives))
    seen: set[int] = set()
    for m, start, node in _sites(ctx, groups.get("eq", []), code=False):
        value = int(re.findall(r"\d+", m.group(0))[0])
        code = value // 10
        if code == arch.code or not (code >= 100 and arch.code >= 100):
            continue
        parent = node
        while parent.parent is not None and parent.type not in (
                "preproc_def", "preproc_function_def", "preproc_if", "preproc_elif"):
            parent = parent.parent
        cond_node = (parent.child_by_field_name("value") if parent.type.startswith("preproc_def")
                     or parent.type == "preproc_function_def"
                     else parent.child_by_field_name("condition"))
        if cond_node is None or cond_node.start_byte in seen or _ends_in_error(parent):
            continue  # one finding per condition; an allow-list ending in #error is FB150
        seen.add(cond_node.start_byte)
        cond = ctx.src.node_text(cond_node)
        at_target = Evaluator(dev, lambda n: ctx._macro(n, dev)).eval(cond)
        if at_target != 0:
            continue  # another term already accepts the target
        facts = ArchBranchFacts(arch=arch, directives=(_DIRECTIVE[parent.type],),
                                ladder=tuple(_defines_in_branch(ctx, parent)))
        find = m.group(0).strip()
        replace = f"({find} || __CUDA_ARCH__ == {target_value})"
        ctx.add(start, "FB151", Category.ARCH_GATING, Severity.WARNING,
                f"`{find}` selects {code // 10}.{code % 10} but not {arch.sm}: "
                f"the {arch.sm} pass takes another path",
                f"`{cond.strip()}` is 0 for __CUDA_ARCH__ == {target_value}, and "
                f"sm_{code} is a sibling of {arch.sm}",
                Fix(transform="macro-edit", params={
                    "files": [ctx.file.path], "find": find, "replace": replace},
                    step=WidenArchCondition(
                        file=ctx.file.path, arch=arch, kind="equality", find=find,
                        replace=replace, directives=facts.directives, ladder=facts.ladder,
                        summary=RULES["FB151"].short)),
                facts)


def _arch_ranges(ctx: _Ctx, groups: Mapping[str, list[re.Match[str]]], arch: Arch,
                 dev: Pass) -> None:
    """`__CUDA_ARCH__ >= 1000 && __CUDA_ARCH__ < 1200`: a Blackwell range whose upper bound
    leaves the target out, while a sibling (sm_100) takes the branch."""
    target_value = arch.code * 10
    if arch.code < 100:
        return
    sibling = device_pass(ctx.target.platform, Arch(10, 0, arch.suffix))
    seen: set[int] = set()
    for m, start, node in _sites(ctx, groups.get("lt", []), code=False):
        bound = int(re.findall(r"\d+", m.group(0))[0])
        inclusive = "<=" in m.group(0)
        if bound < 1000 or (target_value <= bound if inclusive else target_value < bound):
            continue
        parent = node
        while parent.parent is not None and parent.type not in ("preproc_if", "preproc_elif"):
            parent = parent.parent
        cond_node = parent.child_by_field_name("condition")
        if cond_node is None or cond_node.start_byte in seen or _ends_in_error(parent):
            continue
        seen.add(cond_node.start_byte)
        cond = ctx.src.node_text(cond_node)
        at_target = Evaluator(dev, lambda n: ctx._macro(n, dev)).eval(cond)
        at_sibling = Evaluator(sibling, lambda n: ctx._macro(n, sibling)).eval(cond)
        if at_target != 0 or at_sibling != 1:
            continue
        facts = ArchBranchFacts(arch=arch, directives=(_DIRECTIVE[parent.type],),
                                ladder=tuple(_defines_in_branch(ctx, parent)))
        ctx.add(start, "FB151", Category.ARCH_GATING, Severity.WARNING,
                f"`{m.group(0).strip()}` ends the range before {arch.sm}: sm_100 takes this "
                f"branch, the {arch.sm} pass takes another path",
                f"`{cond.strip()}` is 1 for __CUDA_ARCH__ == 1000 and 0 for {target_value}",
                Fix(manual=f"if the code is right for {arch.sm}, move the bound past "
                    f"{target_value}; if it needs sm_100-only features, leave it",
                    step=WidenArchCondition(file=ctx.file.path, arch=arch, kind="range",
                                            directives=facts.directives, ladder=facts.ladder,
                                            summary=RULES["FB151"].short)),
                facts)


def _defines_in_branch(ctx: _Ctx, node: Node) -> list[str]:
    """The macros an `#if`/`#elif` branch defines: an arch-detection ladder (CUTLASS's
    `#if __CUDA_ARCH__ == 1000 … #define CUTLASS_ARCH_MMA_SM100_ENABLED`). Widening its test
    turns on features the target does not have, so recipe init never drafts that edit."""
    if node.type not in ("preproc_if", "preproc_elif"):
        return []
    out = []
    for child in node.named_children:
        if child.type in ("preproc_def", "preproc_function_def"):
            name = child.child_by_field_name("name")
            if name is not None:
                out.append(ctx.src.node_text(name))
    return out


_DIRECTIVE = {"preproc_def": "define", "preproc_function_def": "define-function",
              "preproc_if": "if", "preproc_elif": "elif"}


def _ends_in_error(node: Node) -> bool:
    """Whether a #if/#elif chain has an #error in one of its #else/#elif branches."""
    alt = node.child_by_field_name("alternative") if node.type in ("preproc_if",
                                                                    "preproc_elif") else None
    while alt is not None:
        for child in alt.children:
            directive = child.child_by_field_name("directive")
            if child.type == "preproc_call" and directive is not None and \
                    "error" in (directive.text or b"").decode():
                return True
        alt = alt.child_by_field_name("alternative") if alt.type == "preproc_elif" else None
    return False


def _instructions(ctx: _Ctx, groups: Mapping[str, list[re.Match[str]]], arch: Arch,
                  dev: Pass) -> None:
    for m, start, node in _sites(ctx, groups.get("instr", []), code=False):
        name = m.group(0)
        row = INSTRUCTIONS[name]
        needs, has = row.needs, row.accepts
        if has(arch) or node.type == "comment":
            continue
        if name.startswith("kind::") and "tcgen05" in _line_text(ctx, start):
            continue  # a tcgen05.mma kind: the tcgen05 row decides that line
        n: Node | None = node
        in_asm = False
        while n is not None:
            if n.type in ("gnu_asm_expression", "preproc_def", "preproc_function_def"):
                in_asm = True
                break
            n = n.parent
        state = ctx.active(node, dev) if in_asm else 0
        if state == 0:
            continue
        if state is None:
            # Undecidable here (a macro defined elsewhere, a project option): a note naming
            # the macros, never an error.
            macros = ctx.undecided(node, dev)
            from flashbuild.scanning.callgraph import owner_of  # noqa: PLC0415  # cycle

            owner = owner_of(ctx.src.node_text, node)
            ctx.add(start, "FB160", Category.ARCH_INSTRUCTIONS, Severity.NOTE,
                    f"`{name}` may be compiled for {arch.sm} (needs {needs}): it depends on "
                    f"{', '.join(macros) or 'a condition'} the scan cannot decide",
                    f"inline PTX `{name}` under `{' / '.join(macros) or '?'}`",
                    # The preprocessor may decide it is compiled after all: the step is ready.
                    Fix(manual=f"none if {', '.join(macros) or 'the condition'} is off for "
                        f"{arch.sm}; else exclude or gate the source",
                        step=_exclusion(ctx, name, arch)),
                    InstructionFacts(instruction=name, arch=arch, needs_arch=needs,
                                     owner=owner.kind, owner_names=tuple(owner.names),
                                     undecided=tuple(macros)))
            continue
        from flashbuild.scanning.callgraph import owner_of  # noqa: PLC0415  # cycle

        owner = owner_of(ctx.src.node_text, node)
        ctx.add(start, "FB160", Category.ARCH_INSTRUCTIONS, Severity.ERROR,
                f"`{name}` is compiled for {arch.sm}, which lacks it (needs {needs})",
                f"inline PTX `{name}` in code the {arch.sm} device pass compiles",
                Fix(transform="exclude-sources", params={"globs": [ctx.file.path]},
                    step=_exclusion(ctx, name, arch)),
                InstructionFacts(instruction=name, arch=arch, needs_arch=needs,
                                 owner=owner.kind, owner_names=tuple(owner.names)))


_COMPILED = (".cu", ".cpp", ".cc", ".cxx", ".c")


def _exclusion(ctx: _Ctx, instruction: str, arch: Arch) -> ExcludeSources:
    """Excluding the source for the target, or why that would harm: a header (excluding it
    changes nothing), an instruction the target's `a`/`f` variant has (build for that
    instead, unless a suffixed arch is asked already), a file named for the target's arch
    (the bindings of that arch need it)."""
    path = ctx.file.path
    has = INSTRUCTIONS[instruction].accepts
    better = next((a for a in (Arch(arch.major, arch.minor, sfx)
                               for sfx in (Suffix.ARCH, Suffix.FAMILY)) if has(a)), None)
    refusal = ""
    if not path.endswith(_COMPILED):
        refusal = ("a header: excluding it from the source list changes nothing; gate or "
                   "exclude the sources that include it")
    elif better is not None and not any(a.suffix is not Suffix.NONE for a in ctx.target.archs):
        refusal = f"{instruction} exists on {better.sm}: build for --arch {better.sm} instead " \
            "of removing the source"
    elif re.search(rf"sm_?{arch.code}(?!\d)", path.rpartition("/")[2], re.IGNORECASE):
        refusal = f"the file is named for sm_{arch.code}: the bindings of that arch need it"
    return ExcludeSources(file=path, arch=arch, refusal=refusal)


def _line_text(ctx: _Ctx, byte: int) -> str:
    line = ctx.pos(byte)[0]
    return _snippet(ctx.file, line)


_ARCH_NAME = re.compile(r"[Ss][Mm]_?(\d{2,3})")


def _smem(ctx: _Ctx, groups: Mapping[str, list[re.Match[str]]], arch: Arch, dev: Pass) -> None:
    limit = arch.max_smem_per_block()
    if limit is None or not groups.get("smem"):
        return
    consts = _constants(ctx)
    for m, start, node in _sites(ctx, groups.get("smem", [])):
        decl = node
        while decl.parent is not None and decl.type not in ("field_declaration",
                                                             "declaration", "init_declarator"):
            decl = decl.parent
        value_node = decl.child_by_field_name("default_value") or \
            decl.child_by_field_name("value")
        if value_node is None and decl.type == "declaration":
            init = next((c for c in decl.named_children if c.type == "init_declarator"), None)
            value_node = init.child_by_field_name("value") if init else None
        if value_node is None:
            continue
        expr = ctx.src.node_text(value_node)
        value = _const_value(expr, consts)
        if value is None or value <= limit or ctx.active(node, dev) == 0:
            continue
        owner = _owner(ctx, decl)
        if owner is not None and not _applies(owner, arch):
            continue
        name = m.group(0).split("=")[0].strip()
        facts = SharedMemoryFacts(
            arch=arch, limit=limit, value=value, member=name,
            struct=owner.name if owner else "", specialised=owner.args if owner else "",
            struct_line=owner.line if owner else 0, struct_text=owner.text if owner else "")
        ctx.add(start, "FB170", Category.SHARED_MEMORY, Severity.ERROR,
                f"{name} = {value} B is above {arch.sm}'s {limit} B per block",
                f"`{expr}` = {value} in "
                f"{owner.label if owner else 'file scope'}, which {arch.sm} uses",
                Fix(manual=f"give {arch.sm} its own budget ≤ {limit} B (recipe init drafts an "
                    "insert-block to review)",
                    step=DeriveTraits(step=_traits_step(ctx.file, facts))),
                facts)


def _traits_step(file: FileText, facts: SharedMemoryFacts) -> ProposedStep | None:
    """An `insert-block` that specialises the traits struct for the target, derived from the
    primary template with the shared-memory member set to the target's limit rounded down to
    whole KB and a `static_assert`; None when it cannot be derived safely (tile sizes stay a
    person's choice: the step is marked REVIEW)."""
    text = facts.struct_text
    if facts.specialised or not text.lstrip().startswith("template"):
        return None
    head = re.match(r"\s*template\s*<(.*?)>\s*(?:struct|class)\b", text, re.S)
    params = [p.strip() for p in _split_top(head[1])] if head else []
    if len(params) != 1 or re.match(r"(?:typename|class)\b", params[0]):
        # `struct X<1200>` specialises a template of exactly one non-type parameter; any
        # other arity (PipelineTest<int, bool>) would not compile.
        return None
    arch, limit, struct, member = facts.arch, facts.limit, facts.struct, facts.member
    value = arch.code * 10
    kb = limit // 1024
    body = re.sub(r"^template\s*<[^>]*>\s*", "template <>\n", text, count=1)
    body = re.sub(rf"\b(struct|class)\s+{re.escape(struct)}\b", rf"\1 {struct}<{value}>", body,
                  count=1)
    body, n = re.subn(rf"(\b{re.escape(member)}\s*=\s*)[^;]+;[^\n]*", rf"\g<1>{kb} * 1024;",
                      body, count=1)
    if n != 1:
        return None
    close = body.rstrip().rfind("}")
    body = (body[:close] + f"  static_assert({member} <= {limit}, "
            f"\"{arch.sm} allows {limit} B of shared memory per block\");\n" + body[close:])
    # Anchor: the first non-blank line after the primary template, if it is unique.
    lines = file.text.splitlines()
    end = facts.struct_line - 1 + text.count("\n")
    anchor = next((ln for ln in lines[end + 1:] if ln.strip()), None)
    if anchor is None or sum(ln.strip() == anchor.strip() for ln in lines) != 1:
        return None
    return ProposedStep(
        id=f"sm{arch.sm.removeprefix('sm_')}-traits", transform="insert-block",
        description=f"{struct}<{value}>: {arch.sm} allows {limit} B of shared memory per "
        f"block; the primary template asks {facts.value} B (scan FB170)",
        params={"file": file.path, "anchor": anchor.strip(), "where": "before",
                "block": f"\n// {arch.sm}: {limit} B opt-in shared memory per block (drafted "
                f"by flashbuild recipe init).\n{body.strip()}\n\n"},
        when=arch_when([arch]),
        comment=f"REVIEW: derived from the primary template {struct}; only {member} was "
        f"changed ({facts.value} -> {kb} * 1024). Tile sizes are a person's decision.")


def _split_top(text: str) -> list[str]:
    """Split template parameters on the commas outside nested <>/()."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur] if cur.strip() or out else []


@dataclass(frozen=True)
class _Owner:
    name: str
    args: str
    """Template arguments of a specialisation (`900`), '' for the primary template."""
    is_template: bool
    line: int
    text: str
    """The whole declaration (with its `template <…>` head)."""
    specialised: tuple[str, ...]
    """Arguments of every specialisation of this template in the file."""

    @property
    def label(self) -> str:
        if self.args:
            return f"{self.name}<{self.args}>"
        return f"the primary template {self.name}" if self.is_template else self.name


def _owner(ctx: _Ctx, decl: Node) -> _Owner | None:
    n: Node | None = decl
    while n is not None and n.type not in ("struct_specifier", "class_specifier"):
        n = n.parent
    if n is None:
        return None
    name_node = n.child_by_field_name("name")
    if name_node is None:
        return None
    raw = ctx.src.node_text(name_node)
    name, _, args = raw.partition("<")
    args = args.rstrip(">").strip()
    outer = n.parent.parent if n.parent is not None and n.parent.type == "declaration" else \
        n.parent
    top = outer if outer is not None and outer.type == "template_declaration" else n
    specs = tuple(sorted(set(re.findall(
        rf"struct\s+{re.escape(name.strip())}\s*<\s*([^>]+?)\s*>", ctx.file.text))))
    return _Owner(name.strip(), args, top.type == "template_declaration",
                  ctx.src.line_of(top.start_byte), ctx.src.node_text(top), specs)


def _applies(owner: _Owner, arch: Arch) -> bool:
    """Whether a traits struct is the one the target uses: a specialisation for another arch
    value (`<900>`) or a struct named for another SM (`Sm90Traits`) is not; the primary
    template is, unless a specialisation for the target exists."""
    values = {arch.code * 10, arch.code}
    if owner.args:
        return owner.args.isdigit() and int(owner.args) in values
    if owner.is_template:
        return not any(s.isdigit() and int(s) in values for s in owner.specialised)
    named = _ARCH_NAME.search(owner.name)
    return named is None or int(named[1]) in values


def _constants(ctx: _Ctx) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in re.finditer(r"\b(?:constexpr|const)\b[^;=(){}]*?\b(\w+)\s*=\s*([^;]+);",
                         ctx.file.text):
        out.setdefault(m[1], m[2])
    for name, defs in ctx.defines.items():
        if len(defs) == 1 and defs[0].params is None:
            out.setdefault(name, defs[0].body)
    return out


def _const_value(expr: str, consts: Mapping[str, str]) -> int | None:
    """A simple constant expression (`160 * 1024`, `kTile * 4 * sizeof(float)`)."""
    text = re.sub(r"sizeof\s*\(\s*(?:float|int|int32_t|uint32_t)\s*\)", "4", expr)
    text = re.sub(r"sizeof\s*\(\s*(?:double|int64_t|uint64_t|float2)\s*\)", "8", text)
    text = re.sub(r"sizeof\s*\(\s*(?:half|__half|__nv_bfloat16|bf16|fp16)\s*\)", "2", text)
    text = re.sub(r"static_cast<\s*\w+\s*>", "", text)
    return Evaluator(Pass("const", {}, frozenset()), consts.get).eval(text)


def _runtime_major(ctx: _Ctx, groups: Mapping[str, list[re.Match[str]]]) -> None:
    found = list(_sites(ctx, groups.get("major", [])))
    if not found:
        return
    text = ctx.file.text
    for arch in ctx.target.archs:
        accepts = [m for m in re.finditer(
            r"\b(?:major|cc_major|sm_major|ccMajor)\s*(==|>=|>)\s*(\d+)", text)
            if (m[1] == "==" and int(m[2]) == arch.major) or
            (m[1] == ">=" and arch.major >= int(m[2])) or (m[1] == ">" and arch.major > int(m[2]))]
        if accepts:
            continue
        host = host_pass(ctx.target.platform)
        named = _ARCH_NAME.search(ctx.file.path.rpartition("/")[2])
        for m, start, node in found:
            if node.parent is not None and node.parent.type.startswith("preproc"):
                continue
            value = int(re.findall(r"==\s*(\d+)", m.group(0))[0])
            if value == arch.major or ctx.active(node, host) == 0:
                continue
            if named is not None and int(named[1]) // 10 == value:
                # A source named for one SM (`gemm_sm90.cu`) that refuses other majors guards
                # kernels built for that SM only (wgmma for sm_90): the check is right.
                continue
            ctx.add(start, "FB153", Category.ARCH_GATING, Severity.WARNING,
                    f"`{m.group(0).strip()}`: a {arch.major}.x GPU ({arch.sm}) never takes "
                    "this branch, and nothing in the file accepts its major version",
                    f"runtime equality on the compute-capability major ({value}); no test in "
                    f"this file accepts major {arch.major}",
                    Fix(manual=f"test `major >= {value}` or add a branch for major "
                        f"{arch.major}"), RuntimeMajorFacts(arch=arch))


# --- explicit instantiations: the transform's own site finder ---------------------------

def instantiation_findings(root: Path, reports: Sequence[FileReport],
                           target: ScanTarget, separable: str = "") -> list[Finding]:
    """The sites the `explicit-instantiations` transform would guard (FB140/FB141), keep
    (FB142) or refuse on this tree, decided by the transform's own analysis with every C++ file
    of the tree as the recipe's sources (`separable`: why the build links device code across
    units, source/separable.py). A refused site is still FB140/FB141, with no step: a TODO
    that says why the transform cannot guard it. Only for Windows: GCC and Clang accept the
    instantiations as written."""
    if target.platform != "windows":
        return []
    facts: dict[str, inst.FileFacts] = {
        r.path: r.facts["instantiations"] for r in sorted(reports, key=lambda r: r.path)
        if "instantiations" in r.facts}

    def load(path: str) -> cxx.Source | None:
        # The analysis parses again only the files that use an instantiation macro or name a
        # host template instantiated elsewhere: worker parses do not cross processes.
        text = read_source(root, path, 1 << 30)
        return cxx.parse(text, path) if isinstance(text, str) else None

    analysis = inst.InstantiationAnalysis(facts, load)
    params = inst.DefaultRules()
    out: list[Finding] = []
    for site in analysis.sites(facts, params, separable=separable):
        if site.action == "already" or (site.action == "keep" and site.kernel):
            continue  # a kernel's instantiation that repeats its definition: MSVC accepts it
        item = site.found
        kind = "kernel" if site.kernel else "host template"
        snippet = " ".join(item.text.split())[:160]
        if site.action == "keep":
            out.append(Finding(
                rule="FB142", category=Category.INSTANTIATIONS, path=item.path, line=item.line,
                col=item.col, severity=Severity.NOTE,
                message=f"explicit instantiation of host template `{item.target}`: the "
                "transform keeps it" + (" (another file needs it)" if site.referenced_from
                                        else ""),
                evidence=site.note, snippet=snippet,
                fix=Fix(manual="none: kept (MSVC accepts host template instantiations)",
                        step=GuardInstantiation(file=item.path, site="kept")),
                facts=InstantiationFacts(kind=kind)))
            continue
        via = f" (via macro {item.via_macro})" if item.via_macro else ""
        guard = Fix(transform="explicit-instantiations",
                    params={"files": [item.path], "mode": "guard"},
                    step=GuardInstantiation(file=item.path,
                                            site="kernel" if site.kernel else "host"))
        if site.action == "refused":
            guard = Fix(manual=f"the transform refuses this site ({site.note}); edit it by "
                        "hand where that is safe")
        # A kernel's: an error where its parameter qualifiers differ from its template's
        # (FACTS: MSVC mangles them as written), a warning where they could not be compared.
        severity = Severity.NOTE if not site.kernel else \
            Severity.ERROR if site.repeats_definition is False else Severity.WARNING
        out.append(Finding(
            rule="FB140" if site.kernel else "FB141", category=Category.INSTANTIATIONS,
            path=item.path, line=item.line, col=item.col, severity=severity,
            message=f"explicit instantiation of {kind} `{item.target}`{via}: " + (
                "MSVC's host pass rejects it" if site.repeats_definition is False else
                "MSVC's host pass may reject it" if site.kernel else
                "no other file needs it; the transform guards it with the kernels"),
            evidence=f"`{snippet[:100]}`" + (f": {site.note}" if site.kernel and site.note
                                             else "" if site.kernel else
                                             "; no other file references it"),
            snippet=snippet, fix=guard,
            facts=InstantiationFacts(kind=kind, macro=item.via_macro)))
    return out
