"""What the real preprocessor keeps of a translation unit, pass by pass.

nvcc preprocesses a `.cu` file once for the host and once per device arch, each with its own
macros (`__CUDA_ARCH__`, `__CUDA_ARCH_FEAT_SM120_ALL`, …); `nvcc -E` shows only the first
device pass. `nvcc --dryrun` prints every step it would run without running one (FACTS.md,
"Reading what a build does without compiling"): the host `gcc -E … -D__CUDA_ARCH_LIST__=…`
and one `gcc -E -D__CUDA_ARCH__=…` per device arch. This module takes those commands for a
unit and the target's arch, runs each with its output on stdout (in parallel), and reads the
line markers of the output: which lines of which tree files survive each pass. That settles
every `#if`, every macro three headers away and every `__CUDA_ARCH__` test as the compiler
itself would.

* A `.cpp` of a CUDA extension is compiled by the host compiler alone: one `g++ -E` pass with
  the include folders torch gives it.
* The Windows host pass is emulated on Linux: the host command with the Linux and GCC macros
  undefined (`__linux__`, `__unix__`, `__GNUC__`, …) and `_WIN32`, `_WIN64`, `_MSC_VER`,
  `_MSVC_LANG`, `_M_X64` defined as MSVC defines them; the C++ library headers are still
  GCC's (MSVC's CRT headers, absent here, are stubbed). Results say so.
* A header the machine lacks (torch's, when torch is not installed) is replaced by an empty
  stub so the pass runs to the end; the pass lists the stubs.
* Results are cached under the user cache folder, keyed by the unit's text, its flags, the
  toolkit and the pass, and checked against the size and mtime of every file the output
  names; nothing is written into the tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashbuild.errors import FlashbuildError, ProcessTimeout

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from flashbuild.arch import Arch
    from flashbuild.proc import Runner
    from flashbuild.runner import Completed

CACHE_VERSION = 1
ALL_KINDS = frozenset({"host", "cuda-host", "device", "windows-host"})
#: Seconds one pass may take, all its runs together (the `-M -MG` probe, the stub rounds).
#: A pass of a real unit (FlashMLA's, with torch and CUTLASS) takes seconds; one that blocks
#: (a header that is a FIFO: gcc's open() waits for a writer for ever) used to take 300 s per
#: run, the probe and the run each, and the report did not say it had timed out (issue 27).
TIMEOUT_S = 60.0
#: Extra seconds `timeout` gives a pass past its budget before it kills the pass's process
#: group itself: a pass outlives a flashbuild killed with SIGKILL by at most this much.
KILL_AFTER_S = 5.0
#: Stub rounds per pass: each round stubs the header gcc stopped at.
MAX_STUBS = 24
#: gcc's line markers (`# 12 "path" 2`), found in a whole output at once.
_MARKERS = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"[^\n]*$', re.MULTILINE)
_MISSING = re.compile(r"fatal error: ([^:\n]+): No such file or directory")
#: MSVC's own predefined macros (x64, VS 2022 17.14 / VS 2026 level), for the emulated
#: Windows host pass; the Linux ones are undefined.
MSVC_DEFINES = ("-D_WIN32=1", "-D_WIN64=1", "-D_MSC_VER=1944", "-D_MSC_FULL_VER=194435211",
                "-D_MSVC_LANG=201703L", "-D_M_X64=100", "-D_M_AMD64=100")
LINUX_UNDEFINES = ("-U__linux__", "-U__linux", "-Ulinux", "-U__unix__", "-U__unix", "-Uunix",
                   "-U__gnu_linux__", "-U__ELF__", "-U__GNUC__", "-U__GNUC_MINOR__",
                   "-U__GNUC_PATCHLEVEL__", "-U__GNUG__")
#: nvcc flags that change what the preprocessor sees (the rest is code generation), and
#: those of them that take their value as the next argument.
_PP_FLAG = re.compile(r"^(?:-[DUI].*|-isystem.*|-include.*|-std=.*|--std=.*|-std|--std|"
                      r"--expt-.*)$")
_PP_PAIRED = frozenset({"-D", "-U", "-I", "-isystem", "-include", "-std", "--std"})


def preprocessor_flags(flags: Sequence[str]) -> list[str]:
    """The flags of `flags` that change what the preprocessor sees, values kept."""
    out: list[str] = []
    take = False
    for flag in flags:
        if take:
            out.append(flag)
            take = False
        elif _PP_FLAG.match(flag):
            out.append(flag)
            take = flag in _PP_PAIRED
    return out


@dataclass(frozen=True)
class Unit:
    """One translation unit as the build compiles it."""

    source: str
    """Tree-relative, forward slashes."""
    include_dirs: tuple[str, ...] = ()
    """Tree-relative or absolute."""
    flags: tuple[str, ...] = ()
    """The unit's compiler flags (nvcc's for a .cu, the host compiler's for a .cpp)."""

    @property
    def cuda(self) -> bool:
        return self.source.endswith(".cu")


