"""The scan's data types: what a scan is asked (`ScanTarget`, `ScanOptions`), what it finds
(`Finding`, with its `Rule`, `Severity`, `Category`, `Fix` and the `Truth` it rests on), what it
could not read (`Skipped`) and what it returns (`ScanResult`).

They live apart from the scan itself (scan.py) so that the checks, the reports and recipe init
import the types without importing the walk and the worker pools.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from flashbuild.arch import Arch, ArchSpec, BuildTarget, Target, parse_arch_spec
from flashbuild.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from flashbuild.scanning.facts import Facts
    from flashbuild.scanning.proposals import EnvProposal, Proposal

FileKind = Literal["cxx", "cmake", "python"]

PlatformName = Literal["linux", "windows"]


class Severity(StrEnum):
    """How bad a finding is for the chosen target. `error` blocks the build (exit code 11)."""

    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


class Category(StrEnum):
    DYNAMIC_LOADING = "dynamic-loading"
    POSIX = "posix-only"
    GCC = "gcc-extensions"
    WINDOWS_MACROS = "windows-macros"
    INSTANTIATIONS = "explicit-instantiations"
    ARCH_GATING = "arch-gating"
    ARCH_INSTRUCTIONS = "arch-instructions"
    SHARED_MEMORY = "shared-memory"
    PYTHON_PACKAGING = "python-packaging"
    CMAKE = "cmake"
    SETUP_FLAGS = "setup-flags"
    """Missing or wrong compiler flags in setup.py."""
    TORCH_HEADERS = "torch-headers"
    """A `.cu` file pulls in torch/extension.h in a way that breaks a torch/MSVC pair."""
    ARCH_SELECTION = "arch-selection"
    """The target arch is hard-coded, missing, or TORCH_CUDA_ARCH_LIST is ignored."""
    SETUP_BUILD = "setup-build"
    """How the setup.py build runs: downloads, build isolation, path lengths."""
    SOURCE_TEXT = "source-text"
    """How a source file was read (an encoding other than UTF-8)."""
    MSVC_CXX = "msvc-c++"
    """C++ that GCC accepts and MSVC rejects or reads otherwise (C++20 syntax under an older
    `/std`, constexpr captures, std::filesystem's wide strings)."""
    INCLUDES = "includes"
    """A header a file needs and does not include, or that no folder of the build holds."""
    LIBRARY_API = "library-api"
    """An API of a library the tree compiles against that a newer release changed: CCCL 3's
    CUB (CUDA 13), Python's C-API macros that became functions."""


class Truth(StrEnum):
    """What a finding rests on: a tool that ran, or flashbuild's own reading."""

    BUILD = "build"
    """The configured build (its real targets, sources and flags)."""
    PREPROCESSOR = "preprocessor"
    """The real preprocessor's pass for the target (`nvcc --dryrun`'s own commands)."""
    COMPILER = "compiler"
    """Compiling the translation unit for the target."""
    STATIC = "static"
    """flashbuild's own reading of the text (its `#if` evaluator, its build-file readers)."""


@dataclass(frozen=True, kw_only=True)
class Fix:
    """How a finding is fixed: a built-in transform with a params sketch, or a manual step."""

    transform: str | None = None
    """Name of the transform (`flashbuild/recipes/transforms.py` declares them)."""
    params: dict[str, Any] = field(default_factory=dict)
    """A sketch of the transform's params for this finding (recipe init fills the rest)."""
    manual: str = ""
    """What a person must do when no transform can decide it."""
    step: Proposal | None = field(default=None, compare=False)
    """What recipe init makes of this fix: a step, a refusal, a note (`proposals`); None
    makes it a TODO. Not part of the JSON report (`transform`/`params` sketch the edit)."""
    env: EnvProposal | None = field(default=None, compare=False)
    """What this fix asks of the build environment (`[[build.env]]`) instead of a step."""

    def describe(self) -> str:
        if self.transform:
            shown = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
            return f"transform `{self.transform}`" + (f" ({shown})" if shown else "")
        return self.manual


@dataclass(frozen=True, kw_only=True)
class Rule:
    """A kind of finding. `help` says why it matters and cites the fact behind it."""

    id: str
    name: str
    category: Category
    short: str
    help: str
    help_uri: str | None = None
    """The upstream page that states the fact (an https URL; SARIF's `helpUri`), if one does."""


@dataclass(frozen=True, kw_only=True)
class Finding:
    rule: str
    """Rule id, e.g. `FB101` (see `flashbuild.scanning.rules.RULES`)."""
    category: Category
    path: str
    """Relative to the scanned root, forward slashes."""
    line: int
    """1-based."""
    col: int
    """1-based."""
    severity: Severity
    message: str
    """One sentence: what will break for this target."""
    evidence: str
    """What in the source triggered the finding."""
    snippet: str
    """The source line(s) of the site, stripped."""
    fix: Fix
    facts: Facts | None = field(default=None, compare=False)
    """What the check knows about the site, typed per kind (`facts`): the tree-wide pass and
    the preprocessor and compiler verdicts read them."""
    truth: Truth = Truth.STATIC
    """What the finding rests on (see `Truth`)."""
    handled: str = ""
    """Why `flashbuild build` takes care of it with no change from the user ("" when it does
    not): by itself (proposals.handled_by_build), or with a step of the bundled recipe that
    matches the tree (`handled_step`). Such a finding is at most a warning of the scan."""
    handled_step: str = ""
    """The bundled recipe's step that edits the finding's line ("" when none does)."""

    @property
    def blocking(self) -> bool:
        return self.severity is Severity.ERROR

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.path, self.line, self.col, self.rule)


