"""`flashbuild doctor --packages`: which installed packages carry GPU code a GPU here cannot run.

The failure users report most with CUDA kernel libraries: a package installs, imports, and dies
at its first kernel launch with "no kernel image is available for execution on the device",
because its binaries hold no SASS or PTX for the GPU (an RTX 5090 is sm_120). This reads, for
each distribution installed in the interpreter's site-packages, the shared libraries and
extension modules its RECORD lists (files beside its package and the libraries it loads with
ctypes included) and the GPU images each holds, from the fatbin headers alone
(`list_image_headers`: no payload read, so torch's 1-2 GB libraries cost milliseconds), without
importing anything. Then, for each GPU present (or each `--arch`: `sm_120` stands for a GPU of
compute capability 12.0), one verdict per distribution, by the loader shim's rule of which GPU
runs which image (`image_runs`, `coverage`):

- `fails`: a binary holds GPU code and none of it runs there (every kernel launch of it would
  fail with "no kernel image is available");
- `jit`: every binary runs there, some only by the driver compiling their PTX (a slow first
  launch, then cached);
- `ok`: every binary holds SASS that runs there;
- `unreadable`: a binary could not be read (damaged, not a regular file, missing), and none
  fails.

A distribution's verdict is its worst binary's; the binaries at fault are named with what they
hold. Exit code (doctor's): 3 when a package fails on a target, else 0.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.metadata
import os
import re
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from flashbuild import platforms
from flashbuild.arch import ArchSpec, parse_arch_spec
from flashbuild.console import Column, lit, plural, ui
from flashbuild.console import verdict as verdict_word
from flashbuild.detect.gpu import probe_gpus
from flashbuild.detect.pyenv import current_python
from flashbuild.detect.rules import Severity
from flashbuild.errors import FlashbuildError, ToolchainError
from flashbuild.installing.resources import loader_shim
from flashbuild.proc import ProcessRunner
from flashbuild.verifying.fatbin_headers import MAX_HEADER_ENTRIES, list_image_headers
from flashbuild.verifying.inputs import is_binary_name
from flashbuild.verifying.placeholders import defines_kernels

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from flashbuild.detect.gpu import Gpu, GpuReport

TargetOrigin = Literal["--arch", "gpus", "none"]
#: A RECORD line that may name a binary (the exact test, `is_binary_name`, runs after CSV).
_BINARY_HINT = re.compile(r"\.(so|pyd|dll)\b", re.IGNORECASE)


class Fit(StrEnum):
    """How a target GPU runs a distribution's binaries (worst last)."""

    OK = "ok"
    JIT = "jit"
    UNREADABLE = "unreadable"
    FAILS = "fails"


_RANK = {Fit.OK: 0, Fit.JIT: 1, Fit.UNREADABLE: 2, Fit.FAILS: 3}
#: The project's one severity scale (doctor, scan, verify).
SEVERITY = {Fit.OK: Severity.OK, Fit.JIT: Severity.WARN, Fit.UNREADABLE: Severity.WARN,
            Fit.FAILS: Severity.ERROR}
_WORD = {Severity.OK: "ok", Severity.WARN: "warn", Severity.ERROR: "error"}


@dataclass(frozen=True)
class Target:
    """A GPU to judge against: one `--arch`, or the GPUs present of one compute capability."""

    capability: tuple[int, int]
    #: The GPUs of this capability (`NVIDIA H100 80GB HBM3 (GPU 0, 1)`); empty for `--arch`.
    gpus: str = ""

    @property
    def sm(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def to_json(self) -> dict[str, object]:
        return {"sm": self.sm,
                "compute_capability": f"{self.capability[0]}.{self.capability[1]}",
                "gpus": self.gpus or None}


@dataclass(frozen=True)
class InstalledBinary:
    """One shared library or extension module of a distribution, and the GPU images it holds."""

    path: Path
    #: As the distribution's RECORD names it (relative to site-packages, `/`-separated).
    file: str
    #: `sm_90a`, `compute_120`, … in the order the binary holds them.
    images: tuple[str, ...] = ()
    #: Why it could not be read (empty when it was).
    error: str = ""
    #: False when the header walk stopped at its entry cap: more images may follow.
    complete: bool = True
    #: Fatbin containers found in its data sections (outside `.nv_fatbin`).
    embedded: int = 0

    @property
    def sass(self) -> tuple[str, ...]:
        return tuple(i for i in self.images if i.startswith("sm_"))

    @property
    def ptx(self) -> tuple[str, ...]:
        return tuple(i for i in self.images if i.startswith("compute_"))

    def fit(self, target: Target) -> Fit:
        if self.error:
            return Fit.UNREADABLE
        way = loader_shim.coverage(self.images, target.capability)
        return Fit.OK if way == "sass" else Fit.JIT if way == "jit" else Fit.FAILS

    def holds(self) -> str:
        """`sm_90a SASS`, `sm_120 SASS and compute_120 PTX`, … (or why it is unreadable)."""
        if self.error:
            return self.error
        parts = [f"{', '.join(group)} {kind}"
                 for group, kind in ((self.sass, "SASS"), (self.ptx, "PTX")) if group]
        text = " and ".join(parts)
        return text if self.complete else text + " (listing stopped at the entry cap)"

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "path": str(self.path), "sass": list(self.sass),
                "ptx": list(self.ptx), "error": self.error or None, "complete": self.complete}


