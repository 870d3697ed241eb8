"""How long a `ci init` job compiles, from the tree's compile units and measured build times.

The one table of measured constants behind `flashbuild ci init`'s job estimates lives here,
each figure beside its source. A job's compile time on a runner is

    (CUDA units x archs + host units) x SECONDS_PER_UNIT_ARCH / min(runner vCPUs, units)

core-seconds spread over the compiles that can run at once: torch's ninja and CMake's ninja
run one compiler per unit, and nvcc compiles a unit's archs one after another inside that
process. A host (`.cpp`) unit is compiled once, whatever the archs.

`SECONDS_PER_UNIT_ARCH` is the slowest per-unit figure of the builds below, so a tree of heavy
units (CUTLASS, many template instantiations) is not under-estimated; a tree of light units
builds up to ~7x faster than estimated (`--unit-seconds` takes the user's own figure).
Measured builds ran on machines whose cores are of the same class as a GitHub runner's
(x86-64 server cores); no speed factor between them is applied, as none was measured.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flashbuild import buildsystems
from flashbuild.console import plural
from flashbuild.scanning.scan import walk_tree
from flashbuild.source.setuppy import parse_python, read_setup

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from flashbuild.arch import Arch


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One recorded build, reduced to core-seconds per compile unit per arch."""

    tree: str
    """The tree and its configuration."""
    units: int
    """Compile units (CUDA and host sources) the build compiled."""
    archs: int
    """Archs each CUDA unit was compiled for."""
    core_seconds: float
    """Busy core-seconds: the wall time x the compiles that could run at once
    (min(cores, units)), or the CPU time where that was recorded."""
    source: str
    """Where the figure comes from."""

    @property
    def per_unit_arch(self) -> float:
        return self.core_seconds / (self.units * self.archs)


#: The builds the estimate is derived from.
MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(
        tree="causal-conv1d, sm_90a (3 CUDA + 1 C++ units)", units=4, archs=1,
        core_seconds=531.9 * 4,
        source="docs/benchmarks.md, 'The seed trees, one command each': cold build 494.8, "
        "531.9 and 468.5 s on a 16-core H100 machine; 4 units keep at most 4 cores busy"),
    Measurement(
        tree="FlashMLA, sm_90a (23 CUDA + 1 C++ units)", units=24, archs=1,
        core_seconds=163.2 * 16,
        source="docs/benchmarks.md, 'The seed trees, one command each': cold build 163.2 s "
        "(141.2-151.5 s later) on a 16-core H100 machine, 16 cores busy"),
    Measurement(
        tree="xformers-full, sm_90a (11 CUDA + 2 C++ units)", units=13, archs=1,
        core_seconds=130.5 * 13,
        source="docs/benchmarks.md, 'The seed trees, one command each': cold build 130.5 s "
        "(92.0-128.2 s later) on a 16-core H100 machine; 13 units keep 13 cores busy"),
    Measurement(
        tree="tests/fixtures/torchext, sm_120 (1 CUDA + 1 C++ unit)", units=2, archs=1,
        core_seconds=140.0,
        source="docs/ci.md, 'Why a CUDA build of torch': 218 s wall, 140 s CPU on 2 shared "
        "cores of this project's development machine"),
    Measurement(
        tree="flash-attention 3, one arch per object, MAX_JOBS=1 NVCC_THREADS=1", units=122,
        archs=1, core_seconds=360 * 60,
        source="conda-forge/staged-recipes#34680: the 360-minute cap reached 122 of 293 "
        "objects (CUDA 12.9) on a 7-8 GiB Azure agent, one compile at a time"),
)

#: Core-seconds per CUDA unit per arch (and per host unit) that estimates use: the slowest of
#: MEASUREMENTS (causal-conv1d's, ~532 s).
SECONDS_PER_UNIT_ARCH = max(m.per_unit_arch for m in MEASUREMENTS)

#: vCPUs of the GitHub-hosted runners `ci init` writes jobs for (every label of
#: `workflow.RUNNERS` is a standard runner): the standard Linux and Windows runners of public
#: repositories have 4 vCPUs and 16 GB of memory (docs.github.com, "GitHub-hosted runners
#: reference", standard runners).
RUNNER_VCPUS = 4

