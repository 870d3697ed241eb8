"""Which GPU images a binary holds, from its section and fatbin entry headers alone.

The light half of the fatbin reader (fatbin.py documents the layout and reads the payloads):
nothing here imports pyelftools or pefile, so the build pipeline, which records every built
binary's images in the manifest on each run (a no-op rebuild included), and `doctor
--packages`, which lists what installed libraries hold (torch's libtorch_cuda.so is 1-2 GB), pay
for a few header reads. The ELF section headers and the PE section table are read with
`struct`; the entry headers by seeking from one to the next, never a payload, at most
`MAX_HEADER_ENTRIES` of them. A file that is not a regular file is refused before it is opened
(a FIFO would block, `/dev/zero` never ends).
"""

from __future__ import annotations

import io
import mmap
import os
import stat
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import IO, TYPE_CHECKING, Literal, NamedTuple, cast

from flashbuild.arch import Arch, Suffix
from flashbuild.errors import VerifyError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
ELF_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
PE_SECTION = ".nv_fatb"

KIND_PTX = 1
KIND_ELF = 2
FLAG_COMPRESSED = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY = 0x200000

_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQ")

BinaryFormat = Literal["elf", "pe"]


class ImageKind(StrEnum):
    SASS = "sass"
    PTX = "ptx"


class BinaryFormatError(VerifyError):
    """A file that should hold GPU code is not a readable ELF/PE file or its fatbinary is
    damaged (truncated, garbled)."""


class UnknownCodecError(BinaryFormatError):
    """An image compressed with a codec flashbuild cannot decode: its contents are unknown,
    not damaged (a newer toolkit may change the codec), so this warns where damage fails."""


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):,.0f} MiB" if n < 1024 ** 4 else f"{n / 1024 ** 4:,.1f} TiB"


def regular_size(path: Path) -> int:
    """The size of `path`, refused unless it is a regular file (after symlinks): a FIFO named
    `.so` blocks a reader forever and `/dev/zero` never ends."""
    try:
        info = path.stat()
    except OSError as exc:
        raise BinaryFormatError(f"{path} cannot be read", evidence=str(exc),
                                fix="check that the install finished and the path is right"
                                ) from exc
    if not stat.S_ISREG(info.st_mode):
        raise not_regular(path, info.st_mode)
    return info.st_size


#: A binary's bytes as verify reads them: a read-only memory map of the file (pages come in
#: as they are touched and can be dropped again, so a 2 GiB file does not cost 2 GiB of RSS),
#: or `b""` for an empty file (which cannot be mapped).
Mapped = mmap.mmap | bytes


@contextmanager
def map_regular(path: Path) -> Iterator[Mapped]:
    """`path` mapped read-only (ACCESS_READ), refused before `open()` unless it is a regular
    file. Issue 27: reading whole files (and wrapping them in BytesIO) took a 2 GiB sparse ELF
    to 6.2 GB of RSS and a MemoryError; a map keeps verify's memory bounded by what it reads."""
    size = regular_size(path)
    try:
        with path.open("rb") as stream:
            if size == 0:
                yield b""
                return
            with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                yield mapped
    except (OSError, ValueError) as exc:
        raise BinaryFormatError(f"{path} cannot be read", evidence=str(exc),
                                fix="check that the install finished and the path is right"
                                ) from exc


def as_stream(blob: Mapped) -> IO[bytes]:
    """A seekable stream over `blob` for pyelftools (an mmap already is one: read, seek and
    tell are all pyelftools calls)."""
    return io.BytesIO(blob) if isinstance(blob, bytes) else cast("IO[bytes]", blob)


def read_regular(path: Path) -> bytes:
    """The bytes of `path`, refused before `open()` unless it is a regular file. Only for
    small files: binaries go through `map_regular`."""
    regular_size(path)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BinaryFormatError(f"{path} cannot be read", evidence=str(exc),
                                fix="check that the install finished and the path is right"
                                ) from exc


