"""List the GPU images inside a binary by reading its fatbinary directly (no cuobjdump).

Where the fatbinary lives: the ELF section `.nv_fatbin` (objects, `.so`; relocatable-device-code
objects use `__nv_relfatbin`) or the PE section `.nv_fatb` (`.obj`, `.dll`, `.pyd`). Layout
(FACTS.md, "Fatbinaries"), each offset checked here against nvcc 13.0.88 objects built for
`sm_90`, `sm_90a`, `sm_100a`, `sm_100f`, `[sm_120,compute_120]`, `[sm_120a,compute_120a]`,
`[sm_120f,compute_120f]`, `sm_121`, `sm_75`, `sm_80`, `compute_90`, with the default compression,
`--no-compress` and `-Xfatbin -compress-all`, and in a linked `.so` (three containers, one from
cudart_static); `cuobjdump --list-elf --list-ptx` (PyPI nvidia-cuda-cuobjdump 13.5) agrees
(tests/integration/test_verify_fatbin.py):

container (16 bytes, little-endian, containers concatenated back to back):
    +0 u32 magic 0xBA55ED50, +4 u16 version (1), +6 u16 header size (16), +8 u64 entries size
entry:
    +0 u16 kind (1 = PTX, 2 = ELF/SASS), +2 u16 (0x0101)
    +4 u32 entry-header size (64 for sm < 100 SASS, 80 for PTX, 112 for sm >= 100 SASS)
    +8 u64 payload size (padded to 8; next entry = start + header size + payload size)
    +16 u32 compressed length (0 when not compressed)
    +24 u32 version (PTX ISA 9.0 = 0x00090000 for PTX; 0x00010008 for ELF)
    +28 u32 arch as a decimal (90, 100, 120)
    +40 u64 flags: 0x8000 = payload compressed; 0x100000 = `a` (arch-specific) target;
        0x200000 = `f` (family) target. The suffix is ONLY here: the cubin's ELF e_flags are
        the same for sm_90 and sm_90a (0x6005a04), and cuobjdump prints sm_100f SASS as
        `sm_100` (its PTX as `sm_120f`).
    +56 u64 uncompressed size (0 when not compressed)
Compression in CUDA 13.0 is Zstandard (payloads start with the zstd frame magic 28 B5 2F FD),
decoded with the `zstandard` package; an unknown codec makes the image's contents unknown, not
the listing wrong.

Memory is bounded whatever a file claims (issue 22): a file is refused before `open()` unless
it is a regular file (a FIFO would block, `/dev/zero` never ends), and an image decompresses
to at most `MAX_IMAGE_BYTES` (128 MiB; the largest cubin of the corpus trees is a few MiB),
checked against the entry's claim before decoding and against the bytes while decoding
(streamed, so a 16 GiB "bomb" stops at the cap). An image over the cap is unreadable, and an
unreadable image a target needs fails verify.

`list_image_headers` answers "which images does it hold?" for an installed library without
reading it (`doctor --packages`; torch's libtorch_cuda.so is 1-2 GB): the fatbin sections come
from the ELF section headers or the PE section table, and the entry headers above are read by
seeking from one to the next, never a payload, at most `MAX_HEADER_ENTRIES` of them.
"""

from __future__ import annotations

import io
import os
import stat
import struct
from dataclasses import dataclass, field
from enum import StrEnum
from typing import IO, TYPE_CHECKING, Any, Literal, NamedTuple

import pefile
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from flashbuild.arch import Arch, Suffix
from flashbuild.errors import VerifyError

