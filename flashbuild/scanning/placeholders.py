"""Kernels whose body, for the target's device pass, is only a placeholder (FB154).

A tree written for one arch often compiles for every other arch a stub in place of the kernel:

    __global__ void k(Params p) {
    #if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
      ... the real kernel ...
    #else
      if (cute::thread0()) { CUTE_INVALID_CONTROL_PATH("This kernel only supports sm90"); }
    #endif
    }

Built for sm_120 such a kernel compiles, links and imports, and traps at its first launch
(FlashMLA: every sm90 and sm100 kernel). The per-file half (`file_bodies`, in the worker) reads
each `__global__` function, and each `__device__` function a kernel may consist of, on the
parse the other checks use: the statements of its body the target's device pass keeps (the
`#if` branches evaluated as for every other device finding), whether they are only a trap
(`__trap()`, `asm("trap;")`, `__brkpt()`, `assert(0 …)`, `printf`, `CUTE_INVALID_CONTROL_PATH`
and macros of the tree whose body is those, possibly under an `if`) or nothing, and which
archs' passes keep the work instead. The tree-wide half (`placeholder_findings`) follows a
kernel whose whole body is one call to a placeholder device function, reports one warning
per kernel, and one error when every kernel the build compiles (or every kernel of some
compiled units) is a placeholder: a build that holds no working kernel for the target.

An empty body for the target is reported too: a launch then succeeds and writes nothing,
which is worse than a trap (the caller reads garbage and no error is raised). Bodies whose
gates the static reader cannot decide are left alone; so is code a gate drops for every arch
(`#if 0`, an option), which is not an arch placeholder.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from flashbuild.arch import Arch, Suffix
from flashbuild.scanning.facts import PlaceholderFacts, RuntimeMajorFacts
from flashbuild.scanning.findings import (
    Category,
    Finding,
    Fix,
    KernelCount,
    Severity,
    source_line,
)
from flashbuild.source import cxx, traps
from flashbuild.source.pp import device_pass

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from tree_sitter import Node

    from flashbuild.scanning.checks_cxx import _Ctx
    from flashbuild.scanning.findings import FileReport, ScanTarget
    from flashbuild.source.pp import Pass

_KERNEL = re.compile(r"\b__global__\b|\b[A-Z_]*GLOBAL[A-Z_]*\b")
_DEVICE = re.compile(r"\b__device__\b|\b[A-Z_]*DEVICE[A-Z_]*\b")
#: Text any file with a kernel or device function holds (the per-file half is skipped without).
HINTS = ("__global__", "GLOBAL", "__device__", "DEVICE")
#: The archs whose device passes are tried to say what a placeholder's body is written for.
PROBES = (Arch(8, 0), Arch(8, 6), Arch(8, 9), Arch(9, 0), Arch(10, 0), Arch(10, 3),
          Arch(11, 0), Arch(12, 0), Arch(12, 1))
_PREPROC = ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef", "preproc_else")
_NEUTRAL = ("return_statement", "expression_statement", "declaration", "comment", ";")

State = Literal["placeholder", "work", "undecided", "call"]


@dataclass(frozen=True)
class Body:
    """What one kernel's or device function's body is for one device pass."""

    name: str
    """The function's own name (`run` for `Impl::run`)."""
    kernel: bool
    line: int
    state: State
    """`placeholder`: only a trap or nothing; `call`: one call to `callee`, nothing else;
    `work`: anything else; `undecided`: a gate the static reader cannot decide."""
    callee: str = ""
    gate_line: int = 0
    gate: str = ""
    """The `#if` condition that drops the work for the target."""
    work_line: int = 0
    """First line of the work the target's pass drops."""
    trap_line: int = 0
    """First line of the trap the target's pass keeps; 0 for an empty body."""
    trap: str = ""
    written_for: tuple[str, ...] = ()
    """The archs (`sm_90`) whose device passes keep the work."""
    head: str = ""
    """The function's first line, as written (the finding's snippet)."""


