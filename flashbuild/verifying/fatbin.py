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
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pefile
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from flashbuild.verifying.fatbin_headers import (
    _CONTAINER,
    _ENTRY_MIN,
    ELF_SECTIONS,
    FATBIN_MAGIC,
    FLAG_COMPRESSED,
    KIND_PTX,
    PE_SECTION,
    BinaryFormat,
    BinaryFormatError,
    ImageKind,
    Mapped,
    UnknownCodecError,
    _arch,
    _damaged,
    _entry,
    _mib,
    as_stream,
    map_regular,
    read_regular,
    validate_elf,
)

#: What fatbin.py offers, the header-level names it takes from fatbin_headers.py included (the
#: error types and ImageKind are imported from here across the package).
__all__ = ["ELF_SECTIONS", "FATBIN_MAGIC", "MAX_IMAGE_BYTES", "PE_SECTION", "BinaryFormat",
           "BinaryFormatError", "BinaryImages", "FatbinImage", "ImageKind", "Mapped",
           "UnknownCodecError", "as_stream", "cubin_elf", "fatbin_sections", "list_images",
           "map_regular", "parse_fatbin", "read_regular", "section_data", "validate_elf"]

if TYPE_CHECKING:
    from pathlib import Path

    from flashbuild.arch import Arch

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: The most bytes one GPU image may decompress to (said in the message and in
#: docs/reliability.md); keeps verify under 512 MiB of memory whatever an entry claims.
MAX_IMAGE_BYTES = 128 * 1024 * 1024
_CHUNK = 1024 * 1024



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
        import zstandard  # noqa: PLC0415  # start-up

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
    is neither or cannot be parsed. The file is mapped, not read (issue 27), and an ELF
    file's structure is checked before pyelftools reads a section of it."""
    with map_regular(path) as blob:
        if blob[:4] == b"\x7fELF":
            validate_elf(blob, str(path), what=f"{path.name} is a damaged ELF file")
            return "elf", _elf_sections(path, blob)
        if blob[:2] == b"MZ":
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


def cubin_elf(cubin: bytes, where: str) -> ELFFile:
    """A cubin opened with pyelftools once its ELF structure is checked (`validate_elf`): every
    reader of a SASS image (resources, placeholders, dynamic shared memory) goes through here,
    so a cubin whose second half is zeroed fails as cuobjdump's "Invalid ELF" does instead of
    reading as a cubin with no kernels (issue 27)."""
    validate_elf(cubin, where)
    return ELFFile(io.BytesIO(cubin))


def _elf_sections(path: Path, blob: Mapped) -> list[bytes]:
    try:
        elf = ELFFile(as_stream(blob))
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


def _pe_sections(path: Path, blob: Mapped) -> list[bytes]:
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