#: GitHub cancels a job on a hosted runner after 6 hours (docs.github.com, "Usage limits":
#: "Each job in a workflow can run for up to 6 hours of execution time").
JOB_CAP_HOURS = 6.0
#: The compile time a job may be estimated at by default: an hour under the cap for checkout,
#: the torch and CUDA installs, verify and the upload (docs/ci.md's time budget: 10-25
#: minutes), and the estimate's own error. flash-attention wheel builders stop their compile
#: at 5 h 45 min for the same reason (mjun0812/flash-attention-prebuild-wheels#138).
DEFAULT_BUDGET_HOURS = 5.0


@dataclass(frozen=True, kw_only=True)
class Units:
    """What the tree compiles, as `ci init` reads it without building."""

    cuda: int
    """CUDA sources: each compiled once per arch."""
    host: int
    """C/C++ sources: each compiled once."""
    how: str
    """Where the counts come from, for the output and the refusal."""
    abi3: str = ""
    """Why one wheel serves every Python of the matrix (a `cpXY-abi3` tag, or a `none` ABI
    tag of an extension without Python C API calls); "" when it does not."""
    abi_note: str = ""
    """What else the tree says about its ABI (py_limited_api without an abi3 tag, torch's
    stable ABI), for the output; "" when nothing."""


def measurement_table() -> list[str]:
    """MEASUREMENTS as the rows of docs/ci.md's table (a test keeps the two in step)."""
    return [f"| {m.tree} | {m.units} | {m.archs} | {m.core_seconds:.0f} | "
            f"{m.per_unit_arch:.0f} | {m.source} |" for m in MEASUREMENTS]


def job_seconds(units: Units, archs: int, *, vcpus: int, unit_seconds: float) -> float:
    """The estimated compile time of one job building `archs` archs of the tree."""
    total = units.cuda + units.host
    if total == 0:
        return 0.0
    work = (units.cuda * archs + units.host) * unit_seconds
    return work / max(1, min(vcpus, total))


def split_archs(count: int, units: Units, *, vcpus: int, unit_seconds: float,
                budget_s: float) -> list[int] | None:
    """How many archs each job builds so that every job fits `budget_s`: the fewest jobs,
    archs spread evenly in order (`[2, 2, 1]` for 5 that fit 2 a job). None when one arch
    alone does not fit."""
    if job_seconds(units, 1, vcpus=vcpus, unit_seconds=unit_seconds) > budget_s:
        return None
    per_job = count
    while job_seconds(units, per_job, vcpus=vcpus, unit_seconds=unit_seconds) > budget_s:
        per_job -= 1
    jobs = -(-count // per_job)
    base, extra = divmod(count, jobs)
    return [base + 1 if i < extra else base for i in range(jobs)]


def duration(seconds: float) -> str:
    """`4 h 05 min`, `12 min`, `< 1 min` (an estimate: minutes are enough)."""
    minutes = round(seconds / 60)
    if minutes < 1:
        return "< 1 min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest:02d} min" if hours else f"{rest} min"


def clock(seconds: float) -> str:
    """`4:05`, `0:18`: hours and minutes, for a table column."""
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours}:{minutes:02d}"


# --- reading the tree -----------------------------------------------------------------------

_CUDA_SUFFIXES = (".cu",)
_HOST_SUFFIXES = (".cpp", ".cc", ".cxx", ".c")
#: `options={"bdist_wheel": {"py_limited_api": "cp39"}}` in setup.py, `py_limited_api = cp39`
#: under setup.cfg's [bdist_wheel]: the wheel is tagged `cp39-abi3` (PEP 384, PEP 425),
#: installable on that Python and every later one.
_ABI3_TAG = re.compile(r"""py_limited_api["']?\s*[:=]\s*["']?(cp3\d+)""")
#: `Extension(..., py_limited_api=True)` alone names the module `*.abi3.so` but leaves the
#: wheel tagged for one Python.
_ABI3_MODULE = re.compile(r"py_limited_api\s*=\s*True")
#: torch's stable ABI (torch >= 2.9): the extension builds against `torch/csrc/stable` with
#: `TORCH_TARGET_VERSION` set, and then runs on later torch releases too.
_TORCH_STABLE = re.compile(r"TORCH_TARGET_VERSION|torch/csrc/stable/")