def file_bodies(ctx: _Ctx, arch: Arch, dev: Pass) -> tuple[list[Body], list[str]]:
    """The kernels of a file (each with its state) and its placeholder device functions, for
    the `dev` pass; and the names of its other device functions (a kernel calling a name some
    file defines with real work is not followed)."""
    bodies: list[Body] = []
    working: list[str] = []
    for fn in cxx._of_type(ctx.src.root, ("function_definition",)):
        body = fn.child_by_field_name("body")
        if body is None or body.type != "compound_statement":
            continue
        head = ctx.src.slice(fn.start_byte, body.start_byte)
        kernel = bool(_KERNEL.search(head))
        if not kernel and not _DEVICE.search(head):
            continue
        name = _name(fn)
        if not name:
            continue
        line = ctx.src.line_of(fn.start_byte)
        found = replace(_judge(ctx, body, name, kernel, line, dev, arch),
                        head=source_line(ctx.file.text, line))
        if kernel or found.state == "placeholder":
            bodies.append(found)
        else:
            working.append(name)
    return bodies, working


def _name(fn: Node) -> str:
    decl = cxx._function_declarator(fn.child_by_field_name("declarator"))
    node = cxx._declared_name(decl.child_by_field_name("declarator")) if decl else None
    return node.text.decode("utf-8", "replace") if node is not None and node.text else ""


def _leaves(node: Node) -> Iterator[Node]:
    """The statements of a body, through the `#if` branches at its top level."""
    skip = (node.child_by_field_name("condition") or node.child_by_field_name("name")
            if node.type in _PREPROC else None)
    for child in node.named_children:
        if skip is not None and child.id == skip.id:
            continue
        if child.type in _PREPROC:
            yield from _leaves(child)
        elif child.type != "comment":
            yield child


def _judge(ctx: _Ctx, body: Node, name: str, kernel: bool,  # noqa: PLR0917
           line: int, dev: Pass, arch: Arch) -> Body:
    leaves = list(_leaves(body))
    gated = any(c.type in _PREPROC for c in body.named_children)
    if not gated:
        callee = _single_call(ctx, leaves) if kernel else ""
        return Body(name, kernel, line, "call" if callee else "work", callee=callee)
    states = [(leaf, ctx.active(leaf, dev)) for leaf in leaves]
    if any(s is None for _l, s in states):
        return Body(name, kernel, line, "undecided")
    kept = [leaf for leaf, s in states if s == 1]
    dropped = [leaf for leaf, s in states if s == 0 and not _trap_or_neutral(ctx, leaf)[0]]
    if not dropped:
        callee = _single_call(ctx, kept) if kernel else ""
        return Body(name, kernel, line, "call" if callee else "work", callee=callee)
    traps = [_trap_or_neutral(ctx, leaf) for leaf in kept]
    if not all(ok for ok, _trap in traps):
        callee = _single_call(ctx, kept) if kernel else ""
        return Body(name, kernel, line, "call" if callee else "work", callee=callee)
    written = tuple(p.sm for p in PROBES if p.code != arch.code and
                    any(ctx.active(leaf, _probe(ctx.target.platform, p)) == 1
                        for leaf in dropped))
    if not written:
        return Body(name, kernel, line, "work")  # dropped for every arch: not an arch gate
    gate = next((c for c in cxx.enclosing_conditionals(ctx.src, dropped[0])), None)
    trap = next((leaf for leaf, (_ok, is_trap) in zip(kept, traps, strict=True) if is_trap),
                None)
    return Body(name, kernel, line, "placeholder",
                gate_line=gate.line if gate else 0, gate=gate.condition if gate else "",
                work_line=ctx.src.line_of(dropped[0].start_byte),
                trap_line=ctx.src.line_of(_first_trap(ctx, trap).start_byte) if trap else 0,
                trap=" ".join(ctx.src.node_text(_first_trap(ctx, trap)).split())[:120]
                if trap else "",
                written_for=written)