@dataclass(frozen=True)
class InstalledPackage:
    """An installed distribution that carries GPU code (or binaries that could not be read)."""

    name: str
    version: str
    #: The site-packages folder it is installed in.
    location: Path
    #: Its binaries that hold GPU code or could not be read, in RECORD order.
    binaries: tuple[InstalledBinary, ...]
    #: How many of its binaries hold no GPU code (host-only).
    host_only: int = 0

    def images(self) -> tuple[str, ...]:
        """Every image any of its binaries holds, each once."""
        return tuple(dict.fromkeys(i for b in self.binaries for i in b.images))


@dataclass(frozen=True)
class PackageVerdict:
    """One distribution on one target: its worst binary's fit, and the binaries with it."""

    target: Target
    fit: Fit
    #: The binaries whose fit is `fit` (none named for `ok`).
    at_fault: tuple[InstalledBinary, ...]

    @property
    def severity(self) -> Severity:
        return SEVERITY[self.fit]

    def headline(self) -> str:
        """What the verdict means on the target, without the binaries."""
        sm = self.target.sm
        return {Fit.OK: f"SASS for {sm} in every binary",
                Fit.JIT: f"only PTX runs on {sm}: the driver compiles it at the first launch "
                "(slow once, then cached)",
                Fit.FAILS: f"no image runs on {sm}: its kernels fail with \"no kernel image "
                "is available for execution on the device\"",
                Fit.UNREADABLE: "a binary could not be read"}[self.fit]

    def explain(self) -> str:
        """One sentence: what it means, which binaries, what they hold."""
        named = "; ".join(f"{b.file}: {b.holds()}" for b in self.at_fault)
        return f"{self.headline()}: {named}" if named else self.headline()

    def fix(self, package: str) -> str:
        sm = self.target.sm
        if self.fit is Fit.FAILS:
            return (f"install a build of {package} that holds {sm} SASS (or PTX of "
                    f"compute_{sm[3:]} or older), or build it from its source: "
                    f"`flashbuild build <tree> --arch {sm}`")
        if self.fit is Fit.JIT:
            return f"a build with {sm} SASS starts at once (`flashbuild build <tree> --arch {sm}`)"
        if self.fit is Fit.UNREADABLE:
            return f"reinstall it: `pip install --force-reinstall {package}`"
        return ""

    def to_json(self) -> dict[str, object]:
        return {"target": self.target.sm, "verdict": str(self.fit),
                "severity": str(self.severity), "explanation": self.explain(),
                "binaries": [b.file for b in self.at_fault]}


@dataclass(frozen=True)
class PackageReport:
    package: InstalledPackage
    verdicts: tuple[PackageVerdict, ...]

    @property
    def fit(self) -> Fit | None:
        """The worst verdict over the targets (None: no target)."""
        return max((v.fit for v in self.verdicts), key=_RANK.__getitem__, default=None)

    def to_json(self) -> dict[str, object]:
        p = self.package
        return {"name": p.name, "version": p.version, "location": str(p.location),
                "verdict": str(self.fit) if self.fit else None,
                "verdicts": [v.to_json() for v in self.verdicts],
                "binaries": [b.to_json() for b in p.binaries], "host_only": p.host_only}


