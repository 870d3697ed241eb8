"""Findings checked against the real preprocessor (`source.preprocess`).

The scan's own `#if` evaluator reads the text; where a CUDA toolkit is present and the build's
compile commands are known (from the configured build, `Reach.units`: each unit's real include
folders, defines, flags and arch flags; else a setup.py's extensions as read), the findings
whose verdict hangs on a gate are checked against what nvcc's own preprocessor passes keep:

* instructions and shared-memory budgets (FB160, FB170): the target's device pass;
* host-compiler problems on Windows (POSIX headers and types, GCC extensions and inline
  assembly, windows.h macros, dlfcn, C++ MSVC reads otherwise): the Windows host pass,
  emulated on Linux (the finding says so);
* a host `.cpp` reaching CCCL (FB222): the host compiler's pass stops at the CCCL header.

A line no unit keeps in that pass turns the finding into a note; a line some unit keeps
confirms it. Either way the finding's `truth` becomes `preprocessor`. Where a pass fails, or a
file is included by more units than are checked, the static verdict stands. Nothing runs with
`--static`, and the scan's one `truth` line says which it was and why.
"""

from __future__ import annotations

import importlib.util
import os
import sysconfig
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild import platforms
from flashbuild.scanning.facts import CcclFacts, InstructionFacts, PlaceholderFacts
from flashbuild.scanning.findings import (
    Finding,
    ScanOptions,
    ScanTarget,
    Severity,
    Stage,
    Truth,
)
from flashbuild.source.hostinclude import is_cccl_header

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.source.preprocess import PassResult, Toolchain, Unit
    from flashbuild.source.reach import Reach

DEVICE_RULES = frozenset({"FB160", "FB170"})
HOST_RULES = frozenset({"FB101", "FB110", "FB111", "FB112", "FB114", "FB115", "FB116",
                        "FB120", "FB121", "FB122", "FB130"})
#: Units preprocessed per file a finding sits in, and per scan: enough to decide the files
#: the findings name without preprocessing a whole tree.
UNITS_PER_FILE = 4
UNITS_PER_SCAN = 32
PLACEHOLDER_RULE = "FB154"
#: A placeholder's gate is on `__CUDA_ARCH__`, which no unit's flags change: one unit per file
#: that holds such a gate is evidence enough, and at most this many units are added for them
#: (each costs a device pass through the tree's headers: 8 took a cold FlashMLA scan from
#: 11.5 s to 59 s on this machine; the gates left over stay static reading, and say so).
PLACEHOLDER_UNITS = 2