@dataclass(frozen=True)
class PassResult:
    """One preprocessor pass of one unit."""

    unit: str
    name: str
    """`host`, `host (Windows, emulated)` or the device target (`sm_120`)."""
    arch: int | None
    """`__CUDA_ARCH__` of a device pass; None for a host pass."""
    lines: Mapping[str, frozenset[int]]
    """Tree file → the lines of it that hold code after preprocessing."""
    ok: bool
    """False when the pass stopped early (an error other than a missing header)."""
    error: str = ""
    stubbed: tuple[str, ...] = ()
    emulated: bool = False
    cached: bool = False
    timed_out: bool = False
    """The pass ran past TIMEOUT_S and was ended (the static verdict stands)."""


@dataclass(frozen=True)
class Toolchain:
    nvcc: Path
    include: Path
    """The toolkit's include folder (torch hands it to the host compiler)."""
    version: str
    host_cxx: str = "g++"


@dataclass
class Preprocessor:
    """Runs the passes of many units, in parallel, with a cache."""

    root: Path
    toolchain: Toolchain
    runner: Runner
    cache_dir: Path | None
    extra_includes: tuple[str, ...] = ()
    """Include folders every unit gets (torch's, Python's), absolute."""
    jobs: int = 0
    stats: dict[str, int] = field(default_factory=lambda: {"run": 0, "cached": 0})
    #: The headers the units finished so far found missing (every unit's stubs start with
    #: them, so one dependency probe serves the tree), and whether any unit has finished.
    _missing: list[str] = field(default_factory=list)
    _finished: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, units: Sequence[Unit], arch: Arch, *, windows: bool,
            kinds: frozenset[str] = ALL_KINDS,
            on_done: Callable[[int], None] | None = None) -> dict[str, list[PassResult]]:
        """The passes of `kinds` for each unit, per unit source: `host` (a `.cpp` unit's host
        compiler), `cuda-host` (a `.cu` unit's host pass), `device`, `windows-host` (the
        emulated Windows host pass, only with `windows`). `on_done` gets the number of units
        finished, as each finishes (the scan's status line)."""
        jobs = self.jobs or os.cpu_count() or 1
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(self._unit, u, arch, windows=windows, kinds=kinds): u
                       for u in units}
            for finished, _future in enumerate(as_completed(futures), start=1):
                if on_done is not None:
                    on_done(finished)
        return {u.source: future.result() for future, u in futures.items()}

    # --- one unit --------------------------------------------------------------------------
    def _unit(self, unit: Unit, arch: Arch, *, windows: bool,
              kinds: frozenset[str]) -> list[PassResult]:
        try:
            commands = self._commands(unit, arch)
        except (OSError, FlashbuildError) as exc:
            return [PassResult(unit.source, "host", None, {}, ok=False, error=str(exc))]
        out: list[PassResult] = []
        # The passes of one unit share their stubs: the first pass that runs finds the
        # missing headers (one `-M -MG` run), the others reuse them.
        with tempfile.TemporaryDirectory(prefix="flashbuild-pp-") as tmp:
            stubs = Stubs(Path(tmp))
            # A tree's units mostly lack the same headers (torch's CUDA ones, cuBLAS): the
            # headers earlier units stubbed are stubbed here from the start (searched last,
            # they stand in only where this unit finds no such header either). Until a unit
            # has finished, nothing is known: the passes probe first, as a lone unit would.
            with self._lock:
                known, stubs.probe_first = list(self._missing), not self._finished
            for header in known:
                stubs.add(header)
            # A .cu unit's own host pass is asked for as `cuda-host` (the host findings are
            # Windows ones, answered by the emulated pass built from the same command).
            host = "cuda-host" if unit.cuda else "host"
            for name, code, argv in commands:
                if (host if code is None else "device") in kinds:
                    out.append(self._safe_pass(unit, name, code, argv, stubs,
                                               emulated=False))
                if windows and code is None and "windows-host" in kinds:
                    win = [*argv, *LINUX_UNDEFINES, *MSVC_DEFINES]
                    out.append(self._safe_pass(unit, "host (Windows, emulated)", None, win,
                                               stubs, emulated=True))
            with self._lock:
                self._missing += [h for h in stubs.headers if h not in self._missing]
                self._finished = True
        return out

    def _includes(self, unit: Unit) -> list[str]:
        out = []
        for d in (*unit.include_dirs, *self.extra_includes):
            path = Path(d) if Path(d).is_absolute() else self.root / d
            out.append(f"-I{path}")
        return out

    def _commands(self, unit: Unit, arch: Arch) -> list[tuple[str, int | None, list[str]]]:
        """(pass name, __CUDA_ARCH__ or None, argv writing to stdout) for each pass."""
        flags = preprocessor_flags(unit.flags)
        src = str(self.root / unit.source)
        if not unit.cuda:
            argv = [self.toolchain.host_cxx, "-E", "-x", "c++", *flags, *self._includes(unit),
                    f"-I{self.toolchain.include}", src]
            return [("host", None, argv)]
        gencode = f"arch=compute_{arch.code}{arch.suffix},code=sm_{arch.code}{arch.suffix}"
        argv = [str(self.toolchain.nvcc), "--dryrun", "-c", src, "-o", os.devnull,
                "-gencode", gencode, *flags, *self._includes(unit)]
        done = self.runner.run(argv, timeout=60.0, check=False, cwd=self.root)
        return parse_dryrun(done.stdout + "\n" + done.stderr)

    def _safe_pass(self, unit: Unit, name: str, code: int | None,
                   argv: list[str], stubs: Stubs, *, emulated: bool) -> PassResult:
        """`_pass`, with a tool that cannot start or hangs (timeout) as a failed pass: the
        static verdict then stands for what it would have decided."""
        try:
            return self._pass(unit, name, code, argv, stubs, emulated=emulated)
        except ProcessTimeout as exc:
            self.stats["timed out"] = self.stats.get("timed out", 0) + 1
            return PassResult(unit.source, name, code, {}, ok=False, error=str(exc)[:300],
                              emulated=emulated, timed_out=True)
        except FlashbuildError as exc:
            return PassResult(unit.source, name, code, {}, ok=False, error=str(exc)[:300],
                              emulated=emulated)

    def _pass(self, unit: Unit, name: str, code: int | None,
              argv: list[str], stubs: Stubs, *, emulated: bool) -> PassResult:
        key = self._key(unit, name, argv)
        hit = self._load(key)
        if hit is not None:
            self.stats["cached"] += 1
            return PassResult(unit.source, name, code, hit["lines"], ok=hit["ok"],
                              error=hit["error"], stubbed=tuple(hit["stubbed"]),
                              emulated=emulated, cached=True)
        self.stats["run"] += 1
        done = run_stubbing(self.runner, argv, stubs, cwd=self.root, timeout=TIMEOUT_S)
        if done.stdout_dropped:
            # Only the tail was kept: the lines of the headers read first are not in it, and
            # reading the tail as the whole would call them not compiled.
            return PassResult(unit.source, name, code, {}, ok=False, emulated=emulated,
                              error=f"the pass printed more than {len(done.stdout) >> 20} "
                              "MiB, which flashbuild does not hold; its static verdict stands")
        lines, files = survivors(done.stdout, self.root)
        ok = done.returncode == 0
        error = "" if ok else (done.stderr.strip().splitlines() or ["failed"])[-1][:300]
        stubbed = stubs.used(done.stdout)
        self._store(key, lines, files, ok=ok, error=error, stubbed=stubbed)
        return PassResult(unit.source, name, code, lines, ok=ok, error=error,
                          stubbed=tuple(stubbed), emulated=emulated)

    # --- cache ------------------------------------------------------------------------------
    def _key(self, unit: Unit, name: str, argv: Sequence[str]) -> str:
        h = hashlib.sha256()
        try:
            h.update((self.root / unit.source).read_bytes())
        except OSError:
            h.update(b"?")
        # nvcc names its intermediate files per run (tmpxft_…): not part of the key.
        text = json.dumps([CACHE_VERSION, self.toolchain.version, name,
                           [a for a in argv if "tmpxft_" not in a]])
        h.update(text.encode("utf-8"))
        return h.hexdigest()

    def _load(self, key: str) -> dict[str, Any] | None:
        if self.cache_dir is None:
            return None
        path = self.cache_dir / f"{key}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        for rel, (size, mtime) in data["files"].items():
            try:
                st = (self.root / rel).stat()
            except OSError:
                return None
            if st.st_size != size or int(st.st_mtime) != mtime:
                return None
        data["lines"] = {k: frozenset(v) for k, v in data["lines"].items()}
        return dict(data)

    def _store(self, key: str, lines: Mapping[str, frozenset[int]], files: Sequence[str], *,
               ok: bool, error: str, stubbed: Sequence[str]) -> None:
        if self.cache_dir is None:
            return
        stamps: dict[str, tuple[int, int]] = {}
        for rel in files:
            try:
                st = (self.root / rel).stat()
            except OSError:
                continue
            stamps[rel] = (st.st_size, int(st.st_mtime))
        data = {"lines": {k: sorted(v) for k, v in lines.items()}, "files": stamps, "ok": ok,
                "error": error, "stubbed": list(stubbed)}
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_dir / f".{key}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(data), encoding="utf-8")
            tmp.replace(self.cache_dir / f"{key}.json")
        except OSError:
            pass  # a cache that cannot be written only costs time