@functools.cache
def _probe(platform: str, arch: Arch) -> Pass:
    """One device pass per arch, kept: `_Ctx` memoises macros by the pass's id."""
    return device_pass(platform, arch)


def _single_call(ctx: _Ctx, leaves: Sequence[Node]) -> str:
    """The name a body's one statement calls (`Kernel::devfunc(params)`), else ''."""
    work = [leaf for leaf in leaves if leaf.type not in ("return_statement", ";")]
    if len(work) != 1 or work[0].type != "expression_statement":
        return ""
    call = work[0].named_children[0] if work[0].named_children else None
    if call is None or call.type != "call_expression":
        return ""
    return _callee(call)


def _callee(call: Node) -> str:
    return traps.callee(call)


def _trap_or_neutral(ctx: _Ctx, node: Node) -> tuple[bool, bool]:
    """(does no work, holds a trap): source/traps.py's reading, with the tree's trap macros."""
    return traps.does_no_work(ctx.src, node, lambda name: _trap_macro(ctx, name))


def _trap_macro(ctx: _Ctx, name: str) -> bool:
    """A function-like macro of the tree (or of a header it includes) whose body only traps:
    it names a trap and assigns, indexes or returns nothing."""
    bodies = [d.body for d in ctx.defines.get(name, ())]
    bodies += [body for body, _c, _w in ctx.inherited.get(name, ())]
    return bool(bodies) and all(traps.trap_macro_body(b) for b in bodies)


def _first_trap(ctx: _Ctx, node: Node) -> Node:
    """The first trap statement inside `node` (the `printf` inside `if (thread0()) {…}`)."""
    return traps.first_trap(ctx.src, node, lambda name: _trap_macro(ctx, name))


# --- the tree-wide half ---------------------------------------------------------------------

@dataclass(frozen=True)
class _Kernel:
    path: str
    body: Body
    via: Body | None
    """The placeholder device function the kernel's one call reaches, if that is the case."""
    via_path: str = ""


def placeholder_findings(reports: Sequence[FileReport], target: ScanTarget,
                         units: Mapping[str, set[str]] | None,
                         compiled: Callable[[str], bool] = lambda _path: True) -> list[Finding]:
    """FB154: one warning per kernel whose body for the target is a placeholder, and one error
    when every kernel the build compiles, or every kernel of some compiled units, is one.
    `units`: file → the compiled units that include it (None: the tree is read as one unit);
    `compiled`: whether the build compiles a file for the target (its build-file gates)."""
    reports = [r for r in reports if "bodies" not in r.facts or compiled(r.path)]
    out: list[Finding] = []
    for arch in target.archs:
        kernels, dead = _kernels(reports, arch)
        for k in dead:
            out.append(_kernel_finding(k, arch))
        if dead:
            summary = _summary(kernels, dead, arch, units)
            if summary is not None:
                out.append(summary)
    return out


def kernel_counts(reports: Sequence[FileReport], target: ScanTarget,
                  compiled: Callable[[str], bool] = lambda _path: True,
                  ) -> tuple[KernelCount, ...]:
    """Per arch of the target, the kernels the compiled files define and how many of them are
    placeholders there (the same reading as `placeholder_findings`)."""
    reports = [r for r in reports if "bodies" not in r.facts or compiled(r.path)]
    out = []
    for arch in target.archs:
        kernels, dead = _kernels(reports, arch)
        out.append(KernelCount(arch=arch, kernels=len(kernels), placeholders=len(dead)))
    return tuple(out)


