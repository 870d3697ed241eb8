"""What a configured build really compiles for, read from its generated Ninja file.

`--arch` reaches a tree in many ways (CMAKE_CUDA_ARCHITECTURES, a project variable such as
`GPU_ARCH`, TORCH_CUDA_ARCH_LIST, a gencode list in setup.py), and a tree can ignore all of
them: a CMakeLists that sets its own `CUDA_ARCHITECTURES` from `nvidia-smi` or a default of 89
configures without complaint and builds the wrong code. So after configure (CMake) or after the
build (torch's `build/temp*/build.ninja`) flashbuild reads the arch flags every nvcc command
carries and compares the SASS they ask for with `--arch`: a difference is an error before the
binary is installed, never a silent wrong build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flashbuild.errors import BuildError

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from flashbuild.arch import ArchSpec

_GENCODE = re.compile(
    r"(?:-gencode|--generate-code)(?:=|\s+)\"?arch=(?P<arch>compute_\w+),"
    r"\s*code=\[?(?P<codes>[\w,\s]+?)\]?(?=[\s\"']|$)")
_ARCH = re.compile(r"(?:^|\s)(?:-arch|--gpu-architecture)(?:=|\s+)(?P<value>[\w-]+)")
_CODE = re.compile(r"(?:^|\s)(?:-code|--gpu-code)(?:=|\s+)(?P<value>[\w,\[\]]+)")
_WIDE = frozenset({"native", "all", "all-major"})


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
    """Collect the arch flags of command lines (Ninja's FLAGS / cuda_post_cflags lines)."""
    flags = ArchFlags()
    for line in lines:
        codes: list[str] = []
        for m in _GENCODE.finditer(line):
            codes += re.split(r"[,\s]+", m["codes"].strip())
        for m in _ARCH.finditer(line):
            value = m["value"]
            if value in _WIDE:
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


def ninja_arch_flags(build_ninja: Path) -> ArchFlags:
    try:
        text = build_ninja.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ArchFlags()
    return read_arch_flags(text.splitlines())


def expected_sass(spec: ArchSpec) -> set[str]:
    return {t.arch.sm for t in spec.targets if t.sass}


def check(flags: ArchFlags, spec: ArchSpec, *, where: Path, fix: str,
          extra_evidence: str = "") -> None:
    """Raise BuildError when the compiled SASS differs from `--arch`'s."""
    want = expected_sass(spec)
    if not flags.found or not want:
        return
    missing = sorted(want - flags.sass)
    extra = sorted(flags.sass - want)
    if not (missing or extra or flags.wide):
        return
    parts = []
    if missing:
        parts.append(f"lacks {', '.join(missing)}")
    if extra:
        parts.append(f"also builds {', '.join(extra)}")
    if flags.wide:
        parts.append(f"lets nvcc choose (-arch={', '.join(sorted(flags.wide))})")
    sample = "\n".join(_shorten(line) for line in flags.lines[:3])
    raise BuildError(
        f"the build does not compile for --arch {spec.label}: it {'; '.join(parts)}",
        evidence=f"{where} asks nvcc for SASS {', '.join(sorted(flags.sass)) or 'none'}"
        + (f" and PTX {', '.join(sorted(flags.ptx))}" if flags.ptx else "")
        + f":\n{sample}" + (f"\n{extra_evidence}" if extra_evidence else ""),
        fix=fix,
        details={"requested": sorted(want), "sass": sorted(flags.sass),
                 "ptx": sorted(flags.ptx), "file": str(where)},
    )


def _shorten(line: str, width: int = 240) -> str:
    """The arch part of a long command line, with a little context."""
    m = _GENCODE.search(line) or _ARCH.search(line) or _CODE.search(line)
    if m is None or len(line) <= width:
        return line
    start = max(0, m.start() - 40)
    return ("… " if start else "") + line[start:start + width] + " …"
