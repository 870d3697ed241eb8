"""ninja's output → a live progress bar, a full log on disk, and the first real error.

ninja prints `[n/m] <description>` per edge (NINJA_STATUS is set to `[%f/%t] ` so the format
is known) and a command's output after its status line; a failing edge prints
`FAILED: <outputs>` then the command and its output. The first compiler error is what a
person needs; the log's tail is the context.

Read through a pipe, ninja prints an edge's status line when the edge finishes, so `n` counts
finished units and the times of those lines give the build's rate: the bar's estimate of the
time left (`estimate_left`) is the units left times the recent seconds per unit.
"""

from __future__ import annotations

import glob
import json
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Protocol

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from flashbuild import interrupts
from flashbuild.errors import BuildError, Interrupted
from flashbuild.source.setup_record import exception_fix

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from packaging.version import Version
    from rich.console import Console
    from rich.progress import Task

    from flashbuild.arch import ArchSpec

_STATUS = re.compile(r"^\s*\[(?P<done>\d+)/(?P<total>\d+)\]\s*(?P<what>.*)$")
# Ordered: the first pattern that matches a line in the log wins for that line; the first
# line that matches any pattern is the first error.
_ERRORS: tuple[re.Pattern[str], ...] = (
    # nvcc / EDG front end: `file.cu(12): error: identifier "x" is undefined`
    re.compile(r"^.+\(\d+\): (?:catastrophic )?error(?: #\d+-D)?: .+"),
    # gcc / clang: `file.cpp:12:5: error: ...`, also `fatal error:`
    re.compile(r"^.+?:\d+(?::\d+)?: (?:fatal )?error: .+"),
    # MSVC compiler and linker: `file.cpp(12): error C2065: ...`, `LINK : fatal error LNK1181`
    re.compile(r"^.*\b(?:fatal )?error (?:C|LNK|D)\d{4}\b.*"),
    # nvcc's driver itself: `nvcc fatal   : Unsupported gpu architecture 'sm_61'` (before the
    # `CMake Error` of the FindCUDA script that ran it)
    re.compile(r"^nvcc (?:fatal|error)\s*: .+"),
    # ptxas / nvlink / cudafe++
    re.compile(r"^(?:ptxas|nvlink|cudafe\+\+|fatbinary)\b.*(?:error|fatal|died).*", re.I),
    # GNU ld / collect2
    re.compile(r"^.*(?:undefined reference to|collect2: error:|"
               r"ld(?:\.\w+)?: (?:error:|cannot find)).*"),
    re.compile(r"^CMake Error.*"),
    # ninja itself: an input no rule makes (a source the tree lacks), a bad build file
    re.compile(r"^ninja: error: .+"),
    # a setup.py that raised (`OSError: CUDA_HOME environment variable is not set`)
    re.compile(r"^\s*[A-Za-z_][\w.]*(?:Error|Exception): .+"),
)
_FAILED = re.compile(r"^FAILED: .*")
#: Per-kernel resource reports (`-Xptxas -v` / `--resource-usage`): kept for verify, but noise
#: in an error's context or a failure's tail (nineteen such lines buried an `#error`).
_RESOURCE_NOISE = re.compile(r"^(?:ptxas info\s*:|\s+\d+ bytes stack frame, )")
#: ninja's word for an input file that is not there and that no rule makes.
_MISSING_INPUT = re.compile(
    r"^ninja: error: '(?P<path>[^']+)', needed by '[^']+', missing and no known rule")
#: A header the compiler could not find: gcc's spelling (nvcc's host and device passes too)
#: and EDG's (`cannot open source file "x.cuh"`).
_MISSING_HEADER = re.compile(
    r"^(?P<file>[^:\s][^:]*?):(?P<line>\d+):(?:\d+:)? fatal error: (?P<header>[^:]+): No such "
    r"file or directory|^(?P<efile>[^(]+)\((?P<eline>\d+)\): catastrophic error: cannot open "
    r'source file "(?P<eheader>[^"]+)"')
#: The tree's own `#error` directive stopped the compile (gcc/clang and nvcc/EDG spellings).
_DIRECTIVE = re.compile(r"error: #error\b|error directive: ")


def without_noise(lines: Sequence[str]) -> list[str]:
    """`lines` less the resource reports of ptxas."""
    return [line for line in lines if not _RESOURCE_NOISE.match(line)]


def parse_status(line: str) -> tuple[int, int, str] | None:
    """`[3/10] Building CUDA object x.o` → (3, 10, "Building CUDA object x.o")."""
    match = _STATUS.match(line)
    if not match:
        return None
    return int(match["done"]), int(match["total"]), match["what"].strip()


def short_description(what: str) -> str:
    """`Building CUDA object CMakeFiles/k.dir/kernels/norm.cu.o` → `norm.cu`."""
    match = re.search(r"([\w.+-]+\.(?:cu|cpp|cc|cxx|c))(?:\.o|\.obj)?\b", what)
    if match:
        return match.group(1)
    return what.rsplit("/", 1)[-1][:60]


#: Units that must have finished before the bar estimates the time left: ninja starts a unit per
#: job at once, so the first ones finish together and say little about the rest.
ETA_MIN_UNITS = 3
#: How many of the latest units the rate is measured over: recent enough to follow a build
#: whose units get slower (the big kernels often come last), long enough to span a few jobs.
ETA_WINDOW = 8
#: An estimate above this is no estimate (a rate measured over a handful of seconds), so
#: nothing is shown.
ETA_MAX_SECONDS = 24 * 3600.0