def file_kind(mode: int) -> str:
    """`a FIFO`, `a character device`, … for a non-regular file's mode."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def not_regular(path: Path, mode: int) -> BinaryFormatError:
    target = os.path.realpath(path)
    via = f" (a symlink to {target})" if target != str(path) else ""
    return BinaryFormatError(
        f"{path.name} is not a regular file, so it was not opened",
        evidence=f"{path}{via} is {file_kind(mode)}; reading it could block forever or never "
        "end",
        fix="point verify at the built .so/.pyd file itself (a regular file), its package "
        "folder or its wheel")



def _arch(code: int, flags: int) -> Arch:
    suffix = (Suffix.ARCH if flags & FLAG_ARCH_SPECIFIC else
              Suffix.FAMILY if flags & FLAG_FAMILY else Suffix.NONE)
    return Arch(code // 10, code % 10, suffix)


def _damaged(where: str, why: str) -> BinaryFormatError:
    return BinaryFormatError(
        f"the fatbinary in {where} is damaged",
        evidence=why,
        fix="rebuild and reinstall the module (`flashbuild build`); a truncated file often "
        "means an interrupted copy or a full disk",
    )


#: The fixed part of an entry header every entry has (PTX and sm >= 100 SASS have more).
_ENTRY_MIN = 64


class _Entry(NamedTuple):
    kind: int
    header_size: int
    payload_size: int
    compressed_size: int
    code: int
    flags: int
    uncompressed: int


def _entry(head: bytes, pos: int, end: int, where: str) -> _Entry:
    """The fields of the entry header `head` (its first 64 bytes) found at `pos` of a container
    ending at `end`; damage raises BinaryFormatError."""
    kind, _, header_size, payload_size = _ENTRY.unpack_from(head, 0)
    compressed_size = struct.unpack_from("<I", head, 16)[0]
    code = struct.unpack_from("<I", head, 28)[0]
    flags = struct.unpack_from("<Q", head, 40)[0]
    uncompressed = struct.unpack_from("<Q", head, 56)[0]
    if kind not in (KIND_PTX, KIND_ELF) or header_size < _ENTRY_MIN or not 10 <= code < 1000:
        raise _damaged(where, f"entry at offset {pos} has kind {kind}, header size "
                       f"{header_size}, arch {code}: not a fatbin entry")
    body = pos + header_size
    if body + payload_size > end:
        raise _damaged(where, f"the sm_{code} entry at offset {pos} needs "
                       f"{payload_size} bytes, {end - body} are there")
    return _Entry(kind, header_size, payload_size, compressed_size, code, flags, uncompressed)



# --- header-only reading (doctor --packages) ---------------------------------------------------

#: The most fatbin entries `list_image_headers` walks in one binary. One entry is one
#: translation unit built for one arch: a CUDA build of torch's libtorch_cuda.so holds tens of
#: thousands. Past the cap the listing says it is incomplete instead of walking on.
MAX_HEADER_ENTRIES = 1_000_000
#: Bytes read at a time while skipping the zero padding a linker leaves between containers.
_PAD_CHUNK = 4096


@dataclass(frozen=True)
class ImageHeader:
    """One distinct image (kind and arch) of a binary, from entry headers alone."""

    kind: ImageKind
    arch: Arch
    #: How many fatbin entries hold it (one per translation unit built for it).
    entries: int

    @property
    def name(self) -> str:
        """`sm_90a` for SASS, `compute_120` for PTX."""
        return self.arch.sm if self.kind is ImageKind.SASS else self.arch.compute


@dataclass(frozen=True)
class ImageHeaders:
    """The images one binary carries, read from their entry headers without their payloads:
    each distinct image once, in the order first met."""

    path: Path
    format: BinaryFormat
    images: tuple[ImageHeader, ...]
    #: Fatbin entries walked.
    entries: int
    #: False when `MAX_HEADER_ENTRIES` stopped the walk: more images may follow.
    complete: bool = True
    #: Fatbin containers found inside data sections (`embedded=True`), outside `.nv_fatbin`.
    embedded: int = 0

    def names(self) -> list[str]:
        """`sm_90a`, `compute_120`, … (as `BinaryImages.names()`)."""
        return [i.name for i in self.images]


def _read_at(stream: IO[bytes], pos: int, size: int) -> bytes:
    stream.seek(pos)
    return stream.read(size)


def _skip_zeros(stream: IO[bytes], base: int, off: int, size: int) -> int:
    """The offset of the first non-zero byte at or after `off` (or `size`)."""
    while off < size:
        chunk = _read_at(stream, base + off, min(_PAD_CHUNK, size - off))
        if not chunk:
            return size
        stripped = chunk.lstrip(b"\0")
        if stripped:
            return off + len(chunk) - len(stripped)
        off += len(chunk)
    return size


def _walk_headers(stream: IO[bytes], base: int, size: int, *, where: str,
                  found: dict[tuple[ImageKind, Arch], int], budget: int) -> tuple[int, bool]:
    """Walk the containers of the fatbin section at `base` (`size` bytes), counting each image
    in `found`; returns the entries walked and whether `budget` stopped the walk early."""
    walked = 0
    off = 0
    while off < size:
        head = _read_at(stream, base + off, min(_CONTAINER.size, size - off))
        if head[:1] == b"\0":
            # Containers are 8-byte aligned; a linker may pad between them with zeros.
            off = _skip_zeros(stream, base, off, size)
            continue
        if len(head) < _CONTAINER.size:
            raise _damaged(where, f"a container header at offset {off} is cut off")
        magic, _version, header_size, entries_size = _CONTAINER.unpack(head)
        if magic != FATBIN_MAGIC:
            raise _damaged(where, f"no fatbin magic 0x{FATBIN_MAGIC:08X} at offset {off} "
                           f"(found 0x{magic:08X})")
        start = off + header_size
        end = start + entries_size
        if header_size < _CONTAINER.size or end > size:
            raise _damaged(where, f"container at offset {off} claims {entries_size} bytes, "
                           f"{size - start} are there")
        pos = start
        while pos < end:
            if walked >= budget:
                return walked, True
            head = _read_at(stream, base + pos, _ENTRY_MIN) if pos + _ENTRY_MIN <= end else b""
            if len(head) < _ENTRY_MIN:
                raise _damaged(where, f"an entry header at offset {pos} is cut off")
            entry = _entry(head, pos, end, where)
            key = (ImageKind.PTX if entry.kind == KIND_PTX else ImageKind.SASS,
                   _arch(entry.code, entry.flags))
            found[key] = found.get(key, 0) + 1
            walked += 1
            pos += entry.header_size + entry.payload_size
        off = end
    return walked, False


#: SHT_NOBITS (no bytes in the file) and SHF_COMPRESSED, as the ELF specification numbers them.
_SHT_NOBITS = 8
_SHT_PROGBITS = 1
_SHF_ALLOC = 0x2
_SHF_EXECINSTR = 0x4
_SHF_COMPRESSED = 0x800
#: The most section headers read (65,280 is the most an ELF file numbers without extension).
_MAX_SECTIONS = 65536


def _elf_regions(stream: IO[bytes], path: Path, file_size: int,  # noqa: PLR0912 - one pass
                 data: list[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
    """(offset, size) of each fatbin section, from the ELF and section headers alone, read
    with `struct` (pyelftools builds an object per section: 10 ms a library, most of the
    time of a scan of a few hundred)."""
    ident = _read_at(stream, 0, 16)
    if len(ident) < 16 or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise _damaged(str(path), "the ELF identification is cut off or invalid")
    wide = ident[4] == 2
    order = "<" if ident[5] == 1 else ">"
    # e_entry, e_phoff, e_shoff, e_flags, e_ehsize, e_phentsize, e_phnum, e_shentsize,
    # e_shnum, e_shstrndx (after e_ident, e_type, e_machine, e_version: byte 24).
    header = struct.Struct(order + ("QQQIHHHHHH" if wide else "IIIIHHHHHH"))
    shdr = struct.Struct(order + ("IIQQQQIIQQ" if wide else "IIIIIIIIII"))
    raw = _read_at(stream, 24, header.size)
    if len(raw) < header.size:
        raise _damaged(str(path), "the ELF header is cut off")
    shoff, shentsize, shnum, shstrndx = (header.unpack(raw)[i] for i in (2, 7, 8, 9))
    if shoff == 0:
        return []  # no section headers (sstrip): no section to find
    if shentsize < shdr.size:
        raise _damaged(str(path), f"section headers of {shentsize} bytes, fewer than "
                       f"{shdr.size}")

    def section(index: int) -> tuple[int, ...]:
        at = shoff + index * shentsize
        data = _read_at(stream, at, shdr.size)
        if len(data) < shdr.size:
            raise _damaged(str(path), f"section header {index} at byte {at} is cut off")
        return shdr.unpack(data)

    if shnum == 0 or shstrndx == 0xFFFF:  # extended numbering: section 0 holds the values
        first = section(0)
        shnum = shnum or first[5]
        shstrndx = first[6] if shstrndx == 0xFFFF else shstrndx
    if shnum > _MAX_SECTIONS or shoff + shnum * shentsize > file_size:
        raise _damaged(str(path), f"{shnum} section headers at byte {shoff} do not fit the "
                       f"file's {file_size} bytes")
    table = _read_at(stream, shoff, shnum * shentsize)
    headers = [shdr.unpack_from(table, i * shentsize) for i in range(shnum)]
    if not 0 < shstrndx < shnum:
        return []  # no section names: no section to find by name
    names_offset, names_size = headers[shstrndx][4], headers[shstrndx][5]
    longest = max(len(n) for n in ELF_SECTIONS) + 1
    regions = []
    for name_at, sh_type, sh_flags, _addr, offset, size, *_rest in headers:
        if sh_type in _NO_FILE_BYTES or not 0 <= name_at < names_size:
            continue
        name = _read_at(stream, names_offset + name_at, longest).split(b"\0", 1)[0]
        if name.decode("ascii", "replace") not in ELF_SECTIONS:
            if (data is not None and sh_type == _SHT_PROGBITS and sh_flags & _SHF_ALLOC
                    and not sh_flags & _SHF_EXECINSTR and offset + size <= file_size):
                data.append((offset, size))
            continue
        if sh_flags & _SHF_COMPRESSED:
            raise BinaryFormatError(
                f"the {name.decode()} section of {path.name} is compressed (SHF_COMPRESSED), "
                "so its entries cannot be read without inflating it",
                evidence=str(path),
                fix=f"run `flashbuild verify {path}` to read it whole")
        if offset + size > file_size:
            raise _damaged(str(path), f"section {name.decode()} ends at byte {offset + size}, "
                           f"the file has {file_size}")
        regions.append((offset, size))
    return regions


#: SHT_NULL and SHT_STRTAB (the ELF specification); SHN_XINDEX in e_shstrndx.
_SHT_NULL = 0
#: Section types with no bytes in the file, whose sh_size is a reservation of GPU memory:
#: SHT_NOBITS and NVIDIA's SHT_CUDA_GLOBAL (0x70000007, `.nv.global`), SHT_CUDA_LOCAL
#: (0x70000009, `.nv.local.<kernel>`), SHT_CUDA_SHARED (0x7000000a, `.nv.shared.<kernel>`) and
#: SHT_CUDA_SHARED_RESERVED (0x70000015). The cubins nvcc writes here name
#: `.nv.shared.<kernel>` SHT_NOBITS; bitsandbytes' sm_90a cubin (CUDA 13.0, 1.4 MB) held a
#: section of type 0x7000000a whose offset and size lie past its end.
_NO_FILE_BYTES = frozenset({_SHT_NULL, _SHT_NOBITS, 0x70000007, 0x70000009, 0x7000000A,
                            0x70000015})
_SHT_STRTAB = 3
_SHN_XINDEX = 0xFFFF


def validate_elf(blob: Mapped, where: str, *, what: str = "") -> None:
    """Check an ELF file's structure before any section of it is trusted (issue 27): the ELF
    header whole, the program and section header tables inside the file, each section that
    has bytes in the file (not SHT_NOBITS) inside it, and e_shstrndx naming a string table.
    pyelftools trusts all of these, so a cubin whose second half was zeroed read as a cubin
    with no kernels ("SASS present") where cuobjdump says "Invalid ELF". Raises
    BinaryFormatError naming the first field that does not fit; its headline is `what`
    (default: WHERE is damaged: not a valid ELF file), its evidence starts with `where` then."""

    def _damaged_elf(where: str, why: str) -> BinaryFormatError:
        return BinaryFormatError(
            what or f"{where} is damaged: not a valid ELF file",
            evidence=f"{where}: {why}" if what else why,
            fix="rebuild and reinstall the module (`flashbuild build`); a truncated file "
            "(or one zeroed past some point) often means an interrupted copy or a full disk")

    size = len(blob)
    ident = bytes(blob[:16])
    if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) \
            or ident[5] not in (1, 2):
        raise _damaged_elf(where, "the ELF identification is cut off or invalid")
    wide = ident[4] == 2
    order = "<" if ident[5] == 1 else ">"
    header = struct.Struct(order + ("QQQIHHHHHH" if wide else "IIIIHHHHHH"))
    shdr = struct.Struct(order + ("IIQQQQIIQQ" if wide else "IIIIIIIIII"))
    if size < 24 + header.size:
        raise _damaged_elf(where, f"the ELF header is cut off ({size} bytes)")
    (_entry_at, phoff, shoff, _flags, _ehsize, phentsize, phnum, shentsize, shnum,
     shstrndx) = header.unpack_from(blob, 24)
    if phnum and (phoff + phnum * phentsize > size or phoff < 24 + header.size):
        raise _damaged_elf(where, f"{phnum} program headers of {phentsize} bytes at byte "
                           f"{phoff} do not fit the file's {size} bytes")
    if shoff == 0:
        if shnum:
            raise _damaged_elf(where, f"{shnum} section headers at byte 0")
        return  # no section headers (sstrip): nothing to trust
    if shentsize < shdr.size:
        raise _damaged_elf(where, f"section headers of {shentsize} bytes, fewer than "
                           f"{shdr.size}")
    if shoff + shdr.size > size:
        raise _damaged_elf(where, f"the section headers at byte {shoff} lie past the end "
                           f"of the file ({size} bytes)")
    first = shdr.unpack_from(blob, shoff)
    count = shnum or first[5]  # extended numbering: section 0's sh_size holds the count
    names = first[6] if shstrndx == _SHN_XINDEX else shstrndx
    if count > _MAX_SECTIONS or shoff + count * shentsize > size:
        raise _damaged_elf(where, f"{count} section headers of {shentsize} bytes at byte "
                           f"{shoff} do not fit the file's {size} bytes")
    for index in range(1, count):
        _name, sh_type, _f, _a, offset, length, *_rest = shdr.unpack_from(
            blob, shoff + index * shentsize)
        if sh_type not in _NO_FILE_BYTES and offset + length > size:
            raise _damaged_elf(where, f"section {index} (type {sh_type}) spans bytes "
                               f"{offset}-{offset + length}; the file has {size}")
    if names == 0:
        return  # no section names (allowed by the specification)
    if names >= count or shdr.unpack_from(blob, shoff + names * shentsize)[1] != _SHT_STRTAB:
        raise _damaged_elf(where, f"e_shstrndx {names} names no string table among the "
                           f"{count} sections")


#: The PE section table entry: Name[8], VirtualSize, VirtualAddress, SizeOfRawData,
#: PointerToRawData, relocation and line-number fields, Characteristics (40 bytes; Microsoft's
#: PE format specification, "Section Table").
_PE_SECTION = struct.Struct("<8sIIIIIIHHI")
#: Section characteristics: initialized data, executable code (the PE specification).
_SCN_INITIALIZED_DATA = 0x40
_SCN_MEM_EXECUTE = 0x20000000
#: The most sections the COFF header can number (a 16-bit field).
_PE_MAX_SECTIONS = 0xFFFF


def _pe_regions(stream: IO[bytes], path: Path, file_size: int,
                data: list[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
    """(offset, size) of each `.nv_fatb` section, from the DOS, COFF and section headers:
    `e_lfanew` at 0x3C points at `PE\\0\\0`; the COFF header after it holds NumberOfSections
    (+2) and SizeOfOptionalHeader (+16); the section table follows the optional header."""
    raw = _read_at(stream, 0x3C, 4)
    if len(raw) < 4:
        raise _damaged(str(path), "the DOS header is cut off")
    (pe_at,) = struct.unpack("<I", raw)
    coff = _read_at(stream, pe_at, 24)
    if len(coff) < 24 or coff[:4] != b"PE\0\0":
        raise _damaged(str(path), f"no PE signature at byte {pe_at}")
    sections, optional_size = struct.unpack_from("<H", coff, 6)[0], \
        struct.unpack_from("<H", coff, 20)[0]
    table_at = pe_at + 24 + optional_size
    if sections > _PE_MAX_SECTIONS or table_at + sections * _PE_SECTION.size > file_size:
        raise _damaged(str(path), f"{sections} section headers at byte {table_at} do not fit "
                       f"the file's {file_size} bytes")
    table = _read_at(stream, table_at, sections * _PE_SECTION.size)
    regions = []
    for i in range(sections):
        name, _vsize, _vaddr, size, start, *_rest, flags = _PE_SECTION.unpack_from(
            table, i * _PE_SECTION.size)
        if name.rstrip(b"\0").decode("ascii", "replace") != PE_SECTION:
            if (data is not None and flags & _SCN_INITIALIZED_DATA
                    and not flags & _SCN_MEM_EXECUTE and start + size <= file_size):
                data.append((start, size))
            continue
        if start + size > file_size:
            raise _damaged(str(path), f"section {PE_SECTION} ends at byte {start + size}, the "
                           f"file has {file_size}")
        regions.append((start, size))
    return regions


def _embedded(stream: IO[bytes], regions: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """(offset, size) of each fatbin container inside data sections: some libraries keep their
    kernels there and load them at run time (cuFFT 12: one entry in `.nv_fatbin`, 23,984
    containers in `.ldata`), so `.nv_fatbin` alone lists too little. A hit counts when its
    header is a plausible container (version 1, a 16-byte header, entries that fit the
    section); the bytes are searched through a memory map, so memory stays bounded."""
    try:
        mapped = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return  # an empty file, or one that cannot be mapped: nothing embedded to find
    with mapped:
        magic = struct.pack("<I", FATBIN_MAGIC)
        for base, size in regions:
            end = base + size
            at = mapped.find(magic, base, end)
            while at != -1:
                if at + _CONTAINER.size <= end:
                    _magic, version, header_size, entries_size = _CONTAINER.unpack_from(
                        mapped, at)
                    total = header_size + entries_size
                    if (version == 1 and header_size == _CONTAINER.size and entries_size
                            and at + total <= end):
                        yield at, total
                        at = mapped.find(magic, at + total, end)
                        continue
                at = mapped.find(magic, at + 4, end)


def list_image_headers(path: Path, *, max_entries: int = MAX_HEADER_ENTRIES,
                       embedded: bool = False) -> ImageHeaders:
    """Which SASS and PTX images a binary holds, from section and entry headers alone: bounded
    time and memory whatever the file's size. With `embedded`, fatbin containers that data
    sections hold are counted too (`doctor --packages`: libraries that load their own kernels);
    one whose entries do not read is skipped, since a data section may hold the magic number by
    chance. Raises BinaryFormatError for a file that is not a regular ELF/PE file or whose
    headers are damaged."""
    file_size = regular_size(path)
    where = str(path)
    magic = b""
    data: list[tuple[int, int]] | None = [] if embedded else None
    try:
        with path.open("rb") as stream:
            magic = stream.read(4)
            if magic == b"\x7fELF":
                fmt: BinaryFormat = "elf"
                regions = _elf_regions(stream, path, file_size, data)
            elif magic.startswith(b"MZ"):
                fmt = "pe"
                regions = _pe_regions(stream, path, file_size, data)
            else:
                raise BinaryFormatError(
                    f"{path.name} is not an ELF or PE binary",
                    evidence=f"{path}: first bytes {magic.hex() or '(empty file)'}",
                    fix="reinstall the package it belongs to")
            found: dict[tuple[ImageKind, Arch], int] = {}
            walked, stopped, containers = 0, False, 0
            for offset, size in regions:
                count, stopped = _walk_headers(stream, offset, size, where=where, found=found,
                                               budget=max_entries - walked)
                walked += count
                if stopped:
                    break
            for offset, size in _embedded(stream, data or []) if not stopped else ():
                seen = dict(found)
                try:
                    count, stopped = _walk_headers(stream, offset, size, where=where,
                                                   found=seen, budget=max_entries - walked)
                except BinaryFormatError:
                    continue  # the magic number by chance, not a container
                found, walked, containers = seen, walked + count, containers + 1
                if stopped:
                    break
    except (struct.error, ValueError, OSError, EOFError) as exc:
        raise BinaryFormatError(
            f"{path.name} is a damaged {'PE' if magic.startswith(b'MZ') else 'ELF'} file",
            evidence=f"{path}: {exc}",
            fix="reinstall the package it belongs to; a truncated file often means an "
            "interrupted copy or a full disk") from exc
    images = tuple(ImageHeader(kind, arch, count) for (kind, arch), count in found.items())
    return ImageHeaders(path=path, format=fmt, images=images, entries=walked,
                        complete=not stopped, embedded=containers)
