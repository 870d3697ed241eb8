"""ninja's output → a live progress bar, a full log on disk, and the first real error.

ninja prints `[n/m] <description>` per edge (NINJA_STATUS is set to `[%f/%t] ` so the format
is known) and a command's output after its status line; a failing edge prints
`FAILED: <outputs>` then the command and its output. The first compiler error is what a
person needs; the log's tail is the context.
"""

from __future__ import annotations

import json
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Protocol

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from flashbuild.errors import BuildError

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from pathlib import Path

    from rich.console import Console

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
    # ptxas / nvlink / cudafe++
    re.compile(r"^(?:ptxas|nvlink|cudafe\+\+|fatbinary)\b.*(?:error|fatal|died).*", re.I),
    # GNU ld / collect2
    re.compile(r"^.*(?:undefined reference to|collect2: error:|"
               r"ld(?:\.\w+)?: (?:error:|cannot find)).*"),
    re.compile(r"^CMake Error.*"),
    # a setup.py that raised (`OSError: CUDA_HOME environment variable is not set`)
    re.compile(r"^\s*[A-Za-z_][\w.]*(?:Error|Exception): .+"),
)
_FAILED = re.compile(r"^FAILED: .*")
#: Per-kernel resource reports (`-Xptxas -v` / `--resource-usage`): kept for verify, but noise
#: in an error's context or a failure's tail (nineteen such lines buried an `#error`).
_RESOURCE_NOISE = re.compile(r"^(?:ptxas info\s*:|\s+\d+ bytes stack frame, )")
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
        self._edge = what
        self.current = short_description(what)
        self.edges += 1
        if self.listener is not None:
            self.listener(self)
        return True

    def tail(self, lines: int = 30) -> str:
        """The last `lines` lines that are not ptxas resource reports."""
        return "\n".join(without_noise(self.lines)[-lines:])


@contextmanager
def live_progress(monitor: NinjaMonitor, console: Console, *, enabled: bool,
                  label: str = "compiling") -> Iterator[NinjaMonitor]:
    """A Rich bar driven by the monitor's counters (file name, n/m, elapsed)."""
    if not enabled:
        yield monitor
        return
    progress = Progress(
        TextColumn("[bold blue]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[current]}"), TimeElapsedColumn(),
        console=console, transient=True,
    )
    with progress:
        task: TaskID = progress.add_task(label, total=None, current="")

        def update(m: NinjaMonitor) -> None:
            progress.update(task, completed=m.done, total=m.total, current=m.current)

        monitor.listener = update
        try:
            yield monitor
        finally:
            monitor.listener = None


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
    from flashbuild import interrupts
    from flashbuild.errors import Interrupted

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


def failure(title: str, monitor: NinjaMonitor, log_path: Path, *, fix: str = "") -> BuildError:
    """The BuildError for a failed build step: the first compiler error, the log's tail."""
    first = first_error(monitor.lines)
    if not fix and first is not None and _DIRECTIVE.search(first.line):
        fix = ("the tree refuses this target with its own `#error` (an arch allow-list, a "
               "feature gate): build for an arch it supports (the bundled library's are listed "
               "in docs/kernels.md), or add a recipe step that extends the list, as the csrc "
               "recipe's `sm120-allow-list` does for sm_120")
    return BuildError(
        f"{title}{': ' + first.line if first else ''}",
        evidence=((first.context + "\n\n") if first else "") + f"log: {log_path}\n"
        "--- last lines ---\n" + monitor.tail(20),
        fix=fix or "fix the first error shown (later errors often follow from it); the "
        "previous install is untouched and the full log is kept",
        details={"log": str(log_path), "first_error": first.line if first else None,
                 "failed": first.failed_edge if first else None},
    )


@contextmanager
def _nothing(monitor: NinjaMonitor) -> Iterator[NinjaMonitor]:
    yield monitor


class ToolRunner(Protocol):
    def stream(self, argv: Sequence[str | os.PathLike[str]], *, on_line: Callable[[str], None],
               log: IO[str] | None = None, env: Mapping[str, str] | None = None,
               cwd: Path | None = None, timeout: float | None = None) -> int: ...
