"""Tell real kernels from placeholders: a kernel whose body for an arch can only trap.

A tree that does not support an arch often still compiles every kernel for it, with an
`#if __CUDA_ARCH__` branch that the arch takes and that only reports and traps (`__trap()`,
`asm("trap;")`, a printf before it; FlashMLA and DeepGEMM guard it with `if (thread0())`, so
the other threads exit). The build and the arch proof pass; every launch dies. FlashMLA built
for sm_120 holds 57 such kernels.

What is read, per cubin (the SASS ELF image `FatbinImage.data()` gives): the kernels are the
STT_FUNC symbols with STO_CUDA_ENTRY (0x10) in `st_other` (nvdisasm prints it as `.other
NAME,@"STO_CUDA_ENTRY STV_DEFAULT"`; device functions ptxas did not inline live in the same
`.text.<kernel>` section, after the kernel's own code, without the flag). Their section is
decoded as 128-bit instructions (16 bytes, little-endian; the low u64 holds the opcode):

* opcode: the low 12 bits; the low 9 are the operation, bits 9-11 the operand form
  (BRA 0x947 takes an immediate target, BRA.U 0x547 a uniform predicate). Every control-flow
  operation seen has its 9-bit operation in 0x140-0x15F;
* guard predicate: bits 12-15, the low three the predicate register (7 = PT, always true) and
  bit 15 its negation; 0x7 means unpredicated, 0xF (`@!PT`) never executes.

The encodings, checked by compiling kernels with nvcc 13.0.88 (`-cubin -arch=sm_XX`) and
disassembling them with nvdisasm 13.5.37 (`-hex`, PyPI nvidia-cuda-nvdisasm) for sm_75,
sm_80, sm_86, sm_87, sm_88, sm_89, sm_90, sm_90a, sm_100, sm_100a, sm_100f, sm_103, sm_110,
sm_120, sm_120a, sm_120f and sm_121, identical on every one. The probe kernels: trap only,
`if (thread0()) { printf; trap; }`, `if (bad) __trap();`, `__brkpt()`, a switch (BRX, BRXU),
loops, a noinline call, an early return, an empty kernel and a 24 KB forward jump; the
placeholder shapes are committed as tests/fixtures/verify/placeholders.cu, replayed by
tests/unit/test_verify_placeholders.py:

    EXIT 0x94d   BPT 0x95c (BPT.TRAP: bits 20-23 of the high u64 = 3; what `__trap()`,
    `asm("trap;")` and `__brkpt()` compile to)   BRA 0x947 / BRA.U 0x547   BRX 0x949
    BRXU 0x958 (sm_110+)   RET 0x950   CALL.ABS 0x343 (vprintf) / CALL.REL 0x944   NOP 0x918
    BSSY 0x945   BSYNC 0x941   LEPC 0x34e (sm_75-89) / 0x94e (sm_90+)
    BMOV.32 0x956 / BMOV.32.CLEAR 0x355, 0xf55 (sm_87 opens every kernel with them)

BRA targets: sm_75-89 hold a signed byte offset from the next instruction in bits 32-81;
sm_90 and later a signed offset in 4-byte words, its low 8 bits in bits 16-23 and the rest in
bits 34-81 (checked against every branch label nvdisasm prints in the probe cubins, jumps of
up to 24 KB included).

A cubin of another arch (sm_70/72, older encodings, newer archs) is not judged: its kernels
are reported `not read`, never real or placeholder.

The rule. A kernel is a placeholder when either

1. it holds a BPT.TRAP and no EXIT at all: every path ends in a trap; or
2. every path from its entry reaches an unconditional BPT.TRAP before an unconditional EXIT:
   predicated EXITs, calls (vprintf returns), BSSY/BSYNC/BMOV and predicated traps are
   passed, a forward BRA is followed both ways (taken and not: BRA.DIV and BRA.U are
   conditional without a guard predicate), and a backward BRA (a loop), BRX, BRXU, RET or any
   control operation not known to fall through means real code. Every thread that does not
   exit early then reaches the trap: the `if (thread0()) { printf(...); trap; }` shape.

`if (bad) __trap();` in a real kernel compiles to a predicated trap or a branch to a trap
block and an EXIT after the work, so it is never a placeholder. A kernel whose body for the
arch is empty (an `#if` that compiles to nothing) is not caught: it does no harm at launch.

Memory stays bounded: images are capped by fatbin.py (`MAX_IMAGE_BYTES`) and every section is
read through `section_data`.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from elftools.common.exceptions import ELFError
from elftools.elf.sections import StringTableSection

from flashbuild.verifying.fatbin import (
    BinaryFormatError,
    FatbinImage,
    ImageKind,
    UnknownCodecError,
    cubin_elf,
    list_images,
    section_data,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

    from flashbuild.arch import Arch

#: SM codes (major*10 + minor) whose encodings were checked (see the module docstring).
CHECKED_CODES = frozenset({75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121})

OP_EXIT = 0x94D
OP_BPT = 0x95C
OP_BRA = 0x947
OP_BRA_U = 0x547
OP_BRX = 0x949
OP_BRXU = 0x958
OP_RET = 0x950
OP_CALL_ABS = 0x343
OP_CALL_REL = 0x944
OP_NOP = 0x918
OP_BSSY = 0x945
OP_BSYNC = 0x941
#: Control-flow operations (9-bit) known to fall through to the next instruction.
_FALLS_THROUGH = frozenset(op & 0x1FF for op in (
    OP_CALL_ABS, OP_CALL_REL, OP_BSSY, OP_BSYNC, 0x94E,  # LEPC
    0x956, 0xF55))  # BMOV.32 / BMOV.32.CLEAR (sm_75 0x355, sm_87's prologue)
_BPT_MODE_SHIFT = 20
_BPT_TRAP = 3
_PT = 0x7
_NEVER = 0xF
STO_CUDA_ENTRY = 0x10
_STT_FUNC = 2
_SYM = struct.Struct("<IBBHQQ")
_INSN = struct.Struct("<QQ")


class Body(StrEnum):
    """What a kernel's code for one arch is."""

    REAL = "real"
    PLACEHOLDER = "placeholder"
    #: The arch's encodings were not checked, or the section could not be read.
    NOT_READ = "not read"