@dataclass
class Stubs:
    """Empty stand-ins for headers this machine lacks, shared by the passes of one unit."""

    folder: Path
    headers: list[str] = field(default_factory=list)
    probed: bool = False
    probe_first: bool = False
    """Run the dependency probe before the first pass (see `run_stubbing`): where headers are
    expected to be missing (the first unit of a tree), the probe spares a failed pass; where
    none are (torch's own headers, a unit whose tree's missing headers are stubbed already),
    the pass alone runs."""

    def used(self, output: str) -> list[str]:
        """The stubs a pass's output includes (its line markers name the stub's path)."""
        return [h for h in self.headers if f'"{self.folder}/{h}"' in output]

    def add(self, header: str) -> bool:
        """Stub `header`; False when it cannot be (already stubbed, a path, too many)."""
        if header in self.headers or Path(header).is_absolute() or ".." in header or \
                len(self.headers) >= MAX_STUBS:
            return False
        stub = self.folder / header
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text("", encoding="utf-8")
        self.headers.append(header)
        return True


def run_stubbing(runner: Runner, argv: Sequence[str], stubs: Stubs, *, cwd: Path,
                 env: Mapping[str, str] | None = None, timeout: float = TIMEOUT_S
                 ) -> Completed:
    """Run a preprocessor command (gcc/clang `-E`) with the stubs' folder searched last,
    stubbing each header it stops at ("No such file or directory") and running it again,
    until it runs through or no header can be stubbed.

    The first time a header is missing, one dependency run (-M -MG takes a missing header for
    one still to be generated) names every header this machine lacks; stubbing them at once
    lets the real run happen once more instead of once per missing header. That probe costs
    as much as the pass itself (1.55 s of CPU against 1.68 s for torch/extension.h), so it
    runs only once a pass has stopped at a missing header, or first with `probe_first`."""
    cmd = [*argv, f"-idirafter{stubs.folder}"]
    deadline = time.monotonic() + timeout

    def bounded(args: list[str]) -> list[str]:
        # Each run gets what is left of the pass's budget. coreutils' `timeout` (it signals
        # its whole process group, cc1plus included) ends the run even when flashbuild was
        # killed with SIGKILL: a gcc blocked on a FIFO header stayed for ever before.
        left = max(deadline - time.monotonic(), 1.0)
        wrapper = runner.which("timeout", env)
        # Windows' own timeout.exe only waits: coreutils' has no extension.
        if wrapper is None or Path(wrapper).name != "timeout":
            return args
        return [wrapper, "-s", "KILL", f"{left + KILL_AFTER_S:.0f}", *args]

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ProcessTimeout(f"`{Path(argv[0]).name}` did not finish within {timeout:g} s "
                                 "(the pass's runs together)")
        return remaining

    def probe() -> bool:
        deps = runner.run(bounded([*cmd, "-M", "-MG"]), timeout=left(), check=False,
                          cwd=cwd, env=env)
        stubs.probed = True
        return any([stubs.add(header) for header in missing_headers(deps.stdout, cwd)])

    if stubs.probe_first and not stubs.probed:
        probe()
    while True:
        done = runner.run(bounded(cmd), timeout=left(), check=False, cwd=cwd, env=env)
        missing = _MISSING.search(done.stderr)
        if done.returncode == 0 or missing is None:
            return done
        header = missing[1].strip()
        probed = not stubs.probed and probe()
        if not stubs.add(header) and not probed:
            return done


