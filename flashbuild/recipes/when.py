"""`when` conditions: evaluated against a context, and explaining themselves.

`evaluate(when, ctx)` returns whether the condition matched and, for every clause, why it
matched or not; `flashbuild patch --explain` prints that. Version clauses use `packaging`
specifiers. The context is plain data, so `--platform windows --arch sm120` lets a Linux
machine plan (and compile-check) the Windows/sm_120 patch set.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from flashbuild.arch import Arch, ArchSpec, Suffix, parse_arch, parse_arch_spec
from flashbuild.errors import UsageError

if TYPE_CHECKING:
    from flashbuild.recipes.model import When

_RANGE = re.compile(r"^(>=|<=|>|<|==|!=)\s*(?:sm_?)?(\d{2,3})$")
_SUFFIX = re.compile(r"^\*([af]?)$")


@dataclass(frozen=True, kw_only=True)
class WhenContext:
    """What conditions are evaluated against."""

    platform: str
    """`linux` or `windows`."""
    arch: ArchSpec
    """Target archs (may be empty: no GPU found and no `--arch`)."""
    cuda: Version | None = None
    """CUDA toolkit version, when known."""
    compiler: str | None = None
    """Host compiler kind (`msvc`, `gcc`, `clang`), when known."""
    compiler_version: Version | None = None
    """Host compiler version, when known."""
    torch: Version | None = None
    """torch version, when known."""
    notes: tuple[str, ...] = ()
    """How the context was chosen (e.g. "no GPU found and no --arch: no target arch")."""

    def describe(self) -> dict[str, str | None]:
        return {
            "platform": self.platform,
            "arch": ";".join(a.sm for a in self.arch.archs) or None,
            "cuda": str(self.cuda) if self.cuda else None,
            "compiler": (f"{self.compiler} {self.compiler_version or ''}".strip()
                         if self.compiler else None),
            "torch": str(self.torch) if self.torch else None,
        }


@dataclass(frozen=True)
class ClauseResult:
    """One clause of a condition and why it did or did not match."""

    clause: str
    matched: bool
    reason: str


@dataclass(frozen=True)
class WhenResult:
    matched: bool
    clauses: tuple[ClauseResult, ...]

    @property
    def reason(self) -> str:
        if not self.clauses:
            return "no condition: always applies"
        return "; ".join(c.reason for c in self.clauses)


def check_arch_pattern(pattern: str) -> None:
    """Raise ValueError when `pattern` is not an arch pattern (see `When.arch`)."""
    _arch_matcher(pattern)


@dataclass(frozen=True)
class _ArchPattern:
    negated: bool
    range: SpecifierSet | None = None
    """`>=120`: compared with the numeric code."""
    suffix: Suffix | None = None
    """`*a`: any arch with that suffix."""
    arch: Arch | None = None
    exact_suffix: bool = False
    """`sm_90a` names its suffix; `sm_90` matches any suffix of 90."""

    def matches(self, arch: Arch) -> bool:
        if self.range is not None:
            hit = self.range.contains(str(arch.code))
        elif self.suffix is not None:
            hit = arch.suffix == self.suffix
        else:
            assert self.arch is not None
            hit = arch.code == self.arch.code and (
                not self.exact_suffix or arch.suffix == self.arch.suffix)
        return hit != self.negated


@functools.lru_cache(maxsize=128)
def _arch_matcher(pattern: str) -> _ArchPattern:
    text = pattern.strip().lower()
    negated = text.startswith("!")
    text = text[1:].strip() if negated else text
    ranges = [_RANGE.match(part.strip()) for part in text.split(",")]
    if all(ranges):
        # `>=120,<130`: every comparison must hold (packaging's SpecifierSet semantics).
        return _ArchPattern(negated, range=SpecifierSet(
            ",".join(f"{m[1]}{m[2]}" for m in ranges if m)))
    if m := _SUFFIX.match(text):
        return _ArchPattern(negated, suffix=Suffix(m[1]))
    try:
        target = parse_arch(text)
    except UsageError as exc:
        raise ValueError(
            f"`{pattern}` is not an arch pattern: write an arch (sm_120, 90a), a range "
            f"(>=120), a suffix match (*a) or one of those after `!` ({exc.what})") from exc
    return _ArchPattern(negated, arch=target.arch,
                        exact_suffix=target.arch.suffix is not Suffix.NONE)


def arch_matches(pattern: str, arch: Arch) -> bool:
    """Whether `arch` matches one arch pattern (see `When.arch`)."""
    return _arch_matcher(pattern).matches(arch)


def evaluate(when: When, ctx: WhenContext) -> WhenResult:  # noqa: PLR0912 - one branch per clause
    """Evaluate every clause that is set; the condition matches when all of them do."""
    clauses: list[ClauseResult] = []
    if when.platform:
        ok = ctx.platform in when.platform
        clauses.append(ClauseResult(
            "platform", ok, f"platform {ctx.platform} {'is' if ok else 'is not'} in "
            f"{'/'.join(when.platform)}"))
    archs = ctx.arch.archs
    if when.arch:
        hits = [a.sm for a in archs if any(arch_matches(p, a) for p in when.arch)]
        pats = ", ".join(when.arch)
        if not archs:
            clauses.append(ClauseResult("arch", False, "no target arch (no GPU, no --arch)"))
        elif hits:
            clauses.append(ClauseResult("arch", True, f"{', '.join(hits)} matches {pats}"))
        else:
            clauses.append(ClauseResult(
                "arch", False, f"none of {', '.join(a.sm for a in archs)} matches {pats}"))
    if when.arch_all:
        misses = [a.sm for a in archs if not any(arch_matches(p, a) for p in when.arch_all)]
        pats = ", ".join(when.arch_all)
        if not archs:
            clauses.append(ClauseResult("arch_all", False,
                                        "no target arch (no GPU, no --arch)"))
        elif misses:
            clauses.append(ClauseResult("arch_all", False,
                                        f"{', '.join(misses)} does not match {pats}"))
        else:
            clauses.append(ClauseResult("arch_all", True, f"every target matches {pats}"))
    if when.cuda:
        clauses.append(_version_clause("cuda", "CUDA", when.cuda, ctx.cuda))
    if when.compiler:
        ok = ctx.compiler in when.compiler
        clauses.append(ClauseResult(
            "compiler", ok,
            f"host compiler {ctx.compiler or 'unknown'} {'is' if ok else 'is not'} in "
            f"{'/'.join(when.compiler)}"))
    if when.compiler_version:
        clauses.append(_version_clause("compiler_version", "host compiler",
                                       when.compiler_version, ctx.compiler_version))
    if when.torch:
        clauses.append(_version_clause("torch", "torch", when.torch, ctx.torch))
    return WhenResult(all(c.matched for c in clauses), tuple(clauses))


def _version_clause(name: str, label: str, spec: str, have: Version | None) -> ClauseResult:
    if have is None:
        return ClauseResult(name, False, f"{label} version unknown, needs {spec}")
    ok = SpecifierSet(spec).contains(have, prereleases=True)
    return ClauseResult(name, ok, f"{label} {have} {'satisfies' if ok else 'fails'} {spec}")


def make_context(*, platform: str | None = None, arch: ArchSpec | str | None = None,
                 gpu_capabilities: list[tuple[int, int]] | None = None,
                 cuda: str | None = None, compiler: str | None = None,
                 compiler_version: str | None = None, torch: str | None = None) -> WhenContext:
    """The context for `--platform` / `--arch` (defaults: this machine and its GPUs).

    `gpu_capabilities` are the compute capabilities of the GPUs found; the caller (the CLI or
    the build stage) passes what detection found, so this function starts no probe itself.
    `arch`: the command's target as its edge parsed it (`patch`); text is parsed here, for
    callers that hold a spelling (tests, a recipe's own arch).
    """
    from flashbuild.platforms import get  # noqa: PLC0415  # start-up

    notes: list[str] = []
    plat = get(platform).name
    caps = gpu_capabilities or []
    if arch is None:
        spec = ArchSpec(native=True) if caps else ArchSpec()
        if caps:
            spec = spec.resolve_native(caps)
            notes.append("target arch: the GPUs found (" +
                         ", ".join(a.sm for a in spec.archs) + ")")
        else:
            notes.append("no GPU found and no --arch: the target arch is empty, so steps "
                         "with an arch condition do not match")
    else:
        spec = parse_arch_spec(arch) if isinstance(arch, str) else arch
        if spec.native:
            if caps:
                spec = spec.resolve_native(caps)
            else:
                notes.append("--arch native but no GPU found: the target arch is empty")
                spec = ArchSpec(spec.targets)
    return WhenContext(
        platform=plat, arch=spec,
        cuda=Version(cuda) if cuda else None,
        compiler=compiler,
        compiler_version=Version(compiler_version) if compiler_version else None,
        torch=Version(torch) if torch else None,
        notes=tuple(notes))