@dataclass(frozen=True)
class PackagesReport:
    """What `doctor --packages` found."""

    site_packages: tuple[Path, ...]
    targets: tuple[Target, ...]
    target_origin: TargetOrigin
    packages: tuple[PackageReport, ...]
    #: Distributions looked at and binaries read, and the seconds it took.
    distributions: int
    binaries: int
    seconds: float
    #: Distributions whose RECORD could not be read: (name, why).
    problems: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return all(v.fit is not Fit.FAILS for p in self.packages for v in p.verdicts)

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "site_packages": [str(p) for p in self.site_packages],
                "targets": [t.to_json() for t in self.targets],
                "target_origin": self.target_origin,
                "packages": [p.to_json() for p in self.packages],
                "problems": [{"distribution": n, "error": e} for n, e in self.problems],
                "scanned": {"distributions": self.distributions, "binaries": self.binaries,
                            "seconds": round(self.seconds, 3)}}


# --- reading what is installed ----------------------------------------------------------------

def _read_binary(path: Path, file: str, max_entries: int) -> InstalledBinary:
    try:
        found = list_image_headers(path, max_entries=max_entries, embedded=True)
    except FlashbuildError as exc:
        return InstalledBinary(path, file, error=exc.what)
    except Exception as exc:  # one odd file must not end the scan of the environment
        return InstalledBinary(path, file, error=f"{type(exc).__name__}: {exc}")
    return InstalledBinary(path, file, tuple(found.names()), complete=found.complete,
                           embedded=found.embedded)


def _distribution_name(dist: importlib.metadata.Distribution) -> str:
    name = dist.metadata["Name"] if dist.metadata is not None else None
    if name:
        return str(name)
    folder = getattr(dist, "_path", None)  # a METADATA without Name: the folder says
    return Path(str(folder)).name.split("-")[0] if folder else "?"


def _binary_files(dist: importlib.metadata.Distribution) -> list[str]:
    """The shared libraries and extension modules the distribution's RECORD lists, as written
    there. RECORD is read as text and only its binary lines parsed: `dist.files` makes a path
    object of every line (torch's RECORD has over ten thousand). Raises OSError/ValueError
    (csv.Error, UnicodeError) for an unreadable RECORD."""
    text = dist.read_text("RECORD")
    if text is None:  # an .egg-info install: installed-files.txt / SOURCES.txt
        return [f.as_posix() for f in dist.files or [] if is_binary_name(f.name)]
    lines = [line for line in text.splitlines() if _BINARY_HINT.search(line)]
    return [row[0] for row in csv.reader(lines) if row and is_binary_name(row[0])]


def read_distribution(dist: importlib.metadata.Distribution, *,
                      max_entries: int = MAX_HEADER_ENTRIES) -> InstalledPackage:
    """The binaries a distribution's RECORD lists and the GPU images each holds. Raises
    OSError/ValueError (csv.Error, UnicodeError) for an unreadable RECORD."""
    location = Path(str(dist.locate_file("")))
    binaries: list[InstalledBinary] = []
    host_only = 0
    seen: set[str] = set()
    for file in _binary_files(dist):
        path = Path(str(dist.locate_file(file)))
        real = os.path.realpath(path)
        if real in seen:
            continue  # `libx.so -> libx.so.1`: one library
        seen.add(real)
        if not os.path.lexists(path):
            binaries.append(InstalledBinary(path, file,
                                            error="listed in RECORD but not installed"))
            continue
        binary = _read_binary(path, file, max_entries)
        if binary.images or binary.error:
            binaries.append(binary)
        else:
            host_only += 1
    return InstalledPackage(name=_distribution_name(dist), version=dist.version or "?",
                            location=location, binaries=tuple(binaries), host_only=host_only)


@dataclass(frozen=True)
class Scan:
    """What `scan_installed` found."""

    #: Distributions with GPU code or unreadable binaries, by name.
    packages: tuple[InstalledPackage, ...]
    #: Distributions looked at, and binaries read (host-only ones included).
    distributions: int
    binaries: int
    #: Distributions whose METADATA or RECORD could not be read: (name, why).
    problems: tuple[tuple[str, str], ...]


