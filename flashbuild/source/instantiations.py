"""The analysis of explicit template instantiations: where they are, and which of them MSVC's
host pass would reject (a `__global__` template's), keep (a host template another file
references) or never sees (already guarded).

A reader of the tree, below every stage: the `explicit-instantiations` transform
(patching/transforms/instantiations.py) edits the sites it decides, and the scan
(scanning/checks_cxx.py) reports the same sites, from the same decision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, Protocol

from flashbuild.source import cxx

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from tree_sitter import Node

SiteAction = Literal["edit", "keep", "already", "refused"]
Member = tuple[str, str, "cxx.Shape | None"]
"""An instantiation of a macro's expansion: (function name, target, parameter shape)."""

DEFAULT_GUARD = "!defined(_MSC_VER)"
MSVC_GUARDS = frozenset({"!defined(_MSC_VER)", "!_MSC_VER"})
"""Conditions (normalised) under which MSVC never sees the code, besides the recipe's guard."""


class SiteRules(Protocol):
    """What decides a site besides the tree (the transform's params satisfy it)."""

    @property
    def guard(self) -> str:
        """The preprocessor condition that keeps a site; also recognised as an existing guard."""
        ...

    @property
    def keep_referenced(self) -> bool:
        """Keep a host template instantiation another source references."""
        ...


@dataclass(frozen=True, kw_only=True)
class DefaultRules:
    """The transform's defaults, for a reader that has no recipe step (the scan)."""

    guard: str = DEFAULT_GUARD
    keep_referenced: bool = True


# --------------------------------------------------------------------------- public API
#
# The analysis runs in two steps so that `flashbuild scan` can do the per-file part in worker
# processes on the parse it already has, and only the tree-wide part in one process:
#
# 1. `file_facts(path, text, src)`: per file, picklable. The direct instantiations (with the
#    preprocessor conditionals around them), the function-like `#define`s, and every
#    identifier-like token of the text.
# 2. `InstantiationAnalysis(facts, load)`: tree-wide. Resolves instantiation macros and builds
#    a token index (token → files) once, so that "is `f` a `__global__` template somewhere?"
#    and "does another file reference host template `f`?" look only at the files whose
#    tokens name `f`; those few are parsed (again, through `load`) to decide on the syntax
#    tree, as the transform always did.
#
# The transform's `apply()` and the scan both go through `InstantiationAnalysis.sites`, so
# the scan reports exactly what the transform does.

_TOKEN = re.compile(r"[A-Za-z_$][\w$]*")
_INSTANTIATION_WORD = re.compile(r"\btemplate\b(?!\s*<)")
"""Where an explicit instantiation could be: `template` not followed by `<`. A superset
(comments, `x.template f<…>`) — it only decides whether to look at the parse."""
_DEFINE = re.compile(r"#[ \t]*define(?:[ \t]|\\\n)+[A-Za-z_]\w*\(")
"""A function-like `#define` (its `(` right after the name): the only macros the analysis
keeps. An include guard or a constant alone does not make a file worth parsing."""


@dataclass(frozen=True, kw_only=True)
class MacroBody:
    """A function-like `#define` with a body: a candidate instantiation macro."""

    name: str
    body: str
    where: str
    """`path:line` of the definition."""


@dataclass(frozen=True, kw_only=True)
class InstantiationMacro:
    """A function-like macro whose expansion holds an explicit instantiation, directly or
    through another such macro."""

    name: str
    kernel: bool
    """The instantiation in its expansion is declared `__global__`."""
    instantiates: str
    """Unqualified name of the function template it instantiates."""
    where: str
    members: tuple[Member, ...] = ()
    """Each instantiation in its expansion: (function name, target as written, parameter
    shape or None; cxx.parameter_shape)."""