@functools.lru_cache(maxsize=8)
def _lines(text: str) -> list[str]:
    return text.splitlines()


def source_line(text: str, line: int) -> str:
    """Line `line` (1-based, as `str.splitlines` counts) of `text`, stripped; "" past the end.
    The split is kept for the last few texts: a file's findings each quote a line, and
    splitting a large header once per finding cost more than its checks (a str caches its
    hash, so the lookup is cheap). The list is shared: never change it."""
    lines = _lines(text)
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


@dataclass(frozen=True)
class Skipped:
    """A file or folder the scan did not read, and why (a note in the report, not a crash)."""

    path: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class ScanTarget:
    platform: PlatformName
    archs: tuple[Arch, ...]
    target: BuildTarget | None = None
    """The command's target as resolved at its edge (make_target), images included."""

    @property
    def spec(self) -> ArchSpec:
        """The target's ArchSpec, never re-parsed: `archs` as SASS when none was kept."""
        if self.target is not None:
            return self.target.spec
        return ArchSpec(tuple(Target(a) for a in dict.fromkeys(sorted(self.archs))))

    @property
    def label(self) -> str:
        return f"{self.platform} / {', '.join(a.sm for a in self.archs) or 'any arch'}"


@dataclass(frozen=True, kw_only=True)
class ScanOptions:
    max_file_bytes: int = 2 * 1024 * 1024
    """Files above this are skipped as generated (the bench tree's largest hand-written
    CUTLASS header is ~300 KB)."""
    include_vendored: bool = False
    """Also scan vendored folders (third_party/, 3rdparty/, vendor/, external/, extern/)."""
    jobs: int | None = None
    """Workers; None = all cores. Trees under `SERIAL_BELOW` files run in-process."""
    static: bool = False
    """Read only: run no preprocessor or compiler (for untrusted trees). Otherwise, with a
    CUDA toolkit, the real preprocessor decides the gates of the findings it can check."""
    compile: Literal["auto", "always", "never"] = "auto"
    """Confirm FB160/FB170 errors by compiling their unit for the target: `auto` when few
    units are needed (`compiletruth.AUTO_UNITS`), `always` (`scan --compile`), `never`."""
    executor: Literal["process", "thread"] = "process"
    """How workers run. Processes: the per-file work is Python walking tree-sitter nodes and
    matching regexes, which holds the GIL, so threads do not scale (the README's benchmark
    section has the numbers); `thread` is kept for that comparison."""