def scan_installed(site_packages: Sequence[Path], *, max_entries: int = MAX_HEADER_ENTRIES,
                   ) -> Scan:
    """Every distribution installed in `site_packages` (the first of a name wins, as for
    import), read without importing anything."""
    found: list[InstalledPackage] = []
    problems: list[tuple[str, str]] = []
    names: set[str] = set()
    read = 0
    for dist in importlib.metadata.distributions(path=[str(p) for p in site_packages]):
        try:
            name = _distribution_name(dist)
        except (UnicodeError, ValueError, OSError) as exc:
            problems.append((str(getattr(dist, "_path", "?")), f"METADATA: {exc}"))
            continue
        key = re.sub(r"[-_.]+", "_", name).lower()
        if key in names:
            continue
        names.add(key)
        try:
            package = read_distribution(dist, max_entries=max_entries)
        except (UnicodeError, csv.Error, ValueError, OSError) as exc:
            problems.append((name, f"RECORD: {type(exc).__name__}: {exc}"))
            continue
        read += len(package.binaries) + package.host_only
        if package.binaries:
            found.append(package)
    found.sort(key=lambda p: p.name.lower())
    return Scan(tuple(found), len(names), read, tuple(problems))


# --- judging ----------------------------------------------------------------------------------

def judge(package: InstalledPackage, target: Target) -> PackageVerdict:
    """The package's worst binary on `target`, and the binaries with that verdict."""
    fits = [(b, b.fit(target)) for b in package.binaries]
    worst = max((f for _, f in fits), key=_RANK.__getitem__, default=Fit.OK)
    at_fault = () if worst is Fit.OK else tuple(b for b, f in fits if f is worst)
    return PackageVerdict(target, worst, at_fault)


def arch_targets(spec: ArchSpec) -> tuple[Target, ...]:
    """`--arch` as GPUs: `sm_90a` and `sm_90` are both a GPU of compute capability 9.0."""
    return tuple(Target(cap) for cap in dict.fromkeys(a.capability for a in spec.archs))


def gpu_targets(report: GpuReport | None) -> tuple[Target, ...]:
    """The GPUs present, one target per compute capability."""
    by_cap: dict[tuple[int, int], list[Gpu]] = {}
    for gpu in report.gpus if report else ():
        by_cap.setdefault(gpu.capability, []).append(gpu)
    return tuple(
        Target(cap, f"{' / '.join(dict.fromkeys(g.name for g in gpus))} "
               f"(GPU {', '.join(str(g.index) for g in gpus)})")
        for cap, gpus in by_cap.items())


def check_packages(site_packages: Sequence[Path], targets: Iterable[Target], *,
                   origin: TargetOrigin, max_entries: int = MAX_HEADER_ENTRIES,
                   ) -> PackagesReport:
    """Read every distribution in `site_packages` and judge each against each target."""
    started = time.monotonic()
    chosen = tuple(targets)
    scan = scan_installed(site_packages, max_entries=max_entries)
    packages = tuple(_confirmed(p, chosen) for p in scan.packages)
    reports = tuple(PackageReport(p, tuple(judge(p, t) for t in chosen)) for p in packages
                    if p.binaries)
    return PackagesReport(site_packages=tuple(site_packages), targets=chosen,
                          target_origin=origin if chosen else "none", packages=reports,
                          distributions=scan.distributions, binaries=scan.binaries,
                          seconds=time.monotonic() - started, problems=scan.problems)


#: The largest binary `_confirmed` reads whole to look for kernels (a failing binary larger
#: than this keeps its verdict unconfirmed).
CONFIRM_MAX_BYTES = 256 * 1024 * 1024


def _confirmed(package: InstalledPackage, targets: Sequence[Target]) -> InstalledPackage:
    """The package without the binaries that would fail or JIT on a target but define no kernel
    at all (a GPU module with nothing to launch: cuFFT 12's libcufftw.so.12 holds one sm_75
    cubin without a kernel, and an H100 runs cuFFT fine); they count as host-only. Only those
    binaries are read whole; one larger than CONFIRM_MAX_BYTES, one whose kernels live in data
    sections (read from headers only) or one that cannot be read keeps its verdict."""
    keep: list[InstalledBinary] = []
    dropped = 0
    for binary in package.binaries:
        doubtful = not binary.error and not binary.embedded and any(
            binary.fit(t) in (Fit.FAILS, Fit.JIT) for t in targets)
        if doubtful and _no_kernels(binary.path):
            dropped += 1
        else:
            keep.append(binary)
    if not dropped:
        return package
    return dataclasses.replace(package, binaries=tuple(keep),
                               host_only=package.host_only + dropped)


def _no_kernels(path: Path) -> bool:
    try:
        if path.stat().st_size > CONFIRM_MAX_BYTES:
            return False
        return not defines_kernels(path)
    except (OSError, FlashbuildError):
        return False