@dataclass(frozen=True, kw_only=True)
class FoundInstantiation:
    """An instantiation site before the tree-wide decision: a direct `template …;` or a use
    of an instantiation macro. Plain data (picklable), no syntax nodes."""

    path: str
    start: int
    """Byte offsets of the site in the file's UTF-8 text."""
    end: int
    line: int
    col: int
    """1-based, in characters."""
    name: str
    """Unqualified name of the instantiated function template."""
    target: str
    """What is instantiated, as written (`k<float>`, or `MACRO(args)` for a macro use)."""
    declared_kernel: bool
    """`__global__` at the site (or in the macro's expansion)."""
    via_macro: str = ""
    text: str
    """The site's source text."""
    conditionals: tuple[cxx.Conditional, ...]
    """The preprocessor conditionals around the site, innermost first."""
    inside: str = ""
    """The backslash-continued line (a `#define`) that the site's lines belong to, described
    (`the #define INSTANTIATE (lines 4-6)`), or '': a guard or a removal there would split it."""
    shape: cxx.Shape | None = None
    """The qualifier shape of the parameter list it names (cxx.parameter_shape), None where
    it could not be read."""
    members: tuple[Member, ...] = ()
    """A macro use's instantiations (InstantiationMacro.members); () for a direct site."""


@dataclass(frozen=True, kw_only=True)
class FileFacts:
    """What one file contributes to the analysis (see `file_facts`)."""

    path: str
    instantiations: tuple[FoundInstantiation, ...] = ()
    """Direct explicit instantiations (not macro uses: those need the tree's macros)."""
    may_define_kernels: bool = False
    """The text holds `template` and `__global__`: it may define a kernel template (looked
    at by the tree-wide pass only for names it needs)."""
    macros: tuple[MacroBody, ...] = ()
    tokens: frozenset[str] = frozenset()
    """Every identifier-like token of the text: a superset of its references, for the index."""


@dataclass(frozen=True, kw_only=True)
class InstantiationSite:
    """A site with the transform's decision: `edit` (guard/remove), `keep`, `already`, or
    `refused` (an edit there would be unsafe; `note` says why)."""

    found: FoundInstantiation
    kernel: bool
    """A `__global__` template, as written at the site or at the template's definition."""
    action: SiteAction
    note: str
    """Why it is kept, edited or already handled (`host template f is referenced from
    a.cu:7`; for a kernel, how its parameter list compares with its template's)."""
    referenced_from: str = ""
    """A host template's: `file:line` of another file's reference, which is why it is kept."""
    repeats_definition: bool | None = None
    """A kernel's: True when it repeats its template's parameter qualifiers (MSVC accepts
    it), False when it differs (MSVC rejects it), None when that could not be compared."""

    @property
    def path(self) -> str:
        return self.found.path

    @property
    def start(self) -> int:
        return self.found.start

    @property
    def end(self) -> int:
        return self.found.end

    @property
    def line(self) -> int:
        return self.found.line


def file_facts(path: str, text: str, src: cxx.Source | None = None) -> FileFacts:
    """The per-file part of the analysis. Parses `text` (or uses `src`, its parse) only when
    the text can hold an instantiation or a `#define`."""
    want_sites = _INSTANTIATION_WORD.search(text) is not None
    want_macros = _DEFINE.search(text) is not None
    tokens = frozenset(_TOKEN.findall(text))
    kernels = "__global__" in tokens and "template" in tokens
    if not (want_sites or want_macros):
        return FileFacts(path=path, tokens=tokens, may_define_kernels=kernels)
    if src is None:
        src = cxx.parse(text, path)
    sites: list[FoundInstantiation] = []
    if want_sites:
        for i in cxx.template_instantiations(src):
            # The smallest node spanning the site is its `template_instantiation` node: its
            # ancestors hold the conditionals (cheaper than a second walk of the tree).
            node = src.root.descendant_for_byte_range(i.start, i.end) or src.root
            sites.append(_found(src, i.start, i.end, name=i.name, target=i.target,
                                kernel=i.is_kernel, via_macro="", node=node, shape=i.shape))
    macros = tuple(
        MacroBody(name=m.name, body=m.body, where=f"{path}:{m.line}")
        for m in (cxx.macro_definitions(src) if want_macros else ())
        if m.params is not None and m.body)
    return FileFacts(path=path, instantiations=tuple(sites), may_define_kernels=kernels,
                     macros=macros, tokens=tokens)