def missing_headers(rule: str, root: Path) -> list[str]:
    """The headers a `-M -MG` make rule names that do not exist: `-MG` writes them as
    spelled, relative, where existing ones have the path they were found at."""
    body = rule.replace("\\\n", " ").partition(":")[2]
    out: list[str] = []
    for dep in body.split():
        if Path(dep).is_absolute() or (root / dep).exists() or ".." in dep:
            continue
        if dep not in out:
            out.append(dep)
    return out


def parse_dryrun(text: str) -> list[tuple[str, int | None, list[str]]]:
    """The preprocessor commands of `nvcc --dryrun` output: (name, __CUDA_ARCH__, argv with
    the output on stdout). The host pass is the `-E` command without `-D__CUDA_ARCH__=`."""
    out: list[tuple[str, int | None, list[str]]] = []
    for line in text.splitlines():
        if not line.startswith("#$ "):
            continue
        cmd = line[3:].strip()
        try:
            argv = shlex.split(cmd)
        except ValueError:
            continue
        if not argv or "-E" not in argv or Path(argv[0]).name not in (
                "gcc", "g++", "cc", "c++", "clang", "clang++", "cl", "cl.exe"):
            continue
        if "-o" in argv:
            at = argv.index("-o")
            del argv[at:at + 2]
        arch = next((int(a.split("=", 1)[1]) for a in argv
                     if a.startswith("-D__CUDA_ARCH__=")), None)
        name = "host" if arch is None else f"sm_{arch // 10}"
        out.append((name, arch, argv))
    return out


