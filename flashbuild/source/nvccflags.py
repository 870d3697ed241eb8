"""nvcc's arch options: one grammar for every reader of command lines and build scripts.

nvcc chooses what it emits with `-gencode`/`--generate-code arch=compute_X,code=[sm_X,...]`,
`-arch`/`--gpu-architecture` (`sm_X` alone means SASS sm_X plus PTX compute_X; `native`,
`all` and `all-major` let nvcc pick) and `-code`/`--gpu-code`; each spelling takes its value
after `=` or as the next argument (CUDA Toolkit docs, "NVCC command options"). Three places
read them: the arch proof after configure/build (building/archcheck.py: which SASS and PTX a
build.ninja asks for), the tree model (source/treemodel.py: which of a unit's flags are arch
flags, and arch text in run-time-compile calls) and the setup.py reader (source/setuppy.py: a
string literal that hard-codes an arch). They all use this module, so a spelling nvcc accepts
is read the same way everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

#: Every spelling of an option that chooses the arch.
ARCH_OPTIONS = ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code",
                "--gpu-code")
#: `-arch` values with which nvcc picks the archs itself.
WIDE = frozenset({"native", "all", "all-major"})

_OPTION = re.compile(r"^(?:" + "|".join(re.escape(o) for o in ARCH_OPTIONS) + r")(?=$|=)")
_GENCODE = re.compile(
    r"(?:-gencode|--generate-code)(?:=|\s+)\"?arch=(?P<arch>compute_\w+),"
    r"\s*code=\[?(?P<codes>[\w,\s]+?)\]?(?=[\s\"']|$)")
_ARCH = re.compile(r"(?:^|\s)(?:-arch|--gpu-architecture)(?:=|\s+)(?P<value>[\w-]+)")
_CODE = re.compile(r"(?:^|\s)(?:-code|--gpu-code)(?:=|\s+)(?P<value>[\w,\[\]]+)")
#: Arch text anywhere (a build script's string, a run-time compile call's options).
_TEXT = re.compile(r"(?:-gencode|--generate-code|-arch|--gpu-architecture)[= ][^\s'\"]+|"
                   r"\bsm_\d+[af]?\b|\bcompute_\d+[af]?\b")
#: A string that pins an arch for nvcc (`arch=compute_80,code=sm_80`, `-arch=sm_90`).
_PINS = re.compile(r"(?:arch=|-arch[= ]|--gpu-architecture[= ]|code=)(?:compute|sm)_\d")


def is_arch_option(token: str) -> bool:
    """`token` is an arch option, with its value (`-arch=sm_90`) or without (`-gencode`)."""
    return _OPTION.match(token) is not None


def split_arch_flags(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split one command line's arguments into (other flags, arch flags). An option whose
    value is the next argument (`-gencode arch=compute_90a,code=sm_90a`) keeps it."""
    other: list[str] = []
    arch: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if is_arch_option(tok):
            arch.append(tok)
            if "=" not in tok and i + 1 < len(tokens):
                i += 1
                arch.append(tokens[i])
        else:
            other.append(tok)
        i += 1
    return other, arch


def arch_text(text: str) -> list[str]:
    """The arch options and arch names in free text, in order (duplicates kept)."""
    return _TEXT.findall(text)


def first_arch_option(line: str) -> int | None:
    """Where the first arch option of a command line starts (None: it has none)."""
    hits = [m.start() for m in (p.search(line) for p in (_GENCODE, _ARCH, _CODE)) if m]
    return min(hits) if hits else None


def pins_arch(text: str) -> bool:
    """`text` hard-codes an arch for nvcc (a gencode or `-arch=sm_X` string)."""
    return _PINS.search(text) is not None


@dataclass
class ArchFlags:
    """The images a set of nvcc command lines asks for."""

    sass: set[str] = field(default_factory=set)
    """`sm_90a`, `sm_89`, …"""
    ptx: set[str] = field(default_factory=set)
    """`compute_90a`, …"""
    wide: set[str] = field(default_factory=set)
    """`-arch=native` / `all` / `all-major`: archs nvcc picks itself."""
    lines: list[str] = field(default_factory=list)
    """The lines the flags came from (evidence)."""

    @property
    def found(self) -> bool:
        return bool(self.sass or self.ptx or self.wide)


def read_arch_flags(lines: Iterable[str]) -> ArchFlags:
    """Collect the arch flags of command lines (Ninja's FLAGS / cuda_post_cflags lines, an
    `NVCC_APPEND_FLAGS` value)."""
    flags = ArchFlags()
    for line in lines:
        codes: list[str] = []
        for m in _GENCODE.finditer(line):
            codes += re.split(r"[,\s]+", m["codes"].strip())
        for m in _ARCH.finditer(line):
            value = m["value"]
            if value in WIDE:
                flags.wide.add(value)
            # `-arch=sm_89` alone is shorthand for SASS sm_89 + PTX compute_89.
            codes += [value, "compute_" + value[3:]] if value.startswith("sm_") else [value]
        for m in _CODE.finditer(line):
            codes += re.split(r"[,\[\]]+", m["value"])
        flags.sass.update(c for c in codes if c.startswith("sm_"))
        flags.ptx.update(c for c in codes if c.startswith("compute_"))
        if codes or _ARCH.search(line):
            flags.lines.append(line.strip())
    return flags