@dataclass(frozen=True)
class KernelBody:
    """One kernel of one cubin, and what its code is."""

    #: Mangled name.
    name: str
    #: Image name of the cubin (`sm_120`).
    arch: str
    body: Body
    #: Why: `every path ends in a trap`, `every thread that does not exit first traps`, ….
    why: str = ""
    instructions: int = 0
    #: Which cubin of the binary holds it (its image's position in the fatbin): one cubin is
    #: one compiled unit, unless the build linked device code (-rdc), which merges them.
    unit: int = 0

    @property
    def short(self) -> str:
        """A readable name: `flash::fwd_kernel<…>` for an Itanium-mangled one."""
        return short_name(self.name)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "short": self.short, "arch": self.arch,
                "body": str(self.body), "why": self.why, "instructions": self.instructions}


@dataclass(frozen=True)
class PlaceholderKernels:
    """The kernels of one binary for one arch (every cubin of that arch in it)."""

    binary: Path
    #: Image name (`sm_120`, `sm_90a`).
    arch: str
    kernels: tuple[KernelBody, ...] = ()
    #: Why the cubins were not read (damaged, unknown codec); empty when they were.
    error: str = ""

    @property
    def placeholders(self) -> tuple[KernelBody, ...]:
        return tuple(k for k in self.kernels if k.body is Body.PLACEHOLDER)

    @property
    def real(self) -> tuple[KernelBody, ...]:
        return tuple(k for k in self.kernels if k.body is Body.REAL)

    @property
    def not_read(self) -> tuple[KernelBody, ...]:
        return tuple(k for k in self.kernels if k.body is Body.NOT_READ)

    def to_json(self) -> dict[str, object]:
        return {"binary": str(self.binary), "arch": self.arch, "kernels": len(self.kernels),
                "real": len(self.real), "not_read": len(self.not_read),
                "placeholders": [k.to_json() for k in self.placeholders],
                "error": self.error}


def _instructions(code: bytes) -> Iterator[tuple[int, int]]:
    usable = len(code) - len(code) % _INSN.size
    return _INSN.iter_unpack(memoryview(code)[:usable])


def _is_trap(lo: int, hi: int) -> bool:
    return (lo & 0xFFF == OP_BPT and (hi >> _BPT_MODE_SHIFT) & 0xF == _BPT_TRAP
            and (lo >> 12) & 0xF != _NEVER)


def branch_target(lo: int, hi: int, pc: int, *, code: int) -> int:
    """The byte offset a BRA (0x947 / 0x547) at `pc` jumps to, on an arch of SM `code`."""
    if code < 90:
        # sm_75-89: a signed byte offset from the next instruction in bits 32-81.
        raw = (hi & 0x3FFFF) << 32 | lo >> 32
        raw -= (raw & 1 << 49) << 1
    else:
        # sm_90+: a signed word offset, its low 8 bits in bits 16-23, the rest in bits 34-81.
        raw = ((hi & 0x3FFFF) << 30 | lo >> 34) << 8 | (lo >> 16) & 0xFF
        raw = (raw - ((raw & 1 << 55) << 1)) * 4
    return pc + _INSN.size + raw