if TYPE_CHECKING:
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
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: The most bytes one GPU image may decompress to (said in the message and in
#: docs/reliability.md); keeps verify under 512 MiB of memory whatever an entry claims.
MAX_IMAGE_BYTES = 128 * 1024 * 1024
_CHUNK = 1024 * 1024

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


def read_regular(path: Path) -> bytes:
    """The bytes of `path`, refused before `open()` unless it is a regular file."""
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


@dataclass(frozen=True)
class FatbinImage:
    """One SASS or PTX image from a fatbinary."""

    kind: ImageKind
    arch: Arch
    compressed: bool
    #: Bytes the entry occupies after its header (padded).
    payload_size: int
    #: Size after decompression (== payload_size when not compressed).
    size: int
    #: Offset of the entry header within the fatbin section.
    offset: int
    flags: int
    payload: bytes = field(default=b"", repr=False, compare=False)
    compressed_size: int = field(default=0, repr=False)
    #: The uncompressed size the entry header claims (0: none given).
    uncompressed_size: int = field(default=0, repr=False)

    @property
    def name(self) -> str:
        """`sm_90a` for SASS, `compute_120` for PTX."""
        return self.arch.sm if self.kind is ImageKind.SASS else self.arch.compute

    def data(self) -> bytes:
        """The image's bytes (a cubin ELF or PTX text), decompressed when needed: at most
        `MAX_IMAGE_BYTES`, streamed, so memory stays bounded whatever the entry claims."""
        if not self.compressed:
            return self.payload
        raw = self.payload[: self.compressed_size or len(self.payload)]
        if not raw.startswith(_ZSTD_MAGIC):
            raise UnknownCodecError(
                f"the {self.name} image is compressed with a codec flashbuild cannot decode",
                evidence=f"first bytes {raw[:4].hex()} (not a Zstandard frame)",
                fix="build with nvcc `--no-compress` to keep device code uncompressed",
            )
        import zstandard

        claim = self.uncompressed_size
        if claim > MAX_IMAGE_BYTES:
            raise self._too_big(f"its entry header claims {claim:,} bytes ({_mib(claim)}) "
                                "uncompressed")
        limit = claim or MAX_IMAGE_BYTES
        out = bytearray()
        try:
            with zstandard.ZstdDecompressor(max_window_size=MAX_IMAGE_BYTES).stream_reader(
                    io.BytesIO(raw), read_across_frames=True) as reader:
                while chunk := reader.read(_CHUNK):
                    out += chunk
                    if len(out) > limit:
                        break
        except zstandard.ZstdError as exc:
            raise BinaryFormatError(
                f"the {self.name} image could not be decompressed",
                evidence=str(exc),
                fix="rebuild the module; the file is damaged",
            ) from exc
        if len(out) > MAX_IMAGE_BYTES:
            raise self._too_big(f"decompressing it passed {MAX_IMAGE_BYTES:,} bytes "
                                f"(its header claims {claim or 'no size'})")
        if claim and len(out) != claim:
            raise BinaryFormatError(
                f"the {self.name} image is damaged",
                evidence=f"it decompresses to {'more than ' if len(out) > claim else ''}"
                f"{len(out):,} bytes; its entry header claims {claim:,}",
                fix="rebuild and reinstall the module (`flashbuild build`)")
        return bytes(out)

    def _too_big(self, evidence: str) -> BinaryFormatError:
        return BinaryFormatError(
            f"the {self.name} image is larger than flashbuild reads "
            f"({_mib(MAX_IMAGE_BYTES)} per image, a cap that keeps verify's memory bounded)",
            evidence=evidence,
            fix="rebuild and reinstall the module (`flashbuild build`); a genuine GPU image "
            "this large is far beyond any seen in real trees, so the file is most likely "
            "damaged or hostile")

    def to_json(self) -> dict[str, object]:
        return {"kind": str(self.kind), "arch": self.name, "compressed": self.compressed,
                "payload_size": self.payload_size, "size": self.size}


@dataclass(frozen=True)
class BinaryImages:
    """Every GPU image one binary carries."""

    path: Path
    format: BinaryFormat
    images: tuple[FatbinImage, ...]

    @property
    def sass(self) -> tuple[FatbinImage, ...]:
        return tuple(i for i in self.images if i.kind is ImageKind.SASS)

    @property
    def ptx(self) -> tuple[FatbinImage, ...]:
        return tuple(i for i in self.images if i.kind is ImageKind.PTX)

    def names(self) -> list[str]:
        """Distinct image names in order: `sm_90a`, `compute_120`, …"""
        return list(dict.fromkeys(i.name for i in self.images))


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


def parse_fatbin(data: bytes, *, where: str = "the binary") -> tuple[FatbinImage, ...]:
    """Walk concatenated fatbin containers and return their images in order."""
    images: list[FatbinImage] = []
    off = 0
    end_all = len(data)
    while off < end_all:
        # Containers are 8-byte aligned; a linker may pad between them with zeros.
        if data[off:].strip(b"\0") == b"":
            break
        if off + _CONTAINER.size > end_all:
            raise _damaged(where, f"a container header at offset {off} is cut off")
        magic, _version, header_size, entries_size = _CONTAINER.unpack_from(data, off)
        if magic != FATBIN_MAGIC:
            if data[off] == 0:
                off += 1
                continue
            raise _damaged(where, f"no fatbin magic 0x{FATBIN_MAGIC:08X} at offset {off} "
                           f"(found 0x{magic:08X})")
        start = off + header_size
        end = start + entries_size
        if header_size < _CONTAINER.size or end > end_all:
            raise _damaged(where, f"container at offset {off} claims {entries_size} bytes, "
                           f"{end_all - start} are there")
        pos = start
        while pos < end:
            if pos + _ENTRY_MIN > end:
                raise _damaged(where, f"an entry header at offset {pos} is cut off")
            (kind, entry_header, payload_size, compressed_size, code, flags,
             uncompressed) = _entry(data[pos:pos + _ENTRY_MIN], pos, end, where)
            body = pos + entry_header
            compressed = bool(flags & FLAG_COMPRESSED)
            images.append(FatbinImage(
                kind=ImageKind.PTX if kind == KIND_PTX else ImageKind.SASS,
                arch=_arch(code, flags),
                compressed=compressed,
                payload_size=payload_size,
                size=uncompressed if compressed and uncompressed else payload_size,
                offset=pos,
                flags=flags,
                payload=bytes(data[body:body + payload_size]),
                compressed_size=compressed_size,
                uncompressed_size=uncompressed if compressed else 0,
            ))
            pos = body + payload_size
        off = end
    return tuple(images)


def fatbin_sections(path: Path) -> tuple[BinaryFormat, list[bytes]]:
    """The raw fatbin sections of an ELF or PE file. Raises BinaryFormatError for a file that
    is neither or cannot be parsed."""
    blob = read_regular(path)
    if blob.startswith(b"\x7fELF"):
        return "elf", _elf_sections(path, blob)
    if blob.startswith(b"MZ"):
        return "pe", _pe_sections(path, blob)
    raise BinaryFormatError(
        f"{path.name} is not an ELF or PE binary",
        evidence=f"{path}: first bytes {blob[:4].hex() or '(empty file)'}",
        fix="rebuild and reinstall the module (`flashbuild build`)",
    )


def section_data(section: Any, where: str) -> bytes:
    """`section.data()` of a pyelftools section, refused when it would allocate more than
    `MAX_IMAGE_BYTES` from a claim rather than from the file: an SHT_NOBITS section is made of
    `sh_size` zeros, an SHF_COMPRESSED one inflates to the size its header claims."""
    size = int(section.data_size)
    if (section["sh_type"] == "SHT_NOBITS" or section.compressed) and size > MAX_IMAGE_BYTES:
        raise BinaryFormatError(
            f"section {section.name} of {where} is larger than flashbuild reads "
            f"({_mib(MAX_IMAGE_BYTES)}, a cap that keeps verify's memory bounded)",
            evidence=f"its header claims {size:,} bytes "
            f"({'compressed' if section.compressed else 'SHT_NOBITS: zeros'})",
            fix="rebuild and reinstall the module (`flashbuild build`); the file is damaged "
            "or hostile")
    data: bytes = section.data()
    return data


def _elf_sections(path: Path, blob: bytes) -> list[bytes]:
    try:
        elf = ELFFile(io.BytesIO(blob))
        out = []
        for section in elf.iter_sections():
            if section.name in ELF_SECTIONS:
                offset, size = section["sh_offset"], section["sh_size"]
                if offset + size > len(blob):
                    raise _damaged(str(path), f"section {section.name} ends at byte "
                                   f"{offset + size}, the file has {len(blob)}")
                out.append(section_data(section, str(path)))
        return out
    except (ELFError, struct.error, ValueError, OSError, EOFError) as exc:
        raise BinaryFormatError(
            f"{path.name} is a damaged ELF file",
            evidence=f"{path}: {exc}",
            fix="rebuild and reinstall the module (`flashbuild build`); a truncated file "
            "often means an interrupted copy or a full disk",
        ) from exc


def _pe_sections(path: Path, blob: bytes) -> list[bytes]:
    try:
        pe = pefile.PE(data=blob, fast_load=True)
        out = []
        for section in pe.sections:
            name = section.Name.rstrip(b"\0").decode("ascii", "replace")
            if name == PE_SECTION:
                start, size = section.PointerToRawData, section.SizeOfRawData
                if start + size > len(blob):
                    raise _damaged(str(path), f"section {name} ends at byte {start + size}, "
                                   f"the file has {len(blob)}")
                out.append(section.get_data())
        return out
    except pefile.PEFormatError as exc:
        raise BinaryFormatError(
            f"{path.name} is a damaged PE file",
            evidence=f"{path}: {exc}",
            fix="rebuild and reinstall the module (`flashbuild build`)",
        ) from exc


def list_images(path: Path) -> BinaryImages:
    """Every SASS and PTX image in an object, shared library, DLL or .pyd."""
    fmt, sections = fatbin_sections(path)
    images: list[FatbinImage] = []
    for data in sections:
        images.extend(parse_fatbin(data, where=str(path)))
    return BinaryImages(path=path, format=fmt, images=tuple(images))


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
_SHF_COMPRESSED = 0x800
#: The most section headers read (65,280 is the most an ELF file numbers without extension).
_MAX_SECTIONS = 65536


def _elf_regions(stream: IO[bytes], path: Path, file_size: int) -> list[tuple[int, int]]:
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
        if sh_type == _SHT_NOBITS or not 0 <= name_at < names_size:
            continue
        name = _read_at(stream, names_offset + name_at, longest).split(b"\0", 1)[0]
        if name.decode("ascii", "replace") not in ELF_SECTIONS:
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


def _pe_regions(path: Path, file_size: int) -> list[tuple[int, int]]:
    pe = pefile.PE(name=str(path), fast_load=True)  # maps the file, reads the headers only
    try:
        regions = []
        for section in pe.sections:
            if section.Name.rstrip(b"\0").decode("ascii", "replace") != PE_SECTION:
                continue
            start, size = int(section.PointerToRawData), int(section.SizeOfRawData)
            if start + size > file_size:
                raise _damaged(str(path), f"section {PE_SECTION} ends at byte {start + size}, "
                               f"the file has {file_size}")
            regions.append((start, size))
        return regions
    finally:
        pe.close()


def list_image_headers(path: Path, *, max_entries: int = MAX_HEADER_ENTRIES) -> ImageHeaders:
    """Which SASS and PTX images a binary holds, from section and entry headers alone: bounded
    time and memory whatever the file's size. Raises BinaryFormatError for a file that is not
    a regular ELF/PE file or whose headers are damaged."""
    file_size = regular_size(path)
    where = str(path)
    magic = b""
    try:
        with path.open("rb") as stream:
            magic = stream.read(4)
            if magic == b"\x7fELF":
                fmt: BinaryFormat = "elf"
                regions = _elf_regions(stream, path, file_size)
            elif magic.startswith(b"MZ"):
                fmt = "pe"
                regions = _pe_regions(path, file_size)
            else:
                raise BinaryFormatError(
                    f"{path.name} is not an ELF or PE binary",
                    evidence=f"{path}: first bytes {magic.hex() or '(empty file)'}",
                    fix="reinstall the package it belongs to")
            found: dict[tuple[ImageKind, Arch], int] = {}
            walked, stopped = 0, False
            for offset, size in regions:
                count, stopped = _walk_headers(stream, offset, size, where=where, found=found,
                                               budget=max_entries - walked)
                walked += count
                if stopped:
                    break
    except (ELFError, pefile.PEFormatError, struct.error, ValueError, OSError,
            EOFError) as exc:
        raise BinaryFormatError(
            f"{path.name} is a damaged {'PE' if magic.startswith(b'MZ') else 'ELF'} file",
            evidence=f"{path}: {exc}",
            fix="reinstall the package it belongs to; a truncated file often means an "
            "interrupted copy or a full disk") from exc
    images = tuple(ImageHeader(kind, arch, count) for (kind, arch), count in found.items())
    return ImageHeaders(path=path, format=fmt, images=images, entries=walked,
                        complete=not stopped)