def apply_preprocessor(root: Path, findings: list[Finding], reach: Reach | None,
                       target: ScanTarget, opts: ScanOptions, *, stage: Stage | None = None,
                       ) -> tuple[list[Finding], str]:
    """The findings, with the preprocessor's verdict where it can give one, and the one line
    that says what decided the gates. `stage` is told when the passes start."""
    if opts.static:
        return findings, "static reading (--static): no preprocessor or compiler was run"
    if reach is None:
        return findings, ("static reading: no compile commands are known for this tree (a "
                          "CMake build that was not configured, or no build files), so no "
                          "preprocessor pass was run")
    wanted = [f for f in findings if _checkable(f, target)]
    if not wanted:
        return findings, ("no preprocessor pass needed: no finding hangs on a gate the "
                          "preprocessor decides")
    toolchain = find_toolchain()
    if toolchain is None:
        return findings, ("static reading: no CUDA toolkit with nvcc was found, so the gates "
                          "were evaluated by flashbuild's own reader")
    units, capped = units_for(reach, {f.path for f in wanted
                                      if f.rule not in ("FB222", PLACEHOLDER_RULE)},
                              {f.facts.source for f in wanted if isinstance(f.facts, CcclFacts)})
    units.update(_placeholder_units(reach, wanted, units))
    if not units:
        return findings, "static reading: no compiled unit includes the files of the findings"
    from flashbuild.proc import ProcessRunner  # noqa: PLC0415  # start-up
    from flashbuild.source.preprocess import TIMEOUT_S as pp_timeout  # noqa: PLC0415
    from flashbuild.source.preprocess import Preprocessor  # noqa: PLC0415  # start-up

    cache = platforms.current().user_cache_dir(os.environ) / "preprocess"
    pp = Preprocessor(root, toolchain, ProcessRunner(), cache, host_includes(),
                      jobs=opts.jobs or 0)
    arch = target.archs[0]
    # Only the passes a finding asks about: the device pass for instructions, the (emulated)
    # Windows host pass for host-compiler findings, the host compiler's for FB222.
    kinds = {"device" for f in wanted if f.rule in DEVICE_RULES or f.rule == PLACEHOLDER_RULE}
    kinds |= {"windows-host" for f in wanted if f.rule in HOST_RULES}
    kinds |= {"host" for f in wanted if f.rule == "FB222"}
    what = f"preprocessing {len(units)} unit(s) for {arch.sm} (nvcc --dryrun passes)"
    if stage is not None:
        stage(what)
    passes = pp.run(list(units.values()), arch, windows=target.platform == "windows",
                    kinds=frozenset(kinds),
                    on_done=None if stage is None else
                    lambda done: stage(f"{what} [{done}/{len(units)}]"))
    includers = includers_of(reach)
    out = [(_judge_placeholder(f, passes, includers, target) if f.rule == PLACEHOLDER_RULE
            else _judge(f, passes, includers, target, capped)) if f in wanted else f
           for f in findings]
    out = _placeholder_summary(out)
    stubbed = sorted({s for ps in passes.values() for p in ps for s in p.stubbed})
    line = (f"preprocessor (nvcc {toolchain.version} --dryrun passes, {arch.sm} device pass"
            + (", Windows host pass emulated on Linux" if target.platform == "windows" else "")
            + f") for {len(units)} unit(s): {pp.stats['run']} pass(es) run, "
            f"{pp.stats['cached']} cached")
    timed_out = sorted({p.unit for ps in passes.values() for p in ps if p.timed_out})
    if timed_out:
        line += (f"; {len(timed_out)} unit(s) timed out after {pp_timeout:g} s, their static "
                 f"verdict stands ({', '.join(timed_out[:3])}"
                 + (" …)" if len(timed_out) > 3 else ")"))
    if stubbed:
        line += f"; {len(stubbed)} header(s) absent here were stubbed ({', '.join(stubbed[:3])}"
        line += " …)" if len(stubbed) > 3 else ")"
    return out, line


def _checkable(f: Finding, target: ScanTarget) -> bool:
    if f.rule == PLACEHOLDER_RULE:
        return isinstance(f.facts, PlaceholderFacts) and bool(f.facts.kernel)
    if f.severity is Severity.NOTE:
        # An instruction under a gate the static reader could not decide: the pass decides.
        return isinstance(f.facts, InstructionFacts) and bool(f.facts.undecided)
    return f.rule in DEVICE_RULES or f.rule == "FB222" or (
        target.platform == "windows" and f.rule in HOST_RULES)


def find_toolchain() -> Toolchain | None:
    """The toolkit doctor would choose (CUDA_HOME, PATH, standard folders, PyPI)."""
    from flashbuild.detect.cuda import find_toolkits  # noqa: PLC0415  # start-up
    from flashbuild.proc import ProcessRunner  # noqa: PLC0415  # start-up
    from flashbuild.source.preprocess import Toolchain  # noqa: PLC0415  # start-up

    site = [Path(p) for p in {sysconfig.get_paths()["purelib"],
                              sysconfig.get_paths()["platlib"]}]
    search = find_toolkits(os.environ, ProcessRunner(), platforms.current(),
                           site_packages=site)
    tk = search.chosen
    if tk is None or tk.nvcc is None:
        return None
    return Toolchain(nvcc=tk.nvcc, include=tk.root / "include",
                     version=str(tk.version) if tk.version else "?")


def host_includes() -> tuple[str, ...]:
    """torch's and Python's include folders, found without importing torch."""
    out: list[str] = []
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        inc = Path(spec.origin).parent / "include"
        out += [str(inc), str(inc / "torch" / "csrc" / "api" / "include")]
    out.append(sysconfig.get_paths()["include"])
    return tuple(p for p in out if Path(p).is_dir())