def judge(code: bytes, *, sm: int) -> tuple[Body, str]:
    """Whether the instructions `code` (a kernel's section, from its entry) of an arch of SM
    `sm` whose encodings were checked are a placeholder; the reason in words."""
    insns = list(_instructions(code))
    trap = any(_is_trap(lo, hi) for lo, hi in insns)
    if not trap:
        return Body.REAL, "no trap"
    if not any(lo & 0xFFF == OP_EXIT and (lo >> 12) & 0xF != _NEVER for lo, _ in insns):
        return Body.PLACEHOLDER, "every path ends in a trap (no EXIT)"
    # must[i]: every path from instruction i reaches an unconditional trap before an
    # unconditional EXIT. Only forward branches are followed (a loop counts as real work),
    # so one pass from the end decides it. Every branch is taken as two-way: a BRA.DIV or a
    # uniform-predicated BRA.U is conditional without a guard predicate.
    must = [False] * (len(insns) + 1)
    for i in range(len(insns) - 1, -1, -1):
        lo, hi = insns[i]
        op, guard, group = lo & 0xFFF, (lo >> 12) & 0xF, lo & 0x1FF
        after = must[i + 1]
        if guard == _NEVER:
            must[i] = after
        elif _is_trap(lo, hi):
            must[i] = guard == _PT or after
        elif op == OP_EXIT:
            must[i] = guard != _PT and after
        elif op in (OP_BRA, OP_BRA_U):
            target, rest = divmod(branch_target(lo, hi, i * _INSN.size, code=sm), _INSN.size)
            must[i] = (not rest and i < target < len(insns) and must[target] and after)
        elif 0x140 <= group < 0x160 and group not in _FALLS_THROUGH and op != OP_BPT:
            must[i] = False  # BRX, RET, … or a control operation not known to fall through
        else:
            must[i] = after
    if must[0]:
        return Body.PLACEHOLDER, ("every thread that does not exit first reaches an "
                                  "unconditional trap")
    return Body.REAL, "a trap on some paths only"


def read_cubin(cubin: bytes, *, arch: Arch, name: str = "",
               unit: int = 0) -> tuple[KernelBody, ...]:
    """Every kernel of one cubin (an uncompressed SASS image of `arch`) and what its body is;
    all `not read` for an arch whose encodings were not checked. `name` is the image name
    (default `arch.sm`). Raises BinaryFormatError for a cubin that is no readable ELF."""
    label = name or arch.sm
    where = f"the {label} cubin"
    try:
        elf = cubin_elf(cubin, where)
        symtab = elf.get_section_by_name(".symtab")
        strtab = elf.get_section_by_name(".strtab")
        if symtab is None or not isinstance(strtab, StringTableSection):
            return ()
        raw = section_data(symtab, where)
        kernels: list[KernelBody] = []
        for entry in _SYM.iter_unpack(memoryview(raw)[:len(raw) - len(raw) % _SYM.size]):
            st_name, info, other, shndx, value, _size = entry
            if info & 0xF != _STT_FUNC or not other & STO_CUDA_ENTRY or not 0 < shndx < 0xFF00:
                continue
            kernel = strtab.get_string(st_name) or ""
            section = elf.get_section(shndx)
            # The whole rest of the section: ptxas puts the functions a kernel calls after it.
            code = section_data(section, where)[value:]
            count = len(code) // _INSN.size
            if arch.code not in CHECKED_CODES:
                kernels.append(KernelBody(kernel, label, Body.NOT_READ,
                                          f"{arch.sm} instruction encodings are not checked "
                                          "by flashbuild", count, unit))
                continue
            body, why = judge(code, sm=arch.code)
            kernels.append(KernelBody(kernel, label, body, why, count, unit))
    except (ELFError, ValueError, EOFError, struct.error, AttributeError) as exc:
        raise BinaryFormatError(f"the {label} cubin is damaged", evidence=str(exc),
                                fix="rebuild the module") from exc
    return tuple(kernels)


def image_bodies(image: FatbinImage, *, unit: int = 0) -> tuple[KernelBody, ...]:
    """`read_cubin` of a SASS image (decompressing it when needed)."""
    return read_cubin(image.data(), arch=image.arch, name=image.name, unit=unit)


_PTX_ENTRY = re.compile(rb"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\b", re.MULTILINE)


def defines_kernels(binary_path: Path) -> bool:
    """Whether any GPU image of the binary's fatbin sections defines a kernel (an entry function
    of a cubin, a `.entry` of PTX): a module with none (cuFFT's libcufftw.so.12 holds one
    1.9 KB sm_75 cubin without a kernel) has nothing to launch, so no GPU can fail it. Reads
    the binary whole: call it for the few binaries a verdict hangs on. Raises
    BinaryFormatError for a binary or image that cannot be read."""
    for image in list_images(binary_path).images:
        if image.kind is ImageKind.PTX:
            if _PTX_ENTRY.search(image.data()):
                return True
        elif read_cubin(image.data(), arch=image.arch, name=image.name):
            return True
    return False