def _kernels(reports: Sequence[FileReport], arch: Arch) -> tuple[list[_Kernel], list[_Kernel]]:
    """Every kernel of the compiled files, and those that are placeholders for `arch`: their
    own body, or the one device function their body calls (that file's own definition first,
    else the tree's when every definition of the name is a placeholder)."""
    devices: dict[str, dict[str, Body]] = {}
    working: dict[str, set[str]] = {}
    for r in reports:
        bodies, names = r.facts.get("bodies", {}).get(arch.sm, ([], []))
        working[r.path] = set(names)
        devices[r.path] = {b.name: b for b in reversed(bodies) if not b.kernel}
    anywhere = set().union(*working.values()) if working else set()
    kernels: list[_Kernel] = []
    for r in sorted(reports, key=lambda r: r.path):
        for b in r.facts.get("bodies", {}).get(arch.sm, ([], []))[0]:
            if not b.kernel:
                continue
            via, via_path = None, ""
            if b.state == "call" and b.callee in devices[r.path] and \
                    b.callee not in working[r.path]:
                via, via_path = devices[r.path][b.callee], r.path
            elif b.state == "call" and b.callee not in anywhere:
                via_path = next((p for p in sorted(devices) if b.callee in devices[p]), "")
                via = devices[via_path][b.callee] if via_path else None
            kernels.append(_Kernel(r.path, b, via, via_path))
    dead = [k for k in kernels if k.body.state == "placeholder" or k.via is not None]
    return kernels, dead


def _what(b: Body) -> str:
    return "only traps" if b.trap_line else "is empty"


def _kernel_finding(k: _Kernel, arch: Arch) -> Finding:
    b = k.via or k.body
    where = k.via_path or k.path
    written = "/".join(b.written_for)
    through = f" through `{b.name}` ({where}:{b.line}), its whole body," if k.via else ""
    trap = f"; the {arch.sm} pass keeps `{b.trap}` (line {b.trap_line})" if b.trap_line else \
        f"; the {arch.sm} pass keeps no statement of it"
    return Finding(
        rule="FB154", category=Category.ARCH_GATING, path=k.path, line=k.body.line, col=1,
        severity=Severity.WARNING,
        message=f"kernel `{k.body.name}`{through} {_what(b)} on {arch.sm}: its work is gated "
        f"to {written}, so every launch on {arch.sm} "
        + ("traps" if b.trap_line else "does nothing and reports success"),
        evidence=f"`#if {b.gate}` ({where}:{b.gate_line}) drops the work (line {b.work_line}) "
        f"for __CUDA_ARCH__ == {arch.code * 10}{trap}",
        snippet=k.body.head or k.body.name, fix=Fix(manual=_fix_text(b.written_for, arch)),
        facts=PlaceholderFacts(arch=arch, kernel=k.body.name, via=b.name if k.via else "",
                               gate_path=where, gate_line=b.gate_line, work_line=b.work_line,
                               trap_line=b.trap_line, written_for=b.written_for))


def _fix_text(written: Sequence[str], arch: Arch) -> str:
    builds = ", ".join(f"`--arch {_specific(sm)}`" for sm in _generations(written))
    return (f"build for the arch the kernels are written for ({builds}), or add the tree's "
            f"own {arch.sm} implementation; do not widen the `__CUDA_ARCH__` gate to "
            f"{arch.sm}: the code behind it is written for {'/'.join(written)}")