def includers_of(reach: Reach) -> dict[str, set[str]]:
    """File → the compiled units that include it (transitively), the unit itself included."""
    out: dict[str, set[str]] = {}
    for unit in reach.compiled:
        seen = {unit}
        stack = [unit]
        while stack:
            cur = stack.pop()
            for inc in reach.includes.get(cur, ()):
                if inc.resolved and inc.resolved not in seen:
                    seen.add(inc.resolved)
                    stack.append(inc.resolved)
        for path in seen:
            out.setdefault(path, set()).add(unit)
    return out


def units_for(reach: Reach, paths: set[str], sources: set[str]
           ) -> tuple[dict[str, Unit], set[str]]:
    """The units to preprocess (per source), and the files more units include than are
    checked (their absence from the checked passes proves nothing)."""
    from flashbuild.source.preprocess import Unit  # noqa: PLC0415  # start-up

    # The configured build's own flags per unit when it was asked; else setup.py's as read.
    flags: dict[str, Unit] = dict(reach.units)
    for ext in reach.setup.built_for_target() if reach.setup is not None and not flags else ():
        for src in ext.sources:
            cuda = src.endswith(".cu")
            flags.setdefault(src, Unit(src, ext.include_dirs,
                                       ext.nvcc_flags if cuda else ext.cxx_flags))
    includers = includers_of(reach)
    chosen: dict[str, Unit] = {s: flags[s] for s in sorted(sources) if s in flags}
    capped: set[str] = set()
    for path in sorted(paths):
        units = sorted(u for u in includers.get(path, ()) if u in flags)
        if len(units) > UNITS_PER_FILE:
            capped.add(path)
        for u in units[:UNITS_PER_FILE]:
            if len(chosen) < UNITS_PER_SCAN:
                chosen[u] = flags[u]
            else:
                capped.add(path)
    return chosen, capped


def _judge(  # noqa: PLR0911 - one return per verdict
        f: Finding, passes: Mapping[str, Sequence[PassResult]],
        includers: Mapping[str, set[str]], target: ScanTarget, capped: set[str]) -> Finding:
    if f.rule == "FB222":
        return _judge_cccl(f, passes)
    units = [u for u in sorted(includers.get(f.path, ())) if u in passes]
    device = f.rule in DEVICE_RULES
    code = target.archs[0].code * 10
    relevant: list[PassResult] = []
    for u in units:
        for p in passes[u]:
            if (device and p.arch == code) or (not device and p.emulated):
                relevant.append(p)
    if not relevant or any(not p.ok for p in relevant):
        return f
    what = relevant[0].name if device else "Windows host"
    emulated = " (emulated on Linux: MSVC's macros, GCC's library headers)" \
        if not device else ""
    keeps = [p.unit for p in relevant if f.line in p.lines.get(f.path, frozenset())]
    if keeps and f.severity is Severity.NOTE and isinstance(f.facts, InstructionFacts):
        sm = target.archs[0].sm
        return replace(f, severity=Severity.ERROR, truth=Truth.PREPROCESSOR,
                       message=f"`{f.facts.instruction}` is compiled for {sm}, which "
                       f"lacks it (needs {f.facts.needs_arch})",
                       evidence=f"inline PTX under `{' / '.join(f.facts.undecided)}`, which "
                       f"the {what} pass of {keeps[0]} keeps")
    if keeps:
        return replace(f, truth=Truth.PREPROCESSOR,
                       evidence=f"{f.evidence}; the {what} pass{emulated} of {keeps[0]} keeps "
                       "this line")
    if f.path in capped:
        return f
    if f.severity is Severity.NOTE:
        return replace(f, truth=Truth.PREPROCESSOR,
                       evidence=f"{f.evidence}; the {what} pass of every unit that includes "
                       "it drops this line")
    return replace(f, severity=Severity.NOTE, truth=Truth.PREPROCESSOR,
                   message=f"not compiled for {target.label}: {f.message}",
                   evidence=f"{f.evidence}; but the {what} pass{emulated} of every unit that "
                   f"includes it ({', '.join(p.unit for p in relevant[:3])}) drops this line")


def _judge_cccl(f: Finding, passes: Mapping[str, Sequence[PassResult]]) -> Finding:
    src = f.facts.source if isinstance(f.facts, CcclFacts) else ""
    host = [p for p in passes.get(src, ()) if p.arch is None and not p.emulated]
    if not host:
        return f
    missing = [s for s in host[0].stubbed if is_cccl_header(s)]
    if missing:
        return replace(f, truth=Truth.PREPROCESSOR,
                       evidence=f"{f.evidence}; the host compiler's preprocessor stops at "
                       f"<{missing[0]}> (No such file or directory)")
    if host[0].ok:
        return replace(f, severity=Severity.NOTE, truth=Truth.PREPROCESSOR,
                       message=f"not an error with this toolkit: {f.message}",
                       evidence=f"{f.evidence}; but the host compiler's preprocessor finds "
                       "every header of it with this toolkit")
    return f