def instantiation_macros(bodies: Iterable[MacroBody]) -> dict[str, InstantiationMacro]:
    """Function-like macros whose expansion holds an explicit instantiation, directly or
    through another such macro (resolved to a fixpoint). The first definition of a name
    counts, in the order given."""
    first: dict[str, MacroBody] = {}
    for m in bodies:
        first.setdefault(m.name, m)
    known: dict[str, InstantiationMacro] = {}
    pending: dict[str, tuple[MacroBody, frozenset[str]]] = {}
    for name, m in first.items():
        insts = cxx.template_instantiations(_body_source(m)) \
            if _INSTANTIATION_WORD.search(m.body) else []
        if insts:
            known[name] = InstantiationMacro(
                name=name, kernel=any(i.is_kernel for i in insts), instantiates=insts[0].name,
                where=m.where, members=tuple((i.name, i.target, i.shape) for i in insts))
        else:
            pending[name] = (m, frozenset(_TOKEN.findall(m.body)))
    changed = True
    while changed:
        changed = False
        for name, (m, tokens) in pending.items():
            if name in known or tokens.isdisjoint(known):
                continue  # the token check spares the parse of bodies that use no known macro
            uses = cxx.macro_uses(_body_source(m), known, top_level_only=False)
            if uses:
                inner = known[uses[0].name]
                known[name] = InstantiationMacro(name=name, kernel=inner.kernel,
                                                 instantiates=inner.instantiates, where=m.where,
                                                 members=inner.members)
                changed = True
    return known


def _body_source(m: MacroBody) -> cxx.Source:
    return cxx.parse(m.body if m.body.rstrip().endswith(";") else m.body + ";")


def macro_sites(src: cxx.Source, macros: Mapping[str, InstantiationMacro]
                ) -> list[FoundInstantiation]:
    """File-scope uses of instantiation macros in `src`: the macro-generated sites."""
    out: list[FoundInstantiation] = []
    for use in cxx.macro_uses(src, macros):
        info = macros[use.name]
        out.append(_found(src, use.start, use.end, name=info.instantiates,
                          target=f"{use.name}({use.args})", kernel=info.kernel,
                          via_macro=use.name, node=use.node, shape=None,
                          members=info.members))
    return out


def _found(src: cxx.Source, start: int, end: int, *, name: str, target: str,
           kernel: bool, via_macro: str, node: Node, shape: cxx.Shape | None,
           members: tuple[Member, ...] = ()) -> FoundInstantiation:
    # The guard's `#if`/`#endif` (or the removal) go at the site's line boundaries: inside a
    # backslash-continued `#define` they would split it (a macro's body that tree-sitter read
    # as code because a space follows one of its backslashes).
    split = cxx.continued_line(src.data, src.line_start(start), src.line_end(end))
    return FoundInstantiation(
        path=src.path, start=start, end=end, line=src.line_of(start),
        col=len(src.slice(src.line_start(start), start)) + 1, name=name, target=target,
        declared_kernel=kernel, via_macro=via_macro, text=src.slice(start, end),
        conditionals=tuple(cxx.enclosing_conditionals(src, node)),
        inside=split.describe() if split is not None else "", shape=shape, members=members)