def placeholder_report(binary_path: Path,
                       archs: Iterable[Arch] = ()) -> tuple[PlaceholderKernels, ...]:
    """The kernels of `binary_path` (an object, `.so`, `.dll`, `.pyd`) per SASS arch, for the
    SASS images of `archs` (matched by SM: sm_90a images serve sm_90; every SASS image when
    `archs` is empty), in image order, one entry per arch name. For the build pipeline to call
    after a build; prints nothing. An image that cannot be read gives an entry with `error`
    set. Raises BinaryFormatError when the binary itself is no readable ELF/PE file."""
    codes = {a.code for a in archs}
    found: dict[str, list[KernelBody]] = {}
    errors: dict[str, str] = {}
    for unit, image in enumerate(list_images(binary_path).sass):
        if codes and image.arch.code not in codes:
            continue
        mine = found.setdefault(image.name, [])
        try:
            mine += image_bodies(image, unit=unit)
        except UnknownCodecError as exc:
            errors[image.name] = exc.what
        except BinaryFormatError as exc:
            errors[image.name] = f"{exc.what}: {exc.evidence}" if exc.evidence else exc.what
    return tuple(PlaceholderKernels(binary_path, name, tuple(kernels), errors.get(name, ""))
                 for name, kernels in found.items())


class Verdict(StrEnum):
    """What the placeholders of one target arch amount to (verify's check, the build's note)."""

    ALL = "all"
    """Every kernel read only traps: fails."""
    MOST = "most"
    """In more than half of the compiled units that define kernels, every kernel only traps:
    fails (unless the user says the library calls only its other kernels there)."""
    SOME = "some"
    """Some kernels only trap: warns."""
    NONE = "none"


@dataclass(frozen=True)
class ArchPlaceholders:
    """The placeholders of one target arch across a package's binaries."""

    judged: tuple[KernelBody, ...]
    """Kernels whose body was read (placeholder or real)."""
    placeholders: tuple[KernelBody, ...]
    units: int
    """Compiled units (cubins) that define a kernel whose body was read."""
    dead_units: int
    """Of those, the units in which every kernel only traps."""

    @property
    def verdict(self) -> Verdict:
        if not self.placeholders:
            return Verdict.NONE
        if len(self.placeholders) == len(self.judged):
            return Verdict.ALL
        return Verdict.MOST if 2 * self.dead_units > self.units else Verdict.SOME


def arch_placeholders(entries: Iterable[PlaceholderKernels]) -> ArchPlaceholders:
    """Sum up one arch's entries (one per binary). Units, not kernels, are counted for MOST: a
    tree that supports an arch keeps whole units for other archs whose kernels trap there
    (FlashMLA built for sm_90a on the H100: 36 of its 57 kernels trap, its sm100 units, and it
    works), while one that does not support the arch keeps a few units of helpers that run
    anywhere (FlashMLA for sm_120: 46 of 57 trap, and only its combine and scheduling units
    run)."""
    units: dict[tuple[Path, int], list[KernelBody]] = {}
    for entry in entries:
        for kernel in entry.kernels:
            if kernel.body is not Body.NOT_READ:
                units.setdefault((entry.binary, kernel.unit), []).append(kernel)
    judged = tuple(k for mine in units.values() for k in mine)
    dead = sum(1 for mine in units.values() if all(k.body is Body.PLACEHOLDER for k in mine))
    return ArchPlaceholders(judged=judged,
                            placeholders=tuple(k for k in judged if k.body is Body.PLACEHOLDER),
                            units=len(units), dead_units=dead)


_SOURCE_NAME = re.compile(r"(\d+)")


def short_name(mangled: str, *, limit: int = 80) -> str:
    """`ns::kernel<…>` from an Itanium-mangled `_ZN2ns6kernelI…EEvT_` (its nested name, template
    arguments elided); an unmangled name as it is; anything else clipped to `limit`."""
    if not mangled.startswith("_Z"):
        return mangled if len(mangled) <= limit else mangled[:limit - 1] + "…"
    pos = 2
    nested = mangled.startswith("N", pos)
    pos += nested
    parts: list[str] = []
    templated = False
    while pos < len(mangled):
        if mangled.startswith(("L", "K"), pos):  # internal linkage / const member
            pos += 1
            continue
        match = _SOURCE_NAME.match(mangled, pos)
        if match is None:
            templated = mangled.startswith("I", pos)
            break
        length, pos = int(match[1]), match.end()
        parts.append(mangled[pos:pos + length])
        pos += length
        if not nested:
            templated = mangled.startswith("I", pos)
            break
    if not parts:
        return mangled if len(mangled) <= limit else mangled[:limit - 1] + "…"
    text = "::".join(parts) + ("<…>" if templated else "")
    return text if len(text) <= limit else text[:limit - 1] + "…"