def _placeholder_units(reach: Reach, wanted: Sequence[Finding], chosen: Mapping[str, Unit]
                       ) -> dict[str, Unit]:
    """One unit per file that holds a placeholder's gate (FB154), a unit already chosen
    first; at most `PLACEHOLDER_UNITS` more."""
    gates = sorted({f.facts.gate_path for f in wanted
                    if isinstance(f.facts, PlaceholderFacts) and f.facts.kernel})
    if not gates:
        return {}
    flags, _capped = units_for(reach, set(gates), set())
    includers = includers_of(reach)
    out: dict[str, Unit] = {}
    for path in gates:
        units = sorted(u for u in includers.get(path, ()) if u in flags)
        if not units or any(u in chosen or u in out for u in units):
            continue
        if len(out) < PLACEHOLDER_UNITS and len(chosen) + len(out) < UNITS_PER_SCAN:
            out[units[0]] = flags[units[0]]
    return out


def _judge_placeholder(f: Finding, passes: Mapping[str, Sequence[PassResult]],
                       includers: Mapping[str, set[str]], target: ScanTarget) -> Finding:
    """FB154 against the target's device pass: confirmed when a unit's pass drops the work
    and keeps the trap; a note when it keeps the work (not a placeholder after all)."""
    facts = f.facts
    if not isinstance(facts, PlaceholderFacts):
        return f
    code = target.archs[0].code * 10
    relevant = [p for u in sorted(includers.get(facts.gate_path, ())) if u in passes
                for p in passes[u] if p.arch == code]
    if not relevant or any(not p.ok for p in relevant):
        return f
    lines = [p.lines.get(facts.gate_path, frozenset()) for p in relevant]
    if any(facts.work_line in kept for kept in lines):
        keeper = next(p for p, kept in zip(relevant, lines, strict=True)
                      if facts.work_line in kept)
        return replace(f, severity=Severity.NOTE, truth=Truth.PREPROCESSOR,
                       message=f"not a placeholder for {target.label}: {f.message}",
                       evidence=f"{f.evidence}; but the {keeper.name} pass of {keeper.unit} "
                       f"keeps the work ({facts.gate_path}:{facts.work_line})")
    if facts.trap_line and not all(facts.trap_line in kept for kept in lines):
        return f
    p = relevant[0]
    kept = f" and keeps line {facts.trap_line}" if facts.trap_line else ""
    return replace(f, truth=Truth.PREPROCESSOR,
                   evidence=f"{f.evidence}; the {p.name} pass of {p.unit} drops line "
                   f"{facts.work_line}{kept}")


def _placeholder_summary(findings: list[Finding]) -> list[Finding]:
    """The FB154 summary rests on the preprocessor when every kernel finding does; it stays
    static when some were not checked, and becomes a note when one proved not a placeholder
    (the count it states no longer holds)."""
    kernels = [f for f in findings if f.rule == PLACEHOLDER_RULE and
               isinstance(f.facts, PlaceholderFacts) and f.facts.kernel]
    if not kernels:
        return findings
    wrong = any(f.severity is Severity.NOTE for f in kernels)
    sure = all(f.truth is Truth.PREPROCESSOR for f in kernels)
    out = []
    for f in findings:
        summary = f.rule == PLACEHOLDER_RULE and isinstance(f.facts, PlaceholderFacts) and \
            not f.facts.kernel
        if summary and wrong:
            out.append(replace(f, severity=Severity.NOTE, truth=Truth.PREPROCESSOR,
                               evidence=f"{f.evidence}; but the preprocessor keeps the work of "
                               "some of these kernels (FB154 notes)"))
        elif summary and sure:
            out.append(replace(f, truth=Truth.PREPROCESSOR,
                               evidence=f"{f.evidence}; every kernel's gate confirmed by the "
                               "device pass"))
        else:
            out.append(f)
    return out