Stage = Callable[[str], None]
"""Told what a long scan starts doing now (`introspecting the build`, `preprocessing 7
units`), so the report's reader is never left in silence; the CLI shows it as a status line."""


@dataclass(frozen=True, kw_only=True)
class KernelCount:
    """The kernels the compiled files define for one arch of the target (the scan's verdict
    line: how many of them hold work for it)."""

    arch: Arch
    kernels: int
    """`__global__` definitions in the files the build compiles for the target."""
    placeholders: int
    """Of those, the ones whose body for the arch only traps or is empty (FB154), as read
    before the preprocessor (the report recounts from the findings it kept)."""


@dataclass(frozen=True, kw_only=True)
class RecipeMatch:
    """The bundled recipe whose `[identity]` matches a scanned tree: what `flashbuild build
    TREE` and `flashbuild patch TREE` use for it."""

    name: str
    why: str
    """How it matched: the package and marker files the tree ships."""
    steps: int
    """Its patch steps whose `when` matches the scan's target."""
    unplanned: tuple[str, ...] = ()
    """Steps of those that do not apply to this tree as it is (`step: why`)."""


@dataclass(frozen=True, kw_only=True)
class ScanResult:
    root: Path
    target: ScanTarget
    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...]
    files_scanned: int
    seconds: float
    setup: Any = None
    """`setuppy.SetupPy` when setup.py decides what is compiled (recipe init drafts the
    setuptools build from it); None for CMake trees."""
    vendored: tuple[str, ...] = ()
    """Vendored folders left out (tree-relative): recipe init never edits inside them."""
    setup_unreadable: str = ""
    """Why the tree's top-level setup.py was not read ("" when it was, or there is none): a
    syntax error, nesting too deep to parse, not a regular file, a link out of the tree."""
    truth: str = ""
    """One line: what decided the gates (the preprocessor and how much of it ran, or why the
    static reading was the fallback)."""
    recipe: RecipeMatch | None = None
    """The bundled recipe that matches the tree by content (set by the pipeline, which
    chooses recipes: pipeline/choose.py); None when none does."""
    kernels: tuple[KernelCount, ...] = ()
    """Per arch of the target, the kernels the compiled files define (empty when the scan
    read no C++)."""
    read: frozenset[str] = frozenset()
    """The files the checks read (tree-relative): what a configured build compiles beyond
    them was not checked (recipe init scans again with that build's model)."""

    @property
    def blocking(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.blocking)

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Severity}
        for f in self.findings:
            out[f.severity.value] += 1
        return out


@dataclass(frozen=True)
class FileText:
    path: str
    """Relative, forward slashes."""
    kind: FileKind
    text: str


@dataclass
class FileReport:
    """What the checks of one file return: findings plus facts the tree-wide pass needs."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


def make_target(platform: str, arch: str | BuildTarget) -> ScanTarget:
    """Validate `--platform` / `--arch` into a ScanTarget (UsageError on bad input). `arch`:
    the command's resolved target, or the `--arch` text, parsed here once (the edge of `scan`
    and `recipe init`)."""
    if platform not in ("linux", "windows"):
        raise UsageError(f"`{platform}` is not a platform flashbuild scans for",
                         fix="pass --platform linux or --platform windows")
    target = arch if isinstance(arch, BuildTarget) else BuildTarget(parse_arch_spec(arch))
    spec = target.spec
    if spec.native and not spec.targets:
        raise UsageError("`scan` needs an explicit arch, not `native`",
                         evidence="a scan reads sources, not GPUs",
                         fix="pass e.g. --arch sm120")
    return ScanTarget(platform=platform, archs=spec.archs,  # type: ignore[arg-type]
                      target=target)
