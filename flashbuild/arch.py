"""GPU architectures: one value type for every spelling users type, rendered for each layer.

`parse_arch_spec("sm120")`, `"sm_120a"`, `"12.0"`, `"120f"`, `"compute_90"`, `"90a;120"`,
`"8.6+PTX"`, `"120-real"`, `"native"` all become an `ArchSpec`; `ArchSpec.cmake()`,
`.gencode()` and `.torch()` render it for `CMAKE_CUDA_ARCHITECTURES`, nvcc and
`TORCH_CUDA_ARCH_LIST`. The per-arch facts (first CUDA that compiles it, CUDA 13's removals,
shared-memory limits) live here and nowhere else (FACTS.md, "GPU architectures").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from packaging.version import Version

from flashbuild.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterable


class Suffix(StrEnum):
    """`a`: arch-specific features, runs only on that exact SM. `f`: family-portable."""

    NONE = ""
    ARCH = "a"
    FAMILY = "f"


class Image(StrEnum):
    """What the binary carries for an arch: machine code, PTX, or both."""

    SASS = "sass"
    PTX = "ptx"
    BOTH = "both"


# Every SM code some CUDA release could emit, with the first toolkit that compiles it.
FIRST_CUDA: dict[int, str] = {
    50: "6.0", 52: "7.0", 53: "7.0", 60: "8.0", 61: "8.0", 62: "8.0", 70: "9.0", 72: "10.0",
    75: "10.0", 80: "11.0", 86: "11.1", 87: "11.4", 89: "11.8", 90: "12.0",
    100: "12.8", 101: "12.8", 120: "12.8", 103: "12.9", 121: "12.9", 110: "13.0", 88: "13.0",
}
# CUDA 13.0 removed sm_50 … sm_72 and sm_101 (sm_101 became sm_110).
REMOVED_IN: dict[int, str] = {**{c: "13.0" for c in (50, 52, 53, 60, 61, 62, 70, 72)},
                              101: "13.0"}
FAMILY_FIRST_CUDA = "12.9"
# Opt-in maximum dynamic shared memory per block, bytes.
MAX_SMEM_PER_BLOCK: dict[int, int] = {
    70: 98304, 72: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912, 88: 101376,
    89: 101376, 90: 232448, 100: 232448, 101: 232448, 103: 232448, 110: 232448,
    120: 101376, 121: 101376,
}
MAX_REGISTERS_PER_THREAD = 255
REGISTERS_PER_SM = 65536

_KNOWN = sorted(FIRST_CUDA)
_TOKEN = re.compile(
    r"""^(?:(?P<prefix>sm|compute|lto)_?)?          # sm_120, sm120, compute_120
        (?:(?P<dotted>\d{1,2})\.(?P<minor>\d)       # 12.0 (torch / compute capability)
          |(?P<code>\d{2,3}))                       # 120
        (?P<suffix>[af])?
        (?P<ptx>\+ptx)?                             # torch's 8.6+PTX
        (?:-(?P<cmake>real|virtual))?$              # CMake's 120-real / 120-virtual
    """,
    re.VERBOSE,
)


@dataclass(frozen=True, order=True)
class Arch:
    """One GPU architecture, e.g. Arch(12, 0, Suffix.ARCH) is sm_120a."""

    major: int
    minor: int
    suffix: Suffix = Suffix.NONE

    @property
    def code(self) -> int:
        """120 for sm_120a."""
        return self.major * 10 + self.minor

    @property
    def capability(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def sm(self) -> str:
        return f"sm_{self.code}{self.suffix}"

    @property
    def compute(self) -> str:
        return f"compute_{self.code}{self.suffix}"

    @property
    def dotted(self) -> str:
        return f"{self.major}.{self.minor}{self.suffix}"

    @property
    def base(self) -> Arch:
        return replace(self, suffix=Suffix.NONE)

    def __str__(self) -> str:
        return self.sm

    def first_cuda(self) -> Version:
        """The first CUDA release whose nvcc compiles this target."""
        first = Version(FIRST_CUDA[self.code])
        if self.suffix is Suffix.FAMILY:
            first = max(first, Version(FAMILY_FIRST_CUDA))
        return first

    def removed_in(self) -> Version | None:
        removed = REMOVED_IN.get(self.code)
        return Version(removed) if removed else None

    def max_smem_per_block(self) -> int | None:
        return MAX_SMEM_PER_BLOCK.get(self.code)

    def runs_on(self, capability: tuple[int, int]) -> bool:
        """Whether SASS for this target runs on a GPU of `capability`."""
        if self.suffix is Suffix.ARCH:
            return capability == self.capability
        if self.suffix is Suffix.FAMILY:
            return capability[0] == self.major and capability[1] >= self.minor
        # Plain SASS runs on later minors of the same major (sm_86 code on an 8.9 GPU).
        return capability[0] == self.major and capability[1] >= self.minor


@dataclass(frozen=True)
class Target:
    """One arch and what to embed for it."""

    arch: Arch
    image: Image = Image.SASS

    @property
    def sass(self) -> bool:
        return self.image in (Image.SASS, Image.BOTH)

    @property
    def ptx(self) -> bool:
        return self.image in (Image.PTX, Image.BOTH)


@dataclass(frozen=True)
class ArchSpec:
    """A parsed `--arch` value: targets in ascending order, or `native` (resolved later)."""

    targets: tuple[Target, ...] = ()
    native: bool = False

    @property
    def archs(self) -> tuple[Arch, ...]:
        return tuple(t.arch for t in self.targets)

    def __str__(self) -> str:
        return self.cmake() if self.targets else "native"

    def resolve_native(self, capabilities: Iterable[tuple[int, int]], *,
                       typed: bool = True) -> ArchSpec:
        """Replace `native` with the GPUs found (SASS for each). `typed=False`: the user gave
        no `--arch` and `native` is the default, so an error must not quote an option they
        never typed."""
        if not self.native:
            return self
        found = [Target(Arch(major, minor)) for major, minor in capabilities]
        if not found and not self.targets:
            raise UsageError(
                "`--arch native` needs a GPU, and none was found" if typed else
                "no --arch was given, and there is no GPU to build for",
                evidence="NVML and nvidia-smi reported no NVIDIA GPU on this machine",
                fix="name the target explicitly, e.g. `--arch sm120` for an RTX 5090 or RTX "
                "PRO 6000, `--arch sm_90a` for an H100",
            )
        return _merge([*self.targets, *found], native=False)

    def with_suffix(self, suffix: Suffix) -> ArchSpec:
        """Each plain target as its `suffix` variant where that variant exists (`a` from
        sm_90a on, `f` from sm_100f on): `sm_120` -> `sm_120a`, `sm_89` stays. For a tree that
        compiles the variant whatever it is given (a recipe's `[build] arch_suffix`)."""
        if suffix is Suffix.NONE:
            return self
        return _merge((Target(replace(t.arch, suffix=suffix), t.image)
                       if t.arch.suffix is Suffix.NONE and has_variant(t.arch.code, suffix)
                       else t for t in self.targets), native=self.native)

    def cmake(self) -> str:
        """`CMAKE_CUDA_ARCHITECTURES`: `90a-real;120` (bare = SASS + PTX in CMake)."""
        if self.native and not self.targets:
            return "native"
        parts = []
        for t in self.targets:
            name = f"{t.arch.code}{t.arch.suffix}"
            parts.append(name if t.image is Image.BOTH else
                         f"{name}-real" if t.image is Image.SASS else f"{name}-virtual")
        return ";".join(parts)

    def gencode(self) -> list[str]:
        """nvcc flags: one `-gencode` pair per target."""
        flags: list[str] = []
        for t in self.targets:
            codes = ([t.arch.sm] if t.sass else []) + ([t.arch.compute] if t.ptx else [])
            code = codes[0] if len(codes) == 1 else "[" + ",".join(codes) + "]"
            flags += ["-gencode", f"arch={t.arch.compute},code={code}"]
        return flags

    def torch_informational(self) -> str:
        """`TORCH_CUDA_ARCH_LIST` for a build whose nvcc flags flashbuild passes itself (the
        setuptools backend): family targets, which torch rejects, become their base arch here;
        the `-gencode` flags still say `f`."""
        try:
            return self.torch()
        except UsageError:
            return ";".join(dict.fromkeys(
                (t.arch.base.dotted if t.arch.suffix is Suffix.FAMILY else t.arch.dotted)
                + ("+PTX" if t.ptx and t.sass else "") for t in self.targets))

    @property
    def label(self) -> str:
        """The targets as a user writes them: `sm_90a, sm_120+PTX`."""
        return ", ".join(t.arch.sm + ("+PTX" if t.ptx and t.sass else "") if t.sass
                         else t.arch.compute for t in self.targets) or "native"

    @property
    def argument(self) -> str:
        """The targets as one `--arch` word: `sm_90a,sm_120+PTX`."""
        return self.label.replace(", ", ",")

    def placeholders(self) -> dict[str, str]:
        """The arch in the forms projects read it (recipe `{placeholders}`, see
        recipes.model.ARCH_PLACEHOLDERS): `90a;120`, `90;120`, `9.0;12.0`, `9.0a;12.0`,
        `90a-real;120-real`."""
        return {
            "arch_codes": ";".join(f"{t.arch.code}{t.arch.suffix}" for t in self.targets),
            "arch_numbers": ";".join(dict.fromkeys(str(t.arch.code) for t in self.targets)),
            "arch_dotted": ";".join(dict.fromkeys(t.arch.base.dotted for t in self.targets)),
            "torch_arch_list": self.torch_informational(),
            "cmake_archs": self.cmake(),
        }

    def torch(self) -> str:
        """`TORCH_CUDA_ARCH_LIST`, e.g. `9.0a;12.0+PTX`. torch rejects family targets."""
        out = []
        for t in self.targets:
            if t.arch.suffix is Suffix.FAMILY:
                raise UsageError(
                    f"torch's TORCH_CUDA_ARCH_LIST cannot express the family target {t.arch.sm}",
                    evidence="torch.utils.cpp_extension rejects `f` suffixes",
                    fix=f"use {t.arch.base.sm} (or {t.arch.code}a) for torch-built extensions",
                )
            if t.image is Image.PTX:
                raise UsageError(
                    f"TORCH_CUDA_ARCH_LIST cannot ask for PTX only ({t.arch.compute})",
                    fix=f"use `{t.arch.dotted}+PTX` to embed SASS and PTX",
                )
            out.append(t.arch.dotted + ("+PTX" if t.ptx else ""))
        return ";".join(out)


#: The first SM code with an arch-specific (`a`) and a family (`f`) variant.
FIRST_VARIANT: dict[Suffix, int] = {Suffix.ARCH: 90, Suffix.FAMILY: 100}


def has_variant(code: int, suffix: Suffix) -> bool:
    """Whether sm_<code><suffix> exists (sm_90a does, sm_89a and sm_90f do not)."""
    return suffix is Suffix.NONE or code >= FIRST_VARIANT[suffix]


def parse_arch(token: str) -> Target:
    """Parse one spelling of one arch; raise a UsageError that names the accepted forms."""
    raw = token
    text = token.strip().lower()
    match = _TOKEN.match(text)
    if not match:
        raise _bad(raw, "it is not a GPU architecture spelling")
    if match["dotted"] is not None:
        major, minor = int(match["dotted"]), int(match["minor"])
    else:
        code = int(match["code"])
        major, minor = divmod(code, 10)
    suffix = Suffix(match["suffix"] or "")
    arch = Arch(major, minor, suffix)
    if arch.code not in FIRST_CUDA:
        raise _bad(raw, f"no NVIDIA GPU has compute capability {major}.{minor}",
                   hint=f"did you mean sm_{_nearest(code_text(match))}?")
    if suffix is Suffix.ARCH and not has_variant(arch.code, suffix):
        raise _bad(raw, "`a` (arch-specific) targets exist from sm_90a on")
    if suffix is Suffix.FAMILY and not has_variant(arch.code, suffix):
        raise _bad(raw, "`f` (family) targets exist from sm_100f on")
    image = Image.SASS
    if match["prefix"] == "compute" or match["cmake"] == "virtual":
        image = Image.PTX
    if match["ptx"]:
        image = Image.BOTH
    return Target(arch, image)


def parse_arch_spec(text: str) -> ArchSpec:
    """Parse a whole `--arch` value: one or more arch spellings separated by `;`, `,` or
    spaces, or `native`."""
    tokens = [t for t in re.split(r"[;,\s]+", text.strip()) if t]
    if not tokens:
        raise _bad(text, "it is empty")
    targets: list[Target] = []
    native = False
    for token in tokens:
        if token.lower() == "native":
            native = True
        else:
            targets.append(parse_arch(token))
    return _merge(targets, native=native)


def _merge(targets: Iterable[Target], *, native: bool) -> ArchSpec:
    """Sort, and merge duplicates (sm_120 + compute_120 = both images)."""
    by_arch: dict[Arch, Image] = {}
    for t in targets:
        seen = by_arch.get(t.arch)
        by_arch[t.arch] = t.image if seen is None or seen is t.image else Image.BOTH
    ordered = tuple(Target(a, by_arch[a]) for a in sorted(by_arch))
    return ArchSpec(ordered, native=native)


def code_text(match: re.Match[str]) -> str:
    """The digits the user typed for the arch (`12` of `sm12`, `120` of `12.0`)."""
    if match["dotted"] is not None:
        return f"{int(match['dotted'])}{int(match['minor'])}"
    return str(int(match["code"]))


def _nearest(digits: str) -> int:
    """The known arch a mistyped code most likely meant: one whose code starts with the typed
    digits (`sm12` is sm_120 with its last digit left out, not the numerically nearest
    sm_50), else the numerically nearest."""
    starting = sorted(c for c in _KNOWN if str(c).startswith(digits))
    if starting:
        return starting[0]
    return min(_KNOWN, key=lambda c: abs(c - int(digits)))


def _bad(raw: str, why: str, hint: str = "") -> UsageError:
    return UsageError(
        f"`{raw}` is not a GPU architecture flashbuild knows: {why}",
        evidence=hint,
        fix="write it as sm_120, sm120, 12.0, 120, sm_90a, 120f, compute_120 (PTX only), "
        "8.6+PTX, a list like `90a;120`, or `native`",
    )


def satisfies(image: Arch, wanted: Arch) -> bool:
    """THE rule build and verify share: compiled code for `image` satisfies a requested
    `wanted` only when they are the same arch, suffix included. `sm_120a` SASS does not
    satisfy `--arch sm_120` (it runs only on 12.0 and may use 12.0's arch-specific
    instructions), nor `sm_120` SASS `--arch sm_120a`; a recipe whose tree always compiles the
    variant says `[build] arch_suffix = "a"`, and the target then asks for `sm_120a` itself
    (`ArchSpec.with_suffix`), so the variant is what is wanted (docs/build.md, "One target")."""
    return image == wanted


class Origin(StrEnum):
    """Where a command's target came from, for its messages."""

    FLAG = "--arch"
    GPU = "the GPUs found"
    DEFAULT = "the default"
    RECIPE = "the recipe's default"
    MANIFEST = "the install manifest"


@dataclass(frozen=True)
class BuildTarget:
    """The one target of a command: resolved once at its edge (`--arch`, else the GPUs
    found, else a recipe's default) and passed down typed; nothing below re-parses it."""

    spec: ArchSpec
    origin: Origin = Origin.FLAG

    @property
    def archs(self) -> tuple[Arch, ...]:
        return self.spec.archs

    @property
    def label(self) -> str:
        return self.spec.label

    def names(self) -> list[str]:
        """The manifest's typed form: `["sm_90a", "compute_120", "sm_120+PTX"]`."""
        return [t.arch.sm + ("+PTX" if t.ptx else "") if t.sass else t.arch.compute
                for t in self.spec.targets]

    @classmethod
    def from_names(cls, names: Iterable[str], origin: Origin = Origin.MANIFEST) -> BuildTarget:
        """Back from `names()` (a manifest): each name is one of this module's spellings."""
        return cls(parse_arch_spec(";".join(names)), origin)

    def with_spec(self, spec: ArchSpec) -> BuildTarget:
        return replace(self, spec=spec)

    def missing(self, sass: Iterable[str], ptx: Iterable[str] | None = None) -> list[str]:
        """The requested images that compiled `sass` / `ptx` (names like `sm_120a`,
        `compute_120`) do not satisfy, by `satisfies`; `ptx=None`: SASS only is judged (the
        build's arch check, which reads nvcc's SASS requests)."""
        have_sass = _image_archs(sass)
        have_ptx = None if ptx is None else _image_archs(ptx)
        out: list[str] = []
        for t in self.spec.targets:
            if t.sass and not any(satisfies(a, t.arch) for a in have_sass):
                out.append(t.arch.sm)
            if t.ptx and have_ptx is not None and \
                    not any(satisfies(a, t.arch) for a in have_ptx):
                out.append(t.arch.compute)
        return out

    def accepts(self, sass: Iterable[str], ptx: Iterable[str] | None = ()) -> bool:
        """Whether compiled SASS / PTX carry every image this target asks for."""
        return not self.missing(sass, ptx)


def _image_archs(names: Iterable[str]) -> list[Arch]:
    """`sm_120a` / `compute_90` as found in a binary or an nvcc command (not user input: a
    name that is no image satisfies nothing)."""
    out = []
    for name in names:
        match = _TOKEN.match(name.strip().lower())
        if match is not None and match["code"] is not None:
            major, minor = divmod(int(match["code"]), 10)
            out.append(Arch(major, minor, Suffix(match["suffix"] or "")))
    return out