# --- the command ------------------------------------------------------------------------------

def default_site_packages() -> tuple[Path, ...]:
    """Where the running interpreter imports from (doctor's Python): sys.path's folders, then
    its site-packages."""
    return current_python().site_packages


def _gpu_report() -> GpuReport:
    platform = platforms.current()
    return probe_gpus(os.environ, ProcessRunner(echo=ui.command),
                      driver_loaded=platform.nvidia_driver_loaded())


def render(report: PackagesReport) -> None:
    """A table for people (package, target, verdict, the images that decide it), then, as
    doctor writes its verdicts, each problem with its binaries and fix; 80 columns and an ASCII
    pipe keep every name whole (`ui.table` prints a list when a table would cut one)."""
    console = ui.human
    where = ", ".join(str(p) for p in report.site_packages) or "(none)"
    title = "Installed packages with GPU code"
    if not report.targets:
        rows = [[f"{r.package.name} {r.package.version}",
                 ", ".join(r.package.images()) or "unreadable"] for r in report.packages]
        ui.table(title, [Column("package", key=True), Column("images")], rows)
        console.print("[dim]No GPU found and no --arch given: images listed, not judged "
                      "(e.g. `flashbuild doctor --packages --arch sm_120`).[/]")
    else:
        rows = []
        for r in report.packages:
            for v in r.verdicts:
                shown = v.at_fault or r.package.binaries
                images = ", ".join(dict.fromkeys(i for b in shown for i in b.images))
                rows.append([f"{r.package.name} {r.package.version}", v.target.sm,
                             str(v.fit), images or "-"])
        ui.table(title, [Column("package", key=True), Column("target", key=True),
                         Column("verdict", key=True), Column("images")], rows)
        for target in report.targets:
            if target.gpus:
                console.print(f"[dim]{target.sm}: {lit(target.gpus)}[/]")
        problems = [(r, v) for r in report.packages for v in r.verdicts if v.fit is not Fit.OK]
        if problems:
            console.print()
        for r, v in sorted(problems, key=lambda rv: -_RANK[rv[1].fit]):
            name = r.package.name
            console.print(f"  {verdict_word(_WORD[v.severity])} "
                          f"{lit(f'{name} {r.package.version}: {v.headline()}')}")
            for binary in v.at_fault:
                console.print(f"        [dim]{lit(f'{binary.file}: {binary.holds()}')}[/]")
            console.print(f"        [bold]fix:[/] {lit(v.fix(name))}")
    for name, why in report.problems:
        ui.warn(lit(f"{name}: {why}"))
    console.print()
    console.print(f"[dim]Read {plural(report.binaries, 'binary', 'binaries')} of "
                  f"{plural(report.distributions, 'distribution')} in {report.seconds:.2f} s "
                  f"from {lit(where)}[/]")
    failing = [r for r in report.packages if r.fit is Fit.FAILS]
    if failing:
        console.print(f"{verdict_word('error')} [bold red]{plural(len(failing), 'package')} "
                      "would fail with \"no kernel image is available\"[/]")
    elif report.targets:
        worst = max((r.fit for r in report.packages if r.fit), key=_RANK.__getitem__,
                    default=Fit.OK)
        console.print(f"{verdict_word(_WORD[SEVERITY[worst]])} no installed package lacks "
                      "an image for " + ", ".join(t.sm for t in report.targets))


def run_packages(*, arch: str | None, as_json: bool,
                 site_packages: Sequence[Path] | None = None) -> int:
    """`flashbuild doctor --packages`: its exit code (0, or 3 when a package would fail);
    raises UsageError (exit 2) for an `--arch` it cannot parse."""
    spec = parse_arch_spec(arch) if arch is not None else None
    targets: tuple[Target, ...] = ()
    origin: TargetOrigin = "gpus"
    if spec is None or spec.native:  # no --arch, or `native`: the GPUs present
        targets = gpu_targets(_gpu_report())
    if spec is not None and spec.targets:
        have = {t.capability for t in targets}
        targets += tuple(t for t in arch_targets(spec) if t.capability not in have)
        origin = "--arch"
    folders = tuple(site_packages) if site_packages is not None else default_site_packages()
    report = check_packages(folders, targets, origin=origin)
    if as_json:
        ui.emit_json(report.to_json())
    else:
        render(report)
    return 0 if report.ok else ToolchainError.exit_code