class InstantiationAnalysis:
    """The tree-wide part: which sites the transform edits, keeps or finds already handled.

    `facts` holds one `FileFacts` per source taking part (the files to edit and every file
    searched for references and macros); iteration order is the search order (sorted paths).
    `load(path)` returns the parse of a file, or None when it can no longer be read; it is
    called (once per file) only for files that use an instantiation macro and files whose tokens
    name a template instantiated elsewhere without `__global__` (is it a kernel? is it
    referenced?)."""

    def __init__(self, facts: Mapping[str, FileFacts],
                 load: Callable[[str], cxx.Source | None]) -> None:
        self._facts = facts
        self._load = load
        self._sources: dict[str, cxx.Source | None] = {}
        self.macros = instantiation_macros(m for f in facts.values() for m in f.macros)
        index: dict[str, list[str]] = {}
        for path, f in facts.items():
            for token in f.tokens:
                index.setdefault(token, []).append(path)
        self._index = index
        """token → files whose text holds it, in `facts` order: built once, in one pass."""
        self._kernels: dict[str, bool] = {}
        self._signatures: dict[str, list[cxx.TemplateSignature]] = {}
        self._refs: dict[tuple[str, str], int] = {}
        """(name, file) → line of its first reference there, 0 for none."""

    @classmethod
    def of_sources(cls, sources: Mapping[str, cxx.Source]) -> InstantiationAnalysis:
        """The analysis of parsed sources (what the transform has in memory)."""
        facts = {p: file_facts(p, s.text, s) for p, s in sorted(sources.items())}
        return cls(facts, sources.get)

    def source(self, path: str) -> cxx.Source | None:
        if path not in self._sources:
            self._sources[path] = self._load(path)
        return self._sources[path]

    def found(self, path: str) -> list[FoundInstantiation]:
        """Every site in `path` (direct and macro-generated), in file order."""
        facts = self._facts.get(path)
        if facts is None:
            return []
        out = list(facts.instantiations)
        if not facts.tokens.isdisjoint(self.macros):
            src = self.source(path)
            if src is not None:
                out.extend(macro_sites(src, self.macros))
        return sorted(out, key=lambda f: f.start)

    def sites(self, paths: Iterable[str], params: SiteRules, *, separable: str = ""
              ) -> list[InstantiationSite]:
        """The decided sites of `paths`, in path and file order. `separable`: why the build
        links device code across units (`-rdc=true`, CUDA_SEPARABLE_COMPILATION), '' when it
        does not."""
        out: list[InstantiationSite] = []
        for path in paths:
            here: list[InstantiationSite] = []
            for item in self.found(path):
                kernel = item.declared_kernel or self.is_kernel(item.name)
                same, why = self.compare(item) if kernel else (None, "")
                action, note, ref = self._decide(item, kernel, params, separable, same=same,
                                                 why=why)
                here.append(InstantiationSite(found=item, kernel=kernel, action=action,
                                              note=note, referenced_from=ref,
                                              repeats_definition=same))
            # A host template's instantiation is guarded only beside the kernels it goes with:
            # MSVC accepts it, and a file whose kernel instantiations all stay needs no edit.
            if not any(s.kernel and s.action in ("edit", "refused") for s in here):
                here = [replace(s, action="keep", note="MSVC accepts host template "
                                "instantiations, and no kernel instantiation of this file is "
                                "guarded") if not s.kernel and s.action == "edit" else s
                        for s in here]
            out += here
        return out

    def is_kernel(self, name: str) -> bool:
        """A function template `name` is declared `__global__` in some source. Only the files
        that hold both `__global__` and the name are parsed for it."""
        if name not in self._kernels:
            self._kernels[name] = bool(self.kernel_templates(name))
        return self._kernels[name]

    def kernel_templates(self, name: str) -> list[tuple[str, cxx.TemplateSignature]]:
        """(path, signature) of every `__global__` function template `name` in the sources
        (declarations and definitions). Only the files that hold both `__global__` and the
        name are parsed for it."""
        return [(path, sig) for path in self._index.get(name, ())
                if self._facts[path].may_define_kernels
                for sig in self._signatures_in(path) if sig.name == name and sig.kernel]

    def _signatures_in(self, path: str) -> list[cxx.TemplateSignature]:
        if path not in self._signatures:
            src = self.source(path)
            self._signatures[path] = cxx.template_signatures(src) if src is not None else []
        return self._signatures[path]

    def compare(self, item: FoundInstantiation) -> tuple[bool | None, str]:
        """Whether a kernel instantiation repeats the qualifiers of its template's parameter
        list (True), differs from every declaration with as many parameters (False), or
        cannot be compared (None), with the evidence in words. A macro use is each of its
        expansion's instantiations: one that differs decides, then one not compared."""
        if not item.members:
            return self._compare(item.name, item.target, item.shape, item.path)
        verdicts = [self._compare(name, f"{target} {item.target}", shape, item.path)
                    for name, target, shape in item.members]
        return next((v for v in verdicts if v[0] is False), None) or \
            next((v for v in verdicts if v[0] is None), verdicts[0])

    def _compare(self, name: str, target: str, shape: cxx.Shape | None, site: str
                 ) -> tuple[bool | None, str]:
        if shape is None:
            return None, "its parameter list could not be read (a qualifier spelled through " \
                "a macro, a parameter pack or a function pointer)"
        every = self.kernel_templates(name)
        # The definition is what the instantiation names (a declaration elsewhere only where
        # no definition was read, readable or not), and one in the site's own file before
        # another file's template of the same name.
        every = [t for t in every if t[1].is_definition] or every
        every = [t for t in every if t[0] == site] or every
        templates = [(p, s) for p, s in every
                     if s.shape is not None and len(s.shape) == len(shape)]
        if not templates:
            return None, (f"no `__global__` template {name} with "
                          f"{len(shape)} parameters was read in the sources")
        # A cv-qualified or pointer template argument (`k<const float>`) moves qualifiers
        # into the pointee: only the pointer levels' own qualifiers are compared then.
        args = target.partition("<")[2] + target.partition("(")[2]
        loose = any(w in args for w in ("const", "volatile", "*", "&"))

        def comparable(shape: cxx.Shape) -> cxx.Shape:
            return tuple(_own_levels(x) for x in shape) if loose else shape
        here = comparable(shape)
        for where, sig in templates:
            assert sig.shape is not None
            if comparable(sig.shape) == here:
                return True, (f"it repeats the qualifiers of {name}'s parameters at "
                              f"{where}:{sig.line}")
        # A template argument that is itself a pointer (`k<float*>`) adds levels: those
        # parameters are not compared, and without a comparable one there is no verdict.
        for where, sig in templates:
            assert sig.shape is not None
            pairs = list(zip(comparable(sig.shape), here, strict=True))
            if not loose and all(_levels(a) == _levels(b) for a, b in pairs):
                i = next(i for i, (a, b) in enumerate(pairs) if a != b)
                return False, (
                    f"parameter {i + 1} is `{sig.parameters[i]}` at {where}:{sig.line}; here "
                    f"it {_difference(sig.shape[i], shape[i])}, and MSVC mangles "
                    "`__restrict__` and a pointer's own `const` as written")
        return None, (f"its parameters differ from {name}'s at {templates[0][0]}:"
                      f"{templates[0][1].line} in a way its template arguments may explain "
                      "(a pointer or cv-qualified argument)")

    def _decide(self, item: FoundInstantiation, kernel: bool, params: SiteRules,
                separable: str, *, same: bool | None, why: str
                ) -> tuple[SiteAction, str, str]:
        """(action, why in words, another file's reference that keeps a host template)."""
        guard = _guarded_by(item.conditionals, params.guard)
        if guard:
            return "already", guard, ""
        if kernel and same:
            return "keep", f"{why}: MSVC accepts it", ""
        if item.inside:
            return "refused", (f"inside {item.inside}: a guard or a removal here would split "
                               "it; guard the macro's uses, or fix the line (a space after a "
                               "backslash?) with a diff"), ""
        if kernel and separable:
            # Under whole-program compilation a kernel instantiated here cannot be launched
            # from another unit (FACTS.md, -static-global-template-stub); with relocatable
            # device code it can, and guarding it breaks the device link (LNK2019 on Windows).
            ref = self.referenced_elsewhere(item.name, item.path)
            if ref:
                return "refused", (f"kernel {item.name} is referenced from {ref} and the build "
                                   f"links device code across units ({separable}): guarding "
                                   "it here breaks the device link"), ""
        if not kernel and params.keep_referenced:
            ref = self.referenced_elsewhere(item.name, item.path)
            if ref:
                return "keep", f"host template {item.name} is referenced from {ref}", ref
        return "edit", why, ""

    def referenced_elsewhere(self, name: str, path: str) -> str:
        """`file:line` of the first reference to `name` outside `path`, or ''. Only the files
        whose tokens hold `name` are parsed, and each (name, file) is looked at once."""
        for other in self._index.get(name, ()):
            if other == path:
                continue
            key = (name, other)
            if key not in self._refs:
                src = self.source(other)
                refs = cxx.identifier_references(src, name) if src is not None else []
                self._refs[key] = src.line_of(refs[0]) if src is not None and refs else \
                    self._macro_reference(src, other, name) if src is not None else 0
            if self._refs[key]:
                return f"{other}:{self._refs[key]}"
        return ""

    def _macro_reference(self, src: cxx.Source, path: str, name: str) -> int:
        """The line of a `#define` in `path` whose body names `name` and that is expanded
        somewhere (`#define DISPATCH(T) launch_k<T>(…)` used as `DISPATCH(float)`): the call
        happens where the macro is used, so the template is referenced (0 for none)."""
        for m in cxx.macro_definitions(src):
            if m.name == name or name not in _TOKEN.findall(m.body):
                continue
            for user in self._index.get(m.name, ()):
                if user != path:
                    return m.line  # another file names the macro: it uses (or redefines) it
                text = src.text
                spans = [(d.start, d.end) for d in cxx.macro_definitions(src)
                         if d.name == m.name]
                # The defining file: a mention outside its #define(s) is a use.
                for hit in re.finditer(rf"\b{re.escape(m.name)}\b", text):
                    at = len(text[:hit.start()].encode("utf-8"))
                    if not any(s <= at < e for s, e in spans):
                        return m.line
        return 0