def read_units(tree: Path, *, backend: str, archs: Sequence[Arch], platform: str) -> Units:
    """The tree's compile units: a setup.py's extensions as flashbuild's reader evaluates them
    for `platform` and `archs` (the sources of every extension it builds or may build), or a
    CMake tree's `.cu` and C++ files outside vendored folders (not configured here: an upper
    bound, since a target may leave some out)."""
    walk = walk_tree(tree)
    files = [rel for rel, _kind in walk.files]

    def read(rel: str) -> str | None:
        try:
            return (tree / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    abi3, note = _abi(tree)
    system = buildsystems.get(backend)
    if system.runs_setup_py:
        setup, why = read_setup(files, read, platform=platform, archs=archs)
        if setup is not None:
            built = setup.built_for_target()
            sources = {s for e in built for s in e.sources}
            cuda = sum(1 for s in sources if s.endswith(_CUDA_SUFFIXES))
            host = sum(1 for s in sources if s.endswith(_HOST_SUFFIXES))
            partial = "" if all(e.sources_complete for e in built) else \
                " (part of a source list could not be read)"
            return Units(cuda=cuda, host=host, abi3=abi3, abi_note=note,
                         how=f"setup.py: {cuda} CUDA and {host} C++ sources of "
                         f"{plural(len(built), 'extension')}{partial}")
        if why:
            note = (note + "; " if note else "") + f"setup.py not read ({why})"
    cuda = sum(1 for rel in files if rel.endswith(_CUDA_SUFFIXES))
    host = sum(1 for rel in files if rel.endswith(_HOST_SUFFIXES))
    # flashbuild's CMake backend tags its wheels for the Python it builds with.
    return Units(cuda=cuda, host=host, abi3=abi3 if system.runs_setup_py else "",
                 abi_note=note,
                 how=f"{cuda} .cu and {host} C/C++ files outside vendored folders "
                 "(the tree is not configured here: an upper bound)")


def _abi(tree: Path) -> tuple[str, str]:
    """(why the wheel is tagged abi3 or "", a note on the tree's ABI or "")."""
    texts = {}
    for name in ("setup.py", "setup.cfg", "pyproject.toml"):
        path = tree / name
        if path.is_file():
            try:
                texts[name] = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
    stable = any(_TORCH_STABLE.search(t) for t in texts.values())
    note = "it builds against torch's stable ABI (TORCH_TARGET_VERSION)" if stable else ""
    for name, text in texts.items():
        found = _ABI3_TAG.search(_code(text, name))
        if found:
            return f"{name} tags the wheel {found[1]}-abi3", note
    tag = _get_tag(texts.get("setup.py", ""))
    if tag:
        return f"setup.py's bdist_wheel.get_tag tags the wheel {tag}", note
    module = any(_ABI3_MODULE.search(_code(t, n)) for n, t in texts.items())
    notes = []
    if module:
        notes.append("an extension sets py_limited_api=True, but nothing tags the wheel "
                     "abi3 (bdist_wheel's py_limited_api), so each Python gets its own wheel")
    if stable:
        notes.append("it builds against torch's stable ABI (TORCH_TARGET_VERSION)")
    return "", "; ".join(notes)


def _get_tag(text: str) -> str:
    """`py39-none` when setup.py's own bdist_wheel returns a Python-free tag from `get_tag`
    (`return "py39", "none", plat_tag`: xformers, whose extension uses torch's stable ABI and
    no Python C API); "" otherwise."""
    if "get_tag" not in text:
        return ""
    try:
        tree = parse_python(text, "setup.py")
    except SyntaxError:
        return ""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.FunctionDef) and node.name == "get_tag"):
            continue
        for ret in ast.walk(node):
            value = ret.value if isinstance(ret, ast.Return) else None
            if isinstance(value, ast.Tuple) and len(value.elts) == 3:
                python, abi = value.elts[0], value.elts[1]
                if (isinstance(python, ast.Constant) and isinstance(python.value, str)
                        and isinstance(abi, ast.Constant) and abi.value in {"none", "abi3"}):
                    return f"{python.value}-{abi.value}"
    return ""


def _code(text: str, name: str) -> str:
    """`text` without its comments (`#` lines of Python, TOML and setup.cfg)."""
    return "\n".join(line.split("#", 1)[0] if name != "setup.cfg" else
                           ("" if line.lstrip().startswith(("#", ";")) else line)
                           for line in text.splitlines())