def _generations(written: Sequence[str]) -> list[str]:
    """`sm_90`, `sm_100`: the first arch of each major the work is written for."""
    out: dict[str, str] = {}
    for sm in written:
        code = int(sm.removeprefix("sm_"))
        out.setdefault(str(code // 10), sm)
    return list(out.values())


def _specific(sm: str) -> str:
    """The arch a kernel gated to exactly this code is built for: `a` from sm_90 on (wgmma,
    tcgen05 and their kin exist only on the arch-specific target)."""
    code = int(sm.removeprefix("sm_"))
    return f"{sm}{Suffix.ARCH.value}" if code >= 90 else sm


def _summary(kernels: Sequence[_Kernel], dead: Sequence[_Kernel], arch: Arch,
             units: Mapping[str, set[str]] | None) -> Finding | None:
    dead_keys = {(k.path, k.body.line) for k in dead}
    written = sorted({sm for k in dead for sm in (k.via or k.body).written_for},
                     key=lambda sm: int(sm.removeprefix("sm_")))
    gens = _generations(written)
    traps = any((k.via or k.body).trap_line for k in dead)
    does = "traps" if traps else "does nothing"
    per_unit: dict[str, list[_Kernel]] = {}
    if units is None:
        per_unit = {"": list(kernels)}
    else:
        for k in kernels:
            for unit in units.get(k.path, ()):
                per_unit.setdefault(unit, []).append(k)
    decided = {u: ks for u, ks in per_unit.items()
               if all(k.body.state != "undecided" for k in ks)}
    empty_units = sorted(u for u, ks in decided.items()
                         if ks and all((k.path, k.body.line) in dead_keys for k in ks))
    if not empty_units:
        return None
    every = len(dead) == len(kernels)
    gated = "/".join(gens)
    if every:
        message = (f"kernels for {arch.sm}: none - every kernel is gated to {gated} and "
                   f"{does} on {arch.sm}")
    else:
        alive = sorted({u or k.path for u, ks in per_unit.items() if u not in empty_units
                        for k in ks if (k.path, k.body.line) not in dead_keys})
        shown = ", ".join(alive[:3]) + (f" and {len(alive) - 3} more" if len(alive) > 3 else "")
        message = (f"kernels for {arch.sm}: none in {len(empty_units)} of {len(per_unit)} "
                   f"compiled units with kernels - every kernel they compile is gated to "
                   f"{gated} and {does} on {arch.sm} (only {shown} compile kernels that run)")
    site = empty_units[0] or dead[0].path
    return Finding(
        rule="FB154", category=Category.ARCH_GATING, path=site, line=1, col=1,
        severity=Severity.ERROR, message=message,
        evidence=f"{len(dead)} of {len(kernels)} kernels are placeholders for {arch.sm} "
        f"(FB154 warnings); {len(empty_units)} compiled unit(s) hold no other kernel"
        + (f": {', '.join(u for u in empty_units[:3] if u)}"
           + (" …" if len(empty_units) > 3 else "") if units is not None else ""),
        snippet="(every kernel of the unit)",
        fix=Fix(manual=_fix_text(written, arch)),
        facts=PlaceholderFacts(arch=arch, kernel="", via="", gate_path="", gate_line=0,
                               work_line=0, trap_line=0, written_for=tuple(written)))


def major_checks_guarding(findings: Sequence[Finding]) -> list[Finding]:
    """FB153 (`major == 9`) in a tree whose kernels for the target are placeholders: widening
    the check would route the target into kernels that trap, so its fix says so and suggests
    no `major >= 9`. Tied by the major: a check for 9 guards the kernels written for sm_90."""
    dead = [f.facts for f in findings if f.rule == "FB154" and
            isinstance(f.facts, PlaceholderFacts) and f.facts.kernel]
    if not dead:
        return list(findings)
    out: list[Finding] = []
    for f in findings:
        facts = f.facts
        value = re.search(r"==\s*(\d+)", f.message)
        if f.rule != "FB153" or not isinstance(facts, RuntimeMajorFacts) or value is None:
            out.append(f)
            continue
        arch, major = facts.arch, int(value[1])
        mine = [d for d in dead if d.arch == arch]
        tied = [d for d in mine if any(int(sm.removeprefix("sm_")) // 10 == major
                                       for sm in d.written_for)]
        if not mine:
            out.append(f)
            continue
        which = tied or mine
        names = ", ".join(dict.fromkeys(f"`{d.kernel}`" for d in which[:3]))
        more = f" and {len(which) - 3} more" if len(which) > 3 else ""
        what = (f"the kernels written for major {major} ({names}{more}) only trap on {arch.sm}"
                if tied else f"this tree's kernels for {arch.sm} ({names}{more}) only trap")
        written = sorted({sm for d in which for sm in d.written_for},
                         key=lambda sm: int(sm.removeprefix("sm_")))
        out.append(replace(
            f, evidence=f"{f.evidence}; {what} (FB154)",
            fix=Fix(manual=f"keep the check: widening it (`major >= {major}`) routes {arch.sm} "
                    f"into kernels that trap; {_fix_text(written, arch)}")))
    return out