def _own_levels(shape: str) -> str:
    """A parameter's shape without its pointee's qualifiers (`c*r` -> `*r`)."""
    first = re.search(r"&&|[*&]", shape)
    return shape[first.start():] if first else ""


def _levels(shape: str) -> int:
    return len(re.findall(r"&&|[*&]", shape))


def _difference(definition: str, here: str) -> str:
    """How a parameter's shape at the instantiation differs from its definition's (as many
    levels), in words: `has no `__restrict__``, `adds `const``."""
    words = {"c": "const", "r": "__restrict__", "v": "volatile"}

    def parts(shape: str) -> list[set[str]]:
        # The pointee's qualifiers, then each level's.
        head, *levels = re.split(r"&&|[*&]", shape)
        return [set(head), *(set(level) for level in levels)]
    for a, b in zip(parts(definition), parts(here), strict=True):
        missing, extra = sorted(a - b), sorted(b - a)
        if missing or extra:
            return "; ".join(filter(None, [
                "has no " + ", ".join(f"`{words[q]}`" for q in missing) if missing else "",
                "adds " + ", ".join(f"`{words[q]}`" for q in extra) if extra else ""]))
    return "differs"


def _guarded_by(conditionals: Iterable[cxx.Conditional], guard: str) -> str:
    """The enclosing conditional that already hides the site from MSVC, as text, or ''."""
    hidden = MSVC_GUARDS | {cxx.normalize_condition(guard)}
    for cond in conditionals:
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
