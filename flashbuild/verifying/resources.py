"""Per-kernel registers, shared memory, stack and thread limits, from a cubin or from ptxas.

Two sources, either enough:

* the cubin itself (an ELF inside the fatbinary). `.nv.info` holds per-function EIATTR records
  (`u8 format, u8 attribute, u16 value-or-size [, payload]`; format 4 = sized payload, 1-3 =
  the value in the u16): EIATTR_REGCOUNT (0x2f) and EIATTR_FRAME_SIZE (0x11) as
  (u32 symbol index, u32 value) pairs; `.nv.info.<kernel>` holds EIATTR_MAX_THREADS (0x05,
  three u32 from `__launch_bounds__`), EIATTR_REQNTID (0x10), EIATTR_MAXREG_COUNT (0x1b).
  Static shared memory is the size of the NOBITS section `.nv.shared.<kernel>`. Checked against
  `nvcc -Xptxas -v` for CUDA 13.0 sm_80/sm_90a/sm_120 (tests/unit/test_verify_resources.py): on
  sm_90 and later the section also holds the 1 KB the system reserves per block (there is a
  `.nv.shared.reserved.0` section, and sm_120 cubins name the size in the
  `.nv.reservedSmem.cap` symbol), so ptxas's "N bytes smem" = section size - 1024.
* `ptxas info` lines (`-Xptxas -v` output captured at build time), which also give spills.

Dynamic shared memory is chosen by the host at launch, so no cubin attribute records it. A
kernel library declares it per arch instead, as an initialised `extern "C" __device__ const`
that each device pass compiles from its own traits (the recipe's `[verify] dynamic_smem` names
the symbol). nvcc 13.0 puts such a constant in `.nv.global.init` (PROGBITS; checked for sm_90a
and sm_120, whole-program and unused alike), its `.symtab` entry giving the offset in that
section and the size, so `declared_dynamic_smem` reads the value straight from the cubin.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from elftools.common.exceptions import ELFError
from elftools.elf.sections import SymbolTableSection

from flashbuild.arch import MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM, Arch
from flashbuild.verifying.fatbin import BinaryFormatError, FatbinImage, cubin_elf, section_data

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

EIATTR_MAX_THREADS = 0x05
EIATTR_REQNTID = 0x10
EIATTR_FRAME_SIZE = 0x11
EIATTR_MAXREG_COUNT = 0x1B
EIATTR_REGCOUNT = 0x2F
EIFMT_SVAL = 0x04
#: Bytes the system reserves per block on sm_90+ (when the cubin does not name the size).
RESERVED_SMEM_DEFAULT = 1024


@dataclass(frozen=True)
class KernelResources:
    """What one kernel uses on one arch."""

    name: str
    arch: str
    registers: int | None = None
    static_smem: int | None = None
    #: Stack frame (local memory) bytes per thread.
    stack: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    #: Threads per block from `__launch_bounds__` / reqntid (x*y*z).
    max_threads: int | None = None
    source: str = "cubin"

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class LimitProblem:
    kernel: str
    arch: str
    severity: str  # "fail" | "warn"
    what: str
    fix: str
    evidence: str = ""


@dataclass(frozen=True)
class DeclaredSmem:
    """The dynamic shared memory a kernel requests on one arch, read from a cubin constant."""

    kernel: str
    symbol: str
    #: Image name of the cubin it was read from (`sm_120`).
    arch: str
    bytes: int
    #: Section the constant lives in (`.nv.global.init`).
    section: str


def _records(data: bytes) -> Iterable[tuple[int, int, bytes | int]]:
    pos = 0
    while pos + 4 <= len(data):
        fmt, attr, value = data[pos], data[pos + 1], struct.unpack_from("<H", data, pos + 2)[0]
        if fmt == EIFMT_SVAL:
            yield fmt, attr, data[pos + 4:pos + 4 + value]
            pos += 4 + value
        else:
            yield fmt, attr, value
            pos += 4


def cubin_resources(  # noqa: PLR0912 - one pass over the sections, one branch per kind
    cubin: bytes, *, arch: str) -> tuple[KernelResources, ...]:
    """Per-kernel resources from one cubin (an uncompressed SASS image)."""
    try:
        elf = cubin_elf(cubin, f"the {arch} cubin")
        sections = list(elf.iter_sections())
        symtab = elf.get_section_by_name(".symtab")
        symbols = (list(symtab.iter_symbols()) if isinstance(symtab, SymbolTableSection)
                   else [])
    except (ELFError, ValueError, EOFError, struct.error) as exc:
        raise BinaryFormatError(f"the {arch} cubin is damaged", evidence=str(exc),
                                fix="rebuild the module") from exc
    kernels = [s.name for s in sections if s.name.startswith(".text.")]
    names = [k[len(".text."):] for k in kernels]
    regs: dict[str, int] = {}
    frame: dict[str, int] = {}
    threads: dict[str, int] = {}
    reserved = 0
    for sym in symbols:
        if sym.name == ".nv.reservedSmem.cap":
            reserved = int(sym["st_value"])
    if any(s.name.startswith(".nv.shared.reserved") for s in sections) and not reserved:
        reserved = RESERVED_SMEM_DEFAULT
    smem: dict[str, int] = {}
    for section in sections:
        if section.name == ".nv.info":
            for _fmt, attr, value in _records(section_data(section, f"the {arch} cubin")):
                if isinstance(value, bytes) and len(value) >= 8 and attr in (
                        EIATTR_REGCOUNT, EIATTR_FRAME_SIZE):
                    index, amount = struct.unpack_from("<II", value)
                    if index < len(symbols):
                        target = regs if attr == EIATTR_REGCOUNT else frame
                        target[symbols[index].name] = amount
        elif section.name.startswith(".nv.info."):
            kernel = section.name[len(".nv.info."):]
            for _fmt, attr, value in _records(section_data(section, f"the {arch} cubin")):
                if attr in (EIATTR_MAX_THREADS, EIATTR_REQNTID) and isinstance(
                        value, bytes) and len(value) >= 12:
                    x, y, z = struct.unpack_from("<III", value)
                    threads[kernel] = x * max(y, 1) * max(z, 1)
        elif section.name.startswith(".nv.shared.") and not section.name.startswith(
                ".nv.shared.reserved"):
            smem[section.name[len(".nv.shared."):]] = max(
                0, int(section["sh_size"]) - reserved)
    return tuple(
        KernelResources(name=n, arch=arch, registers=regs.get(n), static_smem=smem.get(n, 0),
                        stack=frame.get(n), max_threads=threads.get(n), source="cubin")
        for n in names)


def declared_dynamic_smem(cubin: bytes, symbols: Mapping[str, str], *,
                          arch: str) -> tuple[DeclaredSmem, ...]:
    """The values of the `symbols` (kernel → symbol name) this cubin defines; a symbol the
    cubin does not define is left out (the kernel lives in another translation unit)."""
    wanted = {symbol: kernel for kernel, symbol in symbols.items()}
    out: list[DeclaredSmem] = []
    try:
        elf = cubin_elf(cubin, f"the {arch} cubin")
        symtab = elf.get_section_by_name(".symtab")
        if not isinstance(symtab, SymbolTableSection):
            return ()
        for sym in symtab.iter_symbols():
            kernel = wanted.get(sym.name)
            index = sym["st_shndx"]
            if kernel is None or not isinstance(index, int) or index == 0:
                continue  # not ours, or an undefined / special-index reference
            section = elf.get_section(index)
            size = int(sym["st_size"])
            if section["sh_type"] == "SHT_NOBITS" or size not in (4, 8):
                raise BinaryFormatError(
                    f"`{sym.name}` in the {arch} cubin is not an initialised 4- or 8-byte "
                    "constant", evidence=f"{size} bytes in {section.name} "
                    f"({section['sh_type']})",
                    fix=f"declare it as `extern \"C\" __device__ const unsigned int "
                    f"{sym.name} = <bytes>;`")
            # st_value is an address; cubin sections have sh_addr 0, so it is the offset.
            offset = int(sym["st_value"]) - int(section["sh_addr"])
            raw = section_data(section, f"the {arch} cubin")[offset:offset + size]
            if len(raw) != size:
                raise BinaryFormatError(f"`{sym.name}` lies outside {section.name}",
                                        evidence=f"offset {offset}, size {size}, section "
                                        f"{len(section.data())} bytes", fix="rebuild the module")
            out.append(DeclaredSmem(kernel=kernel, symbol=sym.name, arch=arch,
                                    bytes=int.from_bytes(raw, "little"), section=section.name))
    except (ELFError, ValueError, EOFError, struct.error) as exc:
        raise BinaryFormatError(f"the {arch} cubin is damaged", evidence=str(exc),
                                fix="rebuild the module") from exc
    return tuple(out)


def image_declared_smem(image: FatbinImage,
                        symbols: Mapping[str, str]) -> tuple[DeclaredSmem, ...]:
    """`declared_dynamic_smem` of a SASS image (decompressing it when needed)."""
    return declared_dynamic_smem(image.data(), symbols, arch=image.name)


def check_declared_smem(declared: DeclaredSmem, arch: Arch, *,
                        kernels: Iterable[KernelResources] = ()) -> LimitProblem | None:
    """A failure when the declared dynamic amount plus the static shared memory of the
    kernel (the largest of the `kernels` of this arch whose name matches) exceeds the
    per-block maximum of `arch`; None when it fits or the limit is unknown."""
    limit = arch.max_smem_per_block()
    if limit is None:
        return None
    static = max((k.static_smem or 0 for k in kernels if _names(declared.kernel, k.name)),
                 default=0)
    total = declared.bytes + static
    if total <= limit:
        return None
    plus = f" (+ {static} B static = {total} B)" if static else ""
    return LimitProblem(
        declared.kernel, declared.arch, "fail",
        f"{declared.kernel} requests {declared.bytes} B of dynamic shared memory per block on "
        f"{declared.arch}{plus}; {arch.sm} allows {limit} B, so the launch is refused at run "
        "time",
        f"give {arch.sm} its own kernel traits with a budget of at most {limit - static} B "
        "(a recipe `insert-block` step, as recipes/csrc.toml's `sm120-traits` does), so the "
        f"{arch.sm} device pass compiles `{declared.symbol}` from them",
        evidence=f"`{declared.symbol}` = {declared.bytes} in {declared.section} of the "
        f"{declared.arch} cubin")


def image_resources(image: FatbinImage) -> tuple[KernelResources, ...]:
    """Resources of a SASS image (decompressing it when needed)."""
    return cubin_resources(image.data(), arch=image.name)


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_info(text: str) -> tuple[KernelResources, ...]:
    """Kernels from `ptxas info` lines (nvcc `-Xptxas -v`), in the order they appear."""
    out: list[KernelResources] = []
    current: KernelResources | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            if current is not None:
                out.append(current)
            current = KernelResources(name=m[1], arch=m[2], static_smem=0, source="ptxas")
        elif current is not None and (m := _FRAME.search(line)):
            current = replace(current, stack=int(m[1]), spill_stores=int(m[2]),
                              spill_loads=int(m[3]))
        elif current is not None and (m := _USED.search(line)):
            smem = _SMEM.search(line)
            current = replace(current, registers=int(m[1]),
                              static_smem=int(smem[1]) if smem else 0)
    if current is not None:
        out.append(current)
    return tuple(out)


def check_limits(kernels: Iterable[KernelResources], arch: Arch, *,
                 dynamic_smem: Mapping[str, int] | None = None) -> list[LimitProblem]:
    """Problems of `kernels` on `arch`: shared memory (static + the dynamic amount a recipe
    declares) over the per-block maximum, registers over 255 per thread, a block that cannot
    fit the 64K registers of an SM, spills (a warning)."""
    dynamic = dict(dynamic_smem or {})
    limit = arch.max_smem_per_block()
    problems: list[LimitProblem] = []
    for k in kernels:
        dyn = _dynamic_for(k.name, dynamic)
        total = (k.static_smem or 0) + dyn
        if limit is not None and total > limit:
            problems.append(LimitProblem(
                k.name, k.arch, "fail",
                f"needs {total} B of shared memory per block ({k.static_smem or 0} static + "
                f"{dyn} dynamic); {arch.sm} allows {limit} B",
                f"use smaller tiles for {arch.sm} (e.g. an SM120 kernel-traits entry that fits "
                f"{limit // 1024} KB)"))
        if k.registers is not None and k.registers > MAX_REGISTERS_PER_THREAD:
            problems.append(LimitProblem(k.name, k.arch, "fail",
                                         f"uses {k.registers} registers per thread (max 255)",
                                         "add __launch_bounds__ or -maxrregcount"))
        if k.registers and k.max_threads and k.registers * k.max_threads > REGISTERS_PER_SM:
            problems.append(LimitProblem(
                k.name, k.arch, "fail",
                f"{k.registers} registers x {k.max_threads} threads exceeds the "
                f"{REGISTERS_PER_SM} registers of an SM: the launch fails",
                "lower the block size or the register count (-maxrregcount)"))
        if k.spill_stores:
            problems.append(LimitProblem(
                k.name, k.arch, "warn",
                f"spills {k.spill_stores} B to local memory (stores), {k.spill_loads or 0} B "
                "(loads)", "reduce register pressure; spills cost bandwidth"))
    return problems


def _dynamic_for(kernel: str, dynamic: Mapping[str, int]) -> int:
    """The declared dynamic shared memory of a kernel, by mangled or plain name."""
    if kernel in dynamic:
        return dynamic[kernel]
    for name, amount in dynamic.items():
        if _names(name, kernel):
            return amount
    return 0


def _names(name: str, kernel: str) -> bool:
    """Whether the plain `name` names the (possibly mangled) `kernel`: `stage` names
    `_Z5stagePfi` (the Itanium length-prefixed name, in a namespace or not)."""
    return kernel == name or re.match(
        rf"^_Z(?:N\d+\w+?)?{len(name)}{re.escape(name)}", kernel) is not None
