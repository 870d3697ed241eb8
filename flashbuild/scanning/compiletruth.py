"""FB160/FB170 confirmed by compiling (issue 18 item 4).

"This instruction does not exist for the target" is a claim about ptxas, so where a toolkit is
present the unit is compiled for the target (`nvcc -c -gencode arch=compute_X,code=sm_X` with
the unit's own include folders and preprocessor flags): rc 0 means no kernel the target
compiles uses the instruction (an uninstantiated template, a branch the compiler drops) and
the finding becomes a note; a ptxas or cicc message naming the instruction confirms it.
Anything else (a header this machine lacks, another error) leaves the static verdict.

Compiling costs seconds to minutes per unit, so it runs by itself only when few units are
needed (`AUTO_UNITS`); `scan --compile` lifts the bound, `scan --static` never compiles.
Verdicts are cached by the content of the unit and of every tree file it includes, the flags,
the toolkit and the arch.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild import platforms
from flashbuild.errors import FlashbuildError
from flashbuild.scanning import truth
from flashbuild.scanning.facts import InstructionFacts
from flashbuild.scanning.findings import Finding, ScanOptions, ScanTarget, Severity, Stage, Truth
from flashbuild.scanning.truth import host_includes, includers_of, units_for

if TYPE_CHECKING:
    from flashbuild.source.preprocess import Toolchain, Unit
    from flashbuild.source.reach import Reach

RULES = frozenset({"FB160", "FB170"})
#: Units compiled without `--compile`: FlashMLA's sm100 units take 16-20 s each on two cores
#: (EXPECTED.md), causal-conv1d's bwd 7 min 48 s, so two is the default budget.
AUTO_UNITS = 2
TIMEOUT_S = 900.0
CACHE_VERSION = 1


def confirm_by_compiling(root: Path, findings: list[Finding], reach: Reach | None,
                         target: ScanTarget, opts: ScanOptions, *, stage: Stage | None = None,
                         ) -> tuple[list[Finding], str]:
    """The findings with the compiler's verdict where it can give one, and one line (empty
    when there was nothing to compile). `stage` is told when the compiles start."""
    wanted = [f for f in findings if f.rule in RULES and f.severity is Severity.ERROR]
    if opts.static or not wanted or opts.compile == "never":
        return findings, ""
    if reach is None:
        return findings, ("compiler: not run (the compile commands of a CMake build are not "
                          "known without configuring it)")
    units, _capped = units_for(reach, {f.path for f in wanted}, set())
    includers = includers_of(reach)
    per_finding = {id(f): sorted(u for u in includers.get(f.path, ()) if u in units)[:1]
                   for f in wanted}
    needed = sorted({u for us in per_finding.values() for u in us})
    if not needed:
        return findings, ""
    if len(needed) > AUTO_UNITS and opts.compile != "always":
        return findings, (f"compiler: not run ({len(needed)} units would be compiled for the "
                          f"instruction findings, above {AUTO_UNITS}; `scan --compile` runs "
                          "them)")
    toolchain = truth.find_toolchain()  # through the module: tests stand in for it
    if toolchain is None:
        return findings, "compiler: not run (no CUDA toolkit with nvcc was found)"
    cache = platforms.current().user_cache_dir(os.environ) / "compile"
    deps = {u: _closure(reach, u) for u in needed}
    if stage is not None:
        stage(f"compiling {len(needed)} unit(s) for {target.archs[0].sm} to confirm "
              "instruction findings")
    verdicts: dict[str, tuple[int, str]] = {}
    ran = 0
    for u in needed:
        key = _key(root, units[u], deps[u], toolchain, target)
        hit = _load(cache, key)
        if hit is None:
            hit = _compile(root, units[u], toolchain, target, host_includes())
            ran += 1
            _store(cache, key, hit)
        verdicts[u] = hit
    out: list[Finding] = []
    for f in findings:
        us = per_finding.get(id(f))
        if not us or us[0] not in verdicts:
            out.append(f)
            continue
        out.append(_judge(f, us[0], verdicts[us[0]], target))
    return out, (f"compiler: nvcc {toolchain.version} compiled {len(needed)} unit(s) for "
                 f"{target.archs[0].sm} ({ran} run, {len(needed) - ran} cached)")


def _judge(f: Finding, unit: str, verdict: tuple[int, str], target: ScanTarget) -> Finding:
    rc, output = verdict
    sm = target.archs[0].sm
    instruction = f.facts.instruction if isinstance(f.facts, InstructionFacts) else ""
    if rc == 0:
        return replace(f, severity=Severity.NOTE, truth=Truth.COMPILER,
                       message=f"compiles for {sm}: {f.message}",
                       evidence=f"{f.evidence}; but nvcc + ptxas compile {unit} for {sm} "
                       "(rc 0): no kernel the target builds uses it")
    hit = next((line for line in output.splitlines()
                if (instruction and instruction in line) or "not supported on .target" in line
                or "too much shared data" in line.lower()), "")
    if hit:
        return replace(f, truth=Truth.COMPILER,
                       evidence=f"{f.evidence}; compiling {unit} for {sm}: {hit.strip()[:200]}")
    return f


def _closure(reach: Reach, unit: str) -> list[str]:
    seen = {unit}
    stack = [unit]
    while stack:
        for inc in reach.includes.get(stack.pop(), ()):
            if inc.resolved and inc.resolved not in seen:
                seen.add(inc.resolved)
                stack.append(inc.resolved)
    return sorted(seen)


def _key(root: Path, unit: Unit, deps: list[str], toolchain: Toolchain,
         target: ScanTarget) -> str:
    h = hashlib.sha256(json.dumps([CACHE_VERSION, toolchain.version, target.archs[0].sm,
                                   list(unit.flags), list(unit.include_dirs)]).encode())
    for rel in deps:
        try:
            h.update(rel.encode() + b"\0" + (root / rel).read_bytes())
        except OSError:
            h.update(rel.encode() + b"\0?")
    return h.hexdigest()


def _load(cache: Path, key: str) -> tuple[int, str] | None:
    try:
        data = json.loads((cache / f"{key}.json").read_text(encoding="utf-8"))
        return int(data["rc"]), str(data["output"])
    except (OSError, ValueError, KeyError):
        return None


def _store(cache: Path, key: str, verdict: tuple[int, str]) -> None:
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cache / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"rc": verdict[0], "output": verdict[1]}), encoding="utf-8")
        tmp.replace(cache / f"{key}.json")
    except OSError:
        pass


def _compile(root: Path, unit: Unit, toolchain: Toolchain, target: ScanTarget,
             extra: tuple[str, ...]) -> tuple[int, str]:
    from flashbuild.proc import ProcessRunner  # noqa: PLC0415  # start-up
    from flashbuild.source.preprocess import preprocessor_flags  # noqa: PLC0415  # start-up

    arch = target.archs[0]
    gencode = f"arch=compute_{arch.code}{arch.suffix},code=sm_{arch.code}{arch.suffix}"
    dirs = [f"-I{d if Path(d).is_absolute() else root / d}" for d in (*unit.include_dirs,
                                                                        *extra)]
    with tempfile.TemporaryDirectory(prefix="flashbuild-cc-") as tmp:
        argv = [str(toolchain.nvcc), "-c", str(root / unit.source), "-o",
                str(Path(tmp) / "unit.o"), "-gencode", gencode,
                *preprocessor_flags(unit.flags), *dirs]
        try:
            done = ProcessRunner().run(argv, timeout=TIMEOUT_S, check=False, cwd=root)
        except FlashbuildError as exc:  # nvcc would not start, or hung: no verdict
            return -1, str(exc)
    return done.returncode, (done.stdout + "\n" + done.stderr)[-4000:]