def survivors(output: str, root: Path) -> tuple[dict[str, frozenset[int]], list[str]]:
    """The lines of tree files that hold code in preprocessor output (read from its line
    markers), and every tree file the output names.

    A pass through torch's and CUTLASS's headers prints 10-20 MB, nearly all of it from
    files outside the tree: the markers are found by one regex scan, and only the stretches
    of the tree's own files are split into lines (a line loop over the whole output took
    11 s of CPU for a cold FlashMLA scan's 14 passes)."""
    base = str(root.resolve()) + os.sep
    lines: dict[str, set[int]] = {}
    files: dict[str, set[int] | None] = {}

    def owner(spelled: str) -> set[int] | None:
        if spelled not in files:
            path = spelled.encode("utf-8").decode("unicode_escape")
            full = os.path.normpath(path if Path(path).is_absolute() else root / path)
            files[spelled] = lines.setdefault(full[len(base):].replace(os.sep, "/"), set()) \
                if full.startswith(base) else None
        return files[spelled]

    def take(start: int, end: int, first: int, into: set[int]) -> None:
        # Lines are counted as the preprocessor counts them, by newline.
        for n, text in enumerate(output[start:end].split("\n")):
            if text.strip():
                into.add(first + n)

    current: set[int] | None = None
    number, start = 0, 0
    for m in _MARKERS.finditer(output):
        if current is not None:
            take(start, m.start(), number, current)
        number, current, start = int(m[1]), owner(m[2]), m.end() + 1
    if current is not None:
        take(start, len(output), number, current)
    return {k: frozenset(v) for k, v in lines.items()}, sorted(lines)