def estimate_left(finished: Sequence[tuple[float, int]], total: int, *, started: float,
                  now: float) -> float | None:
    """Seconds until the last of `total` units finishes, or None when there is no honest
    estimate. `finished` holds (time, units finished) per ninja status line, oldest first.

    The rate is the seconds per unit over the last `ETA_WINDOW` units (from `started` while
    fewer have finished), times the units left, counted from the last unit's time. None
    before `ETA_MIN_UNITS` units, when all are done, when the time has run past the estimate,
    or when it is above a day: saying nothing beats a wild guess."""
    if not finished or total <= 0:
        return None
    last_time, done = finished[-1]
    if done < ETA_MIN_UNITS or done >= total:
        return None
    ref_time, ref_done = started, 0
    for at, count in reversed(finished):
        if count <= done - ETA_WINDOW:
            ref_time, ref_done = at, count
            break
    if last_time <= ref_time or done <= ref_done:
        return None
    per_unit = (last_time - ref_time) / (done - ref_done)
    left = last_time + (total - done) * per_unit - now
    if left <= 0 or left > ETA_MAX_SECONDS:
        return None
    return left


def format_left(seconds: float) -> str:
    """`about 4:12 left`, `about 1:05:00 left` (rounded up to the next 10 s under a minute
    left, so the number does not flicker between refreshes)."""
    whole = int(seconds + 0.999)
    if whole < 60:
        whole = max(10, (whole + 9) // 10 * 10)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
    return f"about {clock} left"


@dataclass(frozen=True)
class FirstError:
    line: str
    """The first compiler/linker error line."""
    context: str
    """That line and the few after it (notes, the offending source line)."""
    failed_edge: str = ""
    """ninja's `FAILED:` line for it, when there is one."""


def first_error(lines: list[str], context: int = 4) -> FirstError | None:
    """The first real error in a build log; ninja's `FAILED:` line if nothing better."""
    failed = ""
    for index, line in enumerate(lines):
        if not failed and _FAILED.match(line):
            failed = line
        text = line.strip()
        if any(p.match(text) for p in _ERRORS):
            block = [ln for ln in without_noise(lines[index:index + 1 + context])
                     if not _STATUS.match(ln)]
            if not failed:
                failed = next((ln for ln in reversed(lines[:index]) if _FAILED.match(ln)), "")
            return FirstError(line=text, context="\n".join(block).rstrip(), failed_edge=failed)
    if failed:
        return FirstError(line=failed, context=failed, failed_edge=failed)
    return None


@dataclass
class NinjaMonitor:
    """Receives ninja's lines: keeps the counters, the lines (for error extraction) and the
    `ptxas info` lines (per-kernel resources, verify's second source)."""

    done: int = 0
    total: int = 0
    current: str = ""
    no_work: bool = False
    lines: list[str] = field(default_factory=list)
    ptxas: dict[str, list[str]] = field(default_factory=dict)
    """`ptxas info` lines per compiled file (ninja prints a command's output after its
    status line)."""
    _edge: str = ""
    edges: int = 0
    started: float = field(default_factory=time.monotonic)
    listener: Callable[[NinjaMonitor], None] | None = None
    """Called after each status line (the live bar)."""
    clock: Callable[[], float] = time.monotonic
    """When a line arrived (a test replays recorded times)."""
    finished: list[tuple[float, int]] = field(default_factory=list)
    """(time, units finished) per status line: the rate `left()` estimates from."""

    def feed(self, line: str) -> None:
        """Take one line of ninja's output."""
        self.step(line)

    def step(self, line: str) -> bool:
        """Take one line; True when it moved the progress."""
        self.lines.append(line)
        if line.lstrip().startswith("ninja: no work to do"):
            self.no_work = True
            return False
        # "Compile time = 6.6 ms" differs on every run; the rest is the kernel's resources.
        if line.startswith("ptxas info") and "Compile time" not in line:
            self.ptxas.setdefault(self._edge, []).append(line)
        status = parse_status(line)
        if status is None:
            return False
        self.done, self.total, what = status
        self.finished.append((self.clock(), self.done))
        self._edge = what
        self.current = short_description(what)
        self.edges += 1
        if self.listener is not None:
            self.listener(self)
        return True

    def left(self) -> float | None:
        """Seconds left by the recent rate, now; None when there is no honest estimate."""
        return estimate_left(self.finished, self.total, started=self.started,
                             now=self.clock())

    def tail(self, lines: int = 30) -> str:
        """The last `lines` lines that are not ptxas resource reports."""
        return "\n".join(without_noise(self.lines)[-lines:])


@contextmanager
def live_progress(monitor: NinjaMonitor, console: Console, *, enabled: bool,
                  label: str = "compiling") -> Iterator[NinjaMonitor]:
    """A Rich bar driven by the monitor's counters (file name, n/m, elapsed, time left)."""
    if not enabled:
        yield monitor
        return
    progress = Progress(*bar_columns(monitor), console=console, transient=True)
    with progress:
        task: TaskID = progress.add_task(label, total=None, current="")

        def update(m: NinjaMonitor) -> None:
            progress.update(task, completed=m.done, total=m.total, current=m.current)

        monitor.listener = update
        try:
            yield monitor
        finally:
            monitor.listener = None


def bar_columns(monitor: NinjaMonitor) -> list[ProgressColumn]:
    """The bar's columns: what, bar, n/m, the unit that finished last, elapsed, time left."""
    return [TextColumn("[bold blue]{task.description}"), BarColumn(bar_width=20),
            MofNCompleteColumn(), TextColumn("{task.fields[current]}"), TimeElapsedColumn(),
            LeftColumn(monitor)]


class LeftColumn(ProgressColumn):
    """The bar's estimate of the time left (`NinjaMonitor.left`), blank when there is none.
    Read at each refresh, so it counts down between ninja's lines."""

    def __init__(self, monitor: NinjaMonitor) -> None:
        super().__init__()
        self.monitor = monitor

    def render(self, task: Task) -> Text:
        left = self.monitor.left()
        return Text(format_left(left) if left is not None else "", style="cyan")


def open_log(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Line-buffered: the log on disk follows the build (a user can tail it; a killed run
    # keeps every line it printed).
    return path.open("w", encoding="utf-8", errors="replace", newline="\n", buffering=1)


def merge_ptxas(path: Path, fresh: dict[str, list[str]]) -> str | None:
    """Merge this run's `ptxas info` lines (per compiled file) into the build folder's record
    and return all of it as text: a partial rebuild keeps the other files' lines, and a
    no-op rebuild returns the same text as the build before it."""
    try:
        known: dict[str, list[str]] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if fresh:
        known.update(fresh)
        path.write_text(json.dumps(known, indent=1, sort_keys=True), encoding="utf-8")
    if not known:
        return None
    return "\n".join(line for key in sorted(known) for line in [f"# {key}", *known[key]])


def run_tool(argv: Sequence[str], *, runner: ToolRunner, env: Mapping[str, str],
             log_path: Path, cwd: Path | None = None, console: Console | None = None,
             show_progress: bool = False, what: str = "compiling") -> tuple[int, NinjaMonitor]:
    """Run a build tool that drives Ninja (`cmake --build`, `pip wheel` of a torch
    cpp_extension tree), feeding its lines to a NinjaMonitor, a live bar and the log.

    A Ctrl-C becomes Interrupted (exit 130): the previous install was not touched and Ninja
    resumes where it stopped. Returns the exit code; the caller turns a failure into its own
    BuildError (`failure()` below)."""
    monitor = NinjaMonitor()
    # proc.stream raises Interrupted itself when the tool died of the Ctrl-C (the tool can
    # exit before Python sees the KeyboardInterrupt); either way the message says where.
    try:
        with open_log(log_path) as log:
            log.write(f"# {' '.join(argv)}\n")
            log.flush()
            with live_progress(monitor, console, enabled=bool(console and show_progress),
                               label=what) if console is not None else _nothing(monitor):
                code = runner.stream(argv, on_line=monitor.feed, log=log, env=env, cwd=cwd)
    except (KeyboardInterrupt, Interrupted):
        raise Interrupted(
            f"the build was interrupted by {interrupts.describe()} ({what})",
            evidence=f"stopped at step {monitor.done}/{monitor.total}; every process it "
            f"started was ended; log: {log_path}",
            fix="run the same command again: Ninja resumes where it stopped, and the previous "
            "install was not touched",
            details={"log": str(log_path)},
        ) from None
    return code, monitor


def failure(title: str, monitor: NinjaMonitor, log_path: Path, *, fix: str = "",
            tree: Path | None = None, arch: ArchSpec | None = None,
            cuda: Version | None = None) -> BuildError:
    """The BuildError for a failed build step: the first compiler error, the log's tail.
    `tree` is the folder the build compiled from (the staged mirror): a fix that names a
    recipe step names the tree's files relative to it. `arch`: the build's target; `cuda`:
    its toolkit's release."""
    download = cmake_download_failure(monitor.lines, log_path, tree) if not fix else None
    if download is not None:
        return download
    first = first_error(monitor.lines)
    headers = std_header_steps(monitor.lines, tree) if first is not None and tree is not None \
        else ()
    if not fix and first is not None:
        seen = _Failed(first, arch, cuda, tuple(headers), tree,
                       _command_before(monitor.lines, first.line))
        fix = next((found for finder in _FIX_FINDERS if (found := finder(seen))), "")
    what = f"{title}{': ' + first.line if first else ''}"
    evidence = ((first.context + "\n\n") if first else "") + f"log: {log_path}\n" \
        "--- last lines ---\n" + monitor.tail(20)
    fix = fix or ("fix the first error shown (later errors often follow from it); the "
                  "previous install is untouched and the full log is kept")
    details: dict[str, object] = {
        "log": str(log_path), "first_error": first.line if first else None,
        "failed": first.failed_edge if first else None}
    if headers:
        return MissingStdHeaders(what, evidence=evidence, fix=fix, steps=headers,
                                 details={**details, "include_steps": [s.toml() for s in headers]})
    return BuildError(what, evidence=evidence, fix=fix, details=details)


@dataclass(frozen=True)
class _Failed:
    """What a fix finder reads of a failed step: its first error, the build's target and
    toolkit release, and the standard-header steps GCC's notes give."""

    first: FirstError
    arch: ArchSpec | None
    cuda: Version | None
    headers: tuple[IncludeStep, ...]
    tree: Path | None = None
    command: str = ""
    """The failed step's command line, when the log shows it (its `-I` folders)."""


def _directive_fix(seen: _Failed) -> str:
    if not _DIRECTIVE.search(seen.first.line):
        return ""
    return ("the tree refuses this target with its own `#error` (an arch allow-list, a "
            "feature gate): build for an arch it supports (the bundled library's are listed "
            "in docs/kernels.md), or add a recipe step that extends the list, as the csrc "
            "recipe's `sm120-allow-list` does for sm_120")


def _missing_input_fix(seen: _Failed) -> str:
    missing = _MISSING_INPUT.match(seen.first.line)
    if missing is None:
        return ""
    return (f"the tree has no {missing['path']}, which its build compiles: a source "
            "distribution that left it out, a submodule not checked out or a file a "
            "generator step should have written; build from the project's repository at "
            "this version (with its submodules) instead")


#: What the first error of a failed step can be recognised as, most specific first: the
#: first finder that names a fix wins (each returns "" for an error that is not its own).
_FIX_FINDERS: tuple[Callable[[_Failed], str], ...] = (
    lambda seen: _suffix_as_number_fix(seen.first.line, seen.arch) if seen.arch else "",
    lambda seen: _cccl3_fix(seen.first, seen.cuda) if seen.cuda else "",
    lambda seen: std_header_fix(seen.headers) if seen.headers else "",
    _directive_fix,
    lambda seen: exception_fix(seen.first.line) or "",
    lambda seen: _submodule_fix(seen.first.line, seen.tree, seen.command) if seen.tree else "",
    lambda seen: _own_header_fix(seen.first.line) or _python_package_header_fix(
        seen.first.line) or _removed_torch_header_fix(seen.first.line)
    or _system_library_header_fix(seen.first.line, seen.tree),
    _missing_input_fix,
    lambda seen: _cxx20_global_name_fix(seen.first.line),
)


#: A preprocessor expression that met an arch with its suffix where it wants a number
#: (`#if CUDA_ARCH < 60` built with `-DCUDA_ARCH=90a`): GCC's C++ and C spellings.
_SUFFIX_AS_NUMBER = re.compile(
    r'user-defined literal in preprocessor expression|invalid suffix "[af]" on integer constant')


def _suffix_as_number_fix(line: str, arch: ArchSpec) -> str:
    """The fix for a tree that reads the arch as a number in its C/C++ (libKMCUDA 6.2.3's
    `-DCUDA_ARCH=${CUDA_ARCH}` and `#if CUDA_ARCH < 60`) when the target's spelling has a
    suffix: `90a` is no number, so the tree can build the plain arch only."""
    suffixed = [t.arch for t in arch.targets if t.arch.suffix]
    if not suffixed or not _SUFFIX_AS_NUMBER.search(line):
        return ""
    plain = ", ".join(a.base.sm for a in suffixed)
    return (f"the tree reads the arch as a number in its C/C++ (the line above), and "
            f"{', '.join(a.sm for a in suffixed)} is spelled with a suffix there, which is no "
            f"number: build for --arch {plain} instead (it runs on the same GPU, without the "
            "arch-specific instructions), or change that line with a recipe step")


#: nvcc's words for a cub/thrust call the toolkit's CCCL does not have.
_CCCL_CALL = re.compile(r"(?:no instance of (?:overloaded )?function|has no member|is not a "
                        r"member of|no matching function for call to)[^\n]*\b(?:cub|thrust)::")


def _cccl3_fix(first: FirstError, cuda: Version) -> str:
    """The fix for a cub/thrust call CUDA 13's CCCL refuses (megablocks 0.10.0's
    `cub::DeviceScan::ExclusiveSum(..., stream, debug_synchronous)`): CCCL 3.0, which CUDA 13
    ships, removed what CCCL 2 had deprecated, the `debug_synchronous` parameter of cub's
    device algorithms among it (CCCL 3.0 release notes)."""
    if cuda.major < 13 or not _CCCL_CALL.search(first.line):
        return ""
    named = ("; the call passes `debug_synchronous`, which cub's device algorithms no longer "
             "take: drop that argument") if "debug_synchronous" in (
                 first.context + _call_text(first.line)) else ""
    return (f"the tree calls cub/thrust in a way CUDA {cuda.major}'s CCCL no longer accepts: "
            "CCCL 3 (CUDA 13) removed the APIs CCCL 2 had deprecated" + named + "; build with "
            "a CUDA 12 toolkit and a torch built for CUDA 12, use a release of the tree made "
            "for CUDA 13, or change the call with a recipe step")


_WHERE = re.compile(r"^(?P<file>.+?)(?:\((?P<eline>\d+)\)|:(?P<line>\d+)(?::\d+)?): ")


def _call_text(line: str, lines: int = 10) -> str:
    """The source text an error line points at and the lines after it (a call spread over
    several lines); "" when the file cannot be read."""
    where = _WHERE.match(line)
    if where is None:
        return ""
    number = int(where["eline"] or where["line"])
    try:
        with Path(where["file"]).open(encoding="utf-8", errors="replace") as fh:
            text = fh.read(4 << 20).splitlines()
    except OSError:
        return ""
    return "\n".join(text[max(0, number - 1):number - 1 + lines])


#: Headers that Python packages install, by the folder a tree includes them from: the
#: package that provides it, as pip names it.
_PYTHON_PACKAGE_HEADERS = {"numpy": "numpy", "pybind11": "pybind11", "nanobind": "nanobind",
                           "torch": "torch", "ATen": "torch", "c10": "torch"}


def _python_package_header_fix(line: str) -> str:
    """The fix for a header a Python package provides and the Python that builds lacks
    (libKMCUDA 6.2.3 includes `<numpy/arrayobject.h>`; its CMakeLists asks `import numpy` for
    the folder, and without numpy the folder is empty)."""
    m = _MISSING_HEADER.match(line)
    if m is None:
        return ""
    header = (m["header"] or m["eheader"]).strip()
    package = _PYTHON_PACKAGE_HEADERS.get(PurePosixPath(header).parts[0])
    if package is None or len(PurePosixPath(header).parts) < 2:
        return ""
    return (f"{header} is {package}'s C/C++ header, and the Python that builds has no "
            f"{package} (the build asks it for the folder): install it into that environment "
            f"(`python -m pip install {package}`) and build again")


#: Libraries trees expect installed on the system, by the first folder (or the name) of the
#: headers they include: (library, Debian/Ubuntu package, Fedora package, conda-forge
#: package). A header not here gets the general words of `_system_library_header_fix`.
_SYSTEM_LIBRARY_HEADERS = {
    "google": ("sparsehash", "libsparsehash-dev", "sparsehash-devel", "sparsehash"),
    "sparsehash": ("sparsehash", "libsparsehash-dev", "sparsehash-devel", "sparsehash"),
    "Eigen": ("Eigen", "libeigen3-dev", "eigen3-devel", "eigen"),
    "eigen3": ("Eigen", "libeigen3-dev", "eigen3-devel", "eigen"),
    "boost": ("Boost", "libboost-dev", "boost-devel", "libboost-headers"),
    "glm": ("GLM", "libglm-dev", "glm-devel", "glm"),
    "tbb": ("oneTBB", "libtbb-dev", "tbb-devel", "tbb-devel"),
    "absl": ("Abseil", "libabsl-dev", "abseil-cpp-devel", "libabseil"),
    "cblas.h": ("a CBLAS (OpenBLAS)", "libopenblas-dev", "openblas-devel", "openblas"),
}


#: MSVC's spelling of a header it could not open, in the groups `_MISSING_HEADER` names:
#: `src\\hashmap.hpp(7): fatal error C1083: Cannot open include file: 'google/dense_hash_map':
#: No such file or directory`.
_MSVC_MISSING_HEADER = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\)\s*: fatal error C1083: Cannot open include file: "
    r"'(?P<header>[^']+)'(?P<efile>)(?P<eline>)(?P<eheader>)")
#: The CUDA toolkit's own headers (`cusparse.h`, `nvtx3/…`, `thrust/…`): a toolkit component
#: the chosen toolkit lacks, not a library of the system.
_TOOLKIT_HEADER = re.compile(r"^(?:cu|nv|thrust$|cub$|cuda)", re.I)


def _include_site(line: str, *, msvc: bool = False) -> tuple[Path, int, str, str] | None:
    """(file, line number, header, that line's text) of a compile that could not open a
    header (g++'s and nvcc's spellings; cl.exe's C1083 with `msvc`); None when `line` is no
    such error or the including line cannot be read."""
    m = _MISSING_HEADER.match(line) or (_MSVC_MISSING_HEADER.match(line) if msvc else None)
    if m is None:
        return None
    source = Path(m["file"] or m["efile"])
    number = int(m["line"] or m["eline"])
    try:
        text = source.read_text(encoding="utf-8", errors="replace").splitlines()[number - 1]
    except (OSError, IndexError):
        return None
    return source, number, (m["header"] or m["eheader"]).strip(), text


def _system_library_header_fix(line: str, tree: Path | None) -> str:
    """The fix for a header the tree includes in angle brackets and has nowhere (torchsparse's
    `<google/dense_hash_map>`, from sparsehash): a library the tree expects on the system,
    whose development package the machine lacks. A header some folder of the tree holds is
    another failure (an include folder the build does not pass) and keeps the compiler's
    words."""
    site = _include_site(line, msvc=True)
    if site is None:
        return ""
    source, number, header, text = site
    spelled = PurePosixPath(header.replace("\\", "/"))
    if f"<{header}>" not in text or spelled.is_absolute() or ".." in spelled.parts or \
            _TOOLKIT_HEADER.match(spelled.parts[0]):
        return ""
    if tree is not None and next(_tree_files_named(tree, spelled), None) is not None:
        return ""
    known = _SYSTEM_LIBRARY_HEADERS.get(spelled.parts[0])
    where = f"{source.name}:{number} includes <{header}>, which neither the tree nor the " \
        "compiler's include folders hold"
    if known is None:
        return (f"{where}: a library the tree expects installed on the system. Install that "
                "library's development package, or give its include folder to the build "
                "(`[[build.env]] set = { CPATH = \"/path/to/include\" }`, which gcc and nvcc's "
                "host passes read), then build again")
    library, debian, fedora, conda = known
    return (f"{where}: it is {library}'s, a library the tree expects installed on the system. "
            f"Install its development package (Debian/Ubuntu `sudo apt install {debian}`, "
            f"Fedora `sudo dnf install {fedora}`, conda `conda install -c conda-forge "
            f"{conda}`), or give its include folder to the build (`[[build.env]] set = "
            "{ CPATH = \"/path/to/include\" }`), then build again")


def _tree_files_named(tree: Path, spelled: PurePosixPath) -> Iterator[Path]:
    """Files of the tree whose path ends in `spelled` (`google/dense_hash_map`), looking at
    no more than 200,000 directory entries (bounded on a huge tree; links not followed)."""
    seen = 0
    for folder, dirs, files in os.walk(tree):
        seen += len(dirs) + len(files)
        if seen > 200_000:
            return
        if spelled.name in files:
            path = Path(folder) / spelled.name
            if path.as_posix().endswith(spelled.as_posix()):
                yield path


#: A TH/THC name the compiler does not know: g++'s `'THFloatBlas_gemm' was not declared in
#: this scope` (typographic quotes in a UTF-8 locale), nvcc's `identifier "THCState" is
#: undefined`.
_TH_NAME_UNKNOWN = re.compile(
    r"error: (?:['`\u2018]TH(?:C\w*|Arg\w*|Error\w*|(?:Float|Double)Blas\w*)['\u2019] was not "
    r'declared|identifier "TH(?:C\w*|Arg\w*|Error\w*|(?:Float|Double)Blas\w*)" is undefined)')


def _removed_torch_header_fix(line: str) -> str:
    """The fix for a header or a name of TH/THC, the C libraries under torch before ATen,
    which torch 1.11 removed (Pointnet2.PyTorch's `#include <THC/THC.h>`, DCNv2's
    `THFloatBlas_gemm`): no package brings them back."""
    m = _MISSING_HEADER.match(line)
    parts = PurePosixPath((m["header"] or m["eheader"]).strip()).parts if m else ()
    if (not parts or parts[0] not in ("THC", "TH")) and _TH_NAME_UNKNOWN.search(line) is None:
        return ""
    return ("TH/THC, torch's C libraries before ATen, were removed in torch 1.11: the tree was "
            "written for torch 1.x. `flashbuild scan` (FB125) names each line that uses them, "
            "and the zero-config build drafts the ATen/c10 successor of each that has one "
            "one-for-one; the lines it names without a step need a person "
            "(docs/scan.md#library-apis-newer-releases-changed)")


#: GCC's words for a definition of a name that C++20's <math.h> already put in the global
#: namespace (`using std::lerp;` in libstdc++'s math.h from C++20 on).
_CXX20_GLOBAL_NAME = re.compile(
    r"[\u2018'][^\u2019']*?\b(?P<name>lerp)\s*\([^\u2019']*[\u2019'] conflicts with a previous "
    r"declaration")


def _cxx20_global_name_fix(line: str) -> str:
    """The fix for a tree's own `lerp` under C++20 (torchmcubes' vendored helper_math.h, from
    the CUDA samples, once its CMakeLists asked for C++20 for torch 2.14 here): a second
    declaration of the `std::lerp` that libstdc++'s <math.h> brings into the global
    namespace."""
    m = _CXX20_GLOBAL_NAME.search(line)
    if m is None:
        return ""
    name = m["name"]
    return (f"under C++20 libstdc++'s <math.h> declares a global `{name}` (`using std::{name};`), "
            f"and the tree defines its own (the line above; the CUDA samples' helper_math.h "
            f"has one). torch 2.14 and later need C++20 (scan FB195), so rename the tree's "
            f"`{name}` and its calls with a recipe step, or keep its definition out of C++20 "
            f"builds (`#if __cplusplus <= 201703L`), where its callers then take std::{name}: "
            f"in device code that needs nvcc's --expt-relaxed-constexpr "
            f"(docs/build.md#c20-names-a-tree-defines-itself)")


#: CMake's own download step (ExternalProject, FetchContent) giving up on a URL: the script
#: `<stamp>-stamp/download-<stamp>.cmake` (`<stamp>` is `NAME`, or `NAME-populate` for
#: FetchContent) and the URL it could not fetch.
_CMAKE_DOWNLOAD_SCRIPT = re.compile(
    r"^CMake Error at .*?[/\\](?P<stamp>[\w.+-]+)-stamp[/\\]download-(?P=stamp)\.cmake:\d+")
_CMAKE_DOWNLOAD_URL = re.compile(r"error: downloading '(?P<url>[^']+)' failed")
#: Folders of a staged tree that hold no project CMake (earlier builds, version control).
_NOT_PROJECT = frozenset({"build", ".git", "_deps"})


def cmake_download_failure(lines: list[str], log_path: Path,
                           tree: Path | None) -> BuildError | None:
    """The error for a build whose CMake tried to fetch a dependency (torch-kdtree 1.0's
    `ExternalProject_Add(eigen URL https://gitlab.com/…)`, run by its setup.py): builds run
    offline here, so the paragraph names the URL, where the tree asks for it, and the line
    that gives the build a local copy. None when the log shows no such step."""
    script = next((m for m in map(_CMAKE_DOWNLOAD_SCRIPT.match, lines) if m), None)
    url = next((m["url"] for m in map(_CMAKE_DOWNLOAD_URL.search, lines) if m), None)
    if script is None or url is None:
        return None
    stamp = script["stamp"]
    fetch_content = stamp.endswith("-populate")
    name = stamp.removesuffix("-populate")
    where = _cmake_mention(tree, url) if tree is not None else ""
    at = f", {where}" if where else ""
    if fetch_content:
        how = (f"give it an unpacked copy with CMake's own override, `[[build.options]] "
               f"define = {{ FETCHCONTENT_SOURCE_DIR_{name.upper()} = \"/path/to/{name}\" }}`")
    else:
        how = ("download that archive yourself and give the build a local copy: a recipe "
               f"step that replaces the URL{' at ' + where if where else ''} with the "
               "archive's path (ExternalProject takes a file as its URL)")
    kind = "FetchContent" if fetch_content else "ExternalProject"
    return BuildError(
        f"the build's CMake tried to download {name} ({kind}), and builds run offline here",
        evidence=f"{url}{at}\n{script.group(0)}\nlog: {log_path}",
        fix=f"{how}; or install {name} and have the project find it instead",
        details={"log": str(log_path), "download": url, "name": name, "kind": kind})


def _cmake_mention(tree: Path, text: str) -> str:
    """`FILE:LINE` of the first CMake file of the tree that names `text`; "" if none does."""
    for path in sorted(tree.rglob("*")):
        rel = path.relative_to(tree)
        if set(rel.parts[:-1]) & _NOT_PROJECT or not (
                path.name == "CMakeLists.txt" or path.suffix == ".cmake") or \
                path.is_symlink() or not path.is_file():
            continue
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            if text in line:
                return f"{rel.as_posix()}:{number}"
    return ""


#: `.gitmodules`: each submodule's `path = …` and `url = …` lines.
_SUBMODULE = re.compile(r"^\s*\[submodule\s+\"[^\"]*\"\]\s*$((?:\n(?!\s*\[).*)*)", re.M)
_SUBMODULE_KEY = re.compile(r"^\s*(path|url)\s*=\s*(\S.*?)\s*$", re.M)


def empty_submodules(tree: Path) -> list[tuple[str, str]]:
    """(path, url) of each submodule `.gitmodules` names whose folder is missing or empty:
    a checkout without `--recursive`, or an archive of the repository, leaves them out."""
    try:
        text = (tree / ".gitmodules").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for block in _SUBMODULE.finditer(text):
        keys = {m[1]: m[2] for m in _SUBMODULE_KEY.finditer(block[1])}
        rel = PurePosixPath(keys.get("path", ""))
        if not rel.parts or rel.is_absolute() or ".." in rel.parts:
            continue
        folder = tree / rel
        try:
            empty = not folder.is_dir() or not any(p.name != ".git" for p in folder.iterdir())
        except OSError:
            continue  # a folder that cannot be listed is not known to be empty
        if empty:
            out.append((rel.as_posix(), keys.get("url", "")))
    return out


#: The file a compile could not open: GCC/Clang (`fatal error: glm/glm.hpp: No such file or
#: directory`), nvcc's EDG front end (`cannot open source file "glm/glm.hpp"`) and MSVC
#: (`fatal error C1083: Cannot open include file: 'glm/glm.hpp': No such file or directory`).
_MISSING_FILE = re.compile(
    r"fatal error: (?P<gcc>[^:]+): No such file or directory"
    r'|cannot open source file "(?P<edg>[^"]+)"'
    r"|Cannot open (?:include|source) file: '(?P<msvc>[^']+)'")
#: An include folder on a compile's command line: `-Idir`, `-I dir`, `-isystem dir`, MSVC's
#: `/Idir` (each possibly quoted).
_INCLUDE_FLAG = re.compile(
    r"""(?:^|\s)(?:-I|-isystem|/I)\s*(?:"(?P<dq>[^"]+)"|'(?P<sq>[^']+)'|(?P<bare>[^\s"']+))""")


def _command_before(lines: Sequence[str], error: str) -> str:
    """The command line of the step that printed `error`: the nearest line before it that
    passes include folders (ninja's line after `FAILED:`, or a verbose status line)."""
    index = next((i for i, line in enumerate(lines) if line.strip() == error), len(lines))
    return next((line for line in reversed(lines[:index]) if _INCLUDE_FLAG.search(line)), "")


def _could_come_from(header: str, submodule: str, url: str, tree: Path, command: str) -> bool:
    """Whether a missing `header` could be a file of the (empty) submodule at `submodule`: an
    include folder of the failed command (or the path itself, a missing source) puts it under
    the submodule's path, or the header's folder or name is the submodule's (`glm/glm.hpp` and
    third_party/glm; `json.hpp` and a submodule whose repository is json)."""
    root = os.path.normpath(tree / submodule)
    # The path as spelled (a missing source, `third_party/glm/x.cu`), then under each folder.
    folders = [".", *(f["dq"] or f["sq"] or f["bare"] for f in _INCLUDE_FLAG.finditer(command))]
    for folder in folders:
        found = os.path.normpath(tree / folder / header)
        if found == root or found.startswith(root.rstrip(os.sep) + os.sep):
            return True
    spelled = PurePosixPath(header.replace("\\", "/"))
    if spelled.is_absolute() or re.match(r"[A-Za-z]:", header):
        return False  # an absolute path's folders are the machine's, not the header's
    names = {part.lower() for part in spelled.parent.parts if part not in (".", "..")}
    names.add(spelled.stem.lower())
    own = {PurePosixPath(submodule).name.lower(),
           url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git").lower()}
    return bool(names & (own - {""}))


def _submodule_fix(line: str, tree: Path, command: str = "") -> str:
    """The fix for a header or source that is not there in a tree whose git submodules are
    empty (diff-gaussian-rasterization's `glm/glm.hpp`, from its third_party/glm): only the
    empty submodules the missing file could come from (`_could_come_from`) are named; an
    empty submodule that has nothing to do with the missing file is not blamed. `command`:
    the failed step's command line, whose include folders say where the file was looked for."""
    missing = _MISSING_FILE.search(line)
    if missing is None:
        return ""
    header = (missing["gcc"] or missing["edg"] or missing["msvc"]).strip()
    empty = [(path, url) for path, url in empty_submodules(tree)
             if _could_come_from(header, path, url, tree, command)]
    if not empty:
        return ""
    shown = ", ".join(f"{p} ({u})" if u else p for p, u in empty[:3])
    return (f"the tree's git submodule{'s' if len(empty) > 1 else ''} {shown} "
            f"{'are' if len(empty) > 1 else 'is'} empty (a checkout without --recursive, or "
            "an archive of the repository, leaves submodules out): run `git submodule update "
            "--init --recursive` in the tree, or put each at its path, then build again")


def _own_header_fix(line: str) -> str:
    """The fix for a header the tree's own file includes in quotes and the tree lacks: beside
    that file is a source of the same name (`column_remap.cu` for `column_remap.cuh`) or the
    folder the include names (`cuda_func/` for `cuda_func/column_remap.cuh`). That is a
    source distribution whose manifest left its headers out (auto-gptq 0.7.1), not a library
    to install; other missing headers keep the compiler's own message."""
    site = _include_site(line)
    if site is None:
        return ""
    source, number, header, text = site
    spelled = PurePosixPath(header)
    if f'"{header}"' not in text or spelled.is_absolute() or ".." in spelled.parts:
        return ""
    beside = source.parent / spelled
    if not (beside.parent != source.parent and beside.parent.is_dir()) and \
            not any(beside.parent.glob(f"{glob.escape(beside.stem)}.*")):
        return ""
    return (f"the tree has no {header}, which {source.name}:{number} includes from its own "
            f"folder ({beside.parent.name}/): a source distribution whose manifest left its "
            "headers out, or a file a generator step should have written; build from the "
            "project's repository at this version instead")


#: GCC's note for a standard-library name used without its header:
#: `f.cpp:7:1: note: 'std::unique_ptr' is defined in header '<memory>'; did you forget to
#: '#include <memory>'?` (the quotes are typographic in a UTF-8 locale).
_QUOTE = "['`\u2018\u2019]"
_STD_HEADER_NOTE = re.compile(
    rf"^(?P<file>[^:\s][^:]*?):(?P<line>\d+):\d+: note: {_QUOTE}std::(?P<name>[\w:]+)"
    rf"{_QUOTE} is defined in header {_QUOTE}<(?P<header>[\w./]+)>{_QUOTE}; did you forget to")


#: nvcc's front end (EDG) names no header: `f.h(24): error: namespace "std" has no member
#: "uintptr_t"`, `f.cu(9): error: identifier "uint32_t" is undefined` (diff-gaussian-
#: rasterization's rasterizer_impl.h with GCC 13's libstdc++ on the H200 machine).
_EDG_STD_NAME = re.compile(
    r'^(?P<file>.+?)\((?P<line>\d+)\): error: (?:namespace "std" has no member '
    r'"(?P<std>\w+)"|identifier "(?P<plain>\w+)" is undefined)')
#: The header of each standard name that libstdc++ releases stopped including through their
#: other headers and trees relied on (the header GCC's own notes name for it). A name not
#: here keeps the compiler's words.
_STD_NAME_HEADER = {
    **dict.fromkeys((f"{sign}int{bits}_t" for sign in ("", "u") for bits in (8, 16, 32, 64)),
                    "cstdint"),
    **dict.fromkeys(("intptr_t", "uintptr_t", "intmax_t", "uintmax_t"), "cstdint"),
    **dict.fromkeys(("unique_ptr", "shared_ptr", "make_unique", "make_shared", "weak_ptr"),
                    "memory"),
    **dict.fromkeys(("runtime_error", "invalid_argument", "out_of_range", "logic_error",
                     "domain_error", "length_error", "overflow_error"), "stdexcept"),
    "numeric_limits": "limits", "function": "functional", "optional": "optional",
    "string": "string", "vector": "vector", "array": "array", "tuple": "tuple",
}
#: Names that are also C's, declared unqualified by <stdint.h> too (`identifier "uint32_t"
#: is undefined`): only those are read from EDG's unqualified form.
_PLAIN_C_NAMES = frozenset(n for n, h in _STD_NAME_HEADER.items() if h == "cstdint")
_INCLUDE_LINE = re.compile(r"^\s*#\s*include\b")


_CONDITIONAL = re.compile(r"^\s*#\s*(if|ifdef|ifndef|endif)\b")


def _top_level_includes(lines: Sequence[str]) -> list[int]:
    """The indexes of the `#include` lines outside every `#if` block (an include under
    `#ifdef _WIN32` would add the header on one platform only); a header's include guard
    (`#ifndef X` then `#define X` as its first directives) is no such block."""
    directives = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("#")]
    guard = None
    if len(directives) >= 2:
        first = re.match(r"^\s*#\s*ifndef\s+(\w+)", lines[directives[0]])
        second = re.match(r"^\s*#\s*define\s+(\w+)", lines[directives[1]])
        if first and second and first[1] == second[1]:
            guard = directives[0]
    depth, found = 0, []
    for i, line in enumerate(lines):
        cond = _CONDITIONAL.match(line)
        if cond and i != guard:
            depth = max(depth - 1, 0) if cond[1] == "endif" else depth + 1
        elif depth == 0 and _INCLUDE_LINE.match(line):
            found.append(i)
    return found


@dataclass(frozen=True)
class IncludeStep:
    """`#include <header>` added to a tree file after the line `anchor`: what GCC's note asks
    for, as the recipe's `insert-block` step."""

    file: str
    """The file, relative to the tree (POSIX)."""
    anchor: str
    """The text of the line before the one GCC points at (unique in the file)."""
    header: str
    name: str
    """The standard-library name GCC found without its header (`std::unique_ptr`)."""

    @property
    def id(self) -> str:
        stem = re.sub(r"[^a-z0-9]+", "-", f"{PurePosixPath(self.file).stem}-{self.header}".lower())
        return f"include-{stem.strip('-')}"

    def toml(self) -> str:
        return (f'[[patch]]\nid = "{self.id}"\ntransform = "insert-block"\n[patch.params]\n'
                f'file = "{self.file}"\nanchor = """{self.anchor}"""\nwhere = "after"\n'
                f'block = "#include <{self.header}>"')


@dataclass
class MissingStdHeaders(BuildError):
    """A build that failed because the tree's own files use standard-library names without
    their headers; `steps` add them. A zero-config build adds them to its draft and builds
    again (pipeline/command.py); with any other recipe the paragraph shows them."""

    steps: tuple[IncludeStep, ...] = ()


def std_header_steps(lines: Sequence[str], tree: Path) -> tuple[IncludeStep, ...]:
    """The steps that add the standard headers GCC says a tree's own files forgot.

    A source that uses `std::unique_ptr` and includes `<random>` but not `<memory>` compiled
    while the other standard headers happened to include `<memory>`; newer libstdc++ releases
    include less, and GCC then names the header (torch-points-kernels 0.7.0's neighbors.cpp
    with GCC 13 on an H200 machine). The step inserts `#include <header>` after the line GCC
    points at, anchored on that line's text; none when no note names a file of the tree or the
    anchor is not one line of its file."""
    wanted: dict[tuple[str, str], tuple[int, str, bool]] = {}
    root = tree.resolve()
    for line in lines:
        m = _STD_HEADER_NOTE.match(line.strip())
        edg = _EDG_STD_NAME.match(line.strip()) if m is None else None
        if m is not None:
            file, number, header, name = m["file"], int(m["line"]), m["header"], \
                f"std::{m['name']}"
        elif edg is not None and (edg["std"] in _STD_NAME_HEADER or
                                  edg["plain"] in _PLAIN_C_NAMES):
            bare = edg["std"] or edg["plain"]
            file, number, header = edg["file"], int(edg["line"]), _STD_NAME_HEADER[bare]
            name = f"std::{bare}" if edg["std"] else bare
        else:
            continue
        try:
            rel = Path(file).resolve().relative_to(root).as_posix()
        except (OSError, ValueError):
            continue
        # GCC's note points at where the include goes (after the file's last one); EDG's
        # error at the use, and the include goes after the last one above it.
        wanted.setdefault((rel, header), (number, name, edg is not None))
    steps: list[IncludeStep] = []
    for (rel, header), (pointed, name, at_use) in wanted.items():
        try:
            text = (root / rel).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        number = pointed
        if at_use:
            above = _top_level_includes(text[:min(pointed - 1, len(text))])
            number = above[-1] + 2 if above else 0
        anchor = text[number - 2].strip() if 2 <= number <= len(text) + 1 else ""
        # A backslash would be a TOML escape in the step, and ends a line continued into the
        # next (a macro): no step then.
        if not anchor or sum(ln.strip() == anchor for ln in text) != 1 or '"""' in anchor \
                or "\\" in anchor:
            continue
        steps.append(IncludeStep(file=rel, anchor=anchor, header=header, name=name))
    return tuple(steps)


def std_header_fix(steps: Sequence[IncludeStep]) -> str:
    """The paragraph's fix for `steps` (std_header_steps): the recipe lines that add them."""
    return ("the tree's own sources use standard-library names without including their "
            "headers (the compiler names them above; older C++ libraries included them through "
            "other headers): add to the recipe (`recipe init` drafts one)\n" +
            "\n\n".join(step.toml() for step in steps))


@contextmanager
def _nothing(monitor: NinjaMonitor) -> Iterator[NinjaMonitor]:
    yield monitor


class ToolRunner(Protocol):
    def stream(self, argv: Sequence[str | os.PathLike[str]], *, on_line: Callable[[str], None],
               log: IO[str] | None = None, env: Mapping[str, str] | None = None,
               cwd: Path | None = None, timeout: float | None = None) -> int: ...
