"""Builders of hostile GPU binaries, small on disk whatever they claim: a fatbin container
(FACTS.md "Fatbinaries", the layout flashbuild/verifying/fatbin.py reads), a minimal ELF that
carries it in `.nv_fatbin`, and a Zstandard frame of zeros made of RLE blocks (4 bytes per
128 KiB, so a 16 GiB bomb is 512 KiB) — no compressor needed, nothing decoded while building.
"""

from __future__ import annotations

import struct

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
FLAG_COMPRESSED = 0x8000
_BLOCK = 128 * 1024
GiB = 1024 ** 3
TiB = 1024 ** 4


def zstd_zeros(size: int, *, declare_size: bool = True) -> bytes:
    """A valid Zstandard frame that decodes to `size` zero bytes (RLE blocks of 128 KiB)."""
    # Frame header descriptor: FCS field 8 bytes (0b11 << 6) or none, not single segment, so
    # a window descriptor follows (window log 17 = 128 KiB: exponent 7).
    header = (bytes([0xC0, 7 << 3]) + struct.pack("<Q", size) if declare_size else
              bytes([0x00, 7 << 3]))
    blocks = bytearray()
    left = size
    while left > 0:
        n = min(left, _BLOCK)
        left -= n
        last = 1 if left == 0 else 0
        blocks += (last | (1 << 1) | (n << 3)).to_bytes(3, "little") + b"\0"
    if size == 0:
        blocks += (1 | (0 << 1)).to_bytes(3, "little")  # one empty raw last block
    return b"\x28\xb5\x2f\xfd" + header + bytes(blocks)


def fatbin_entry(payload: bytes, *, arch: int = 90, kind: int = KIND_ELF,
                 compressed: bool = False, uncompressed: int = 0,
                 payload_size: int | None = None) -> bytes:
    """One 64-byte-header entry; `payload_size` may lie (default: the real, padded size)."""
    padded = payload + b"\0" * (-len(payload) % 8)
    header = bytearray(64)
    struct.pack_into("<HHIQ", header, 0, kind, 0x0101, 64,
                     len(padded) if payload_size is None else payload_size)
    struct.pack_into("<I", header, 16, len(payload) if compressed else 0)
    struct.pack_into("<I", header, 24, 0x00010008)
    struct.pack_into("<I", header, 28, arch)
    struct.pack_into("<Q", header, 40, FLAG_COMPRESSED if compressed else 0)
    struct.pack_into("<Q", header, 56, uncompressed if compressed else 0)
    return bytes(header) + padded


def fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


SHT_PROGBITS, SHT_NOBITS = 1, 8
SHF_COMPRESSED = 0x800


def elf_with_sections(*sections: tuple[str, int, int, bytes, int | None],
                      machine: int = 62) -> bytes:
    """A minimal ELF64 relocatable object: each section (name, sh_type, sh_flags, data,
    sh_size or None for len(data)), then .shstrtab."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, *_ in sections) + b".shstrtab\0"
    body = bytearray()
    headers = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    name_at = 1
    for name, kind, flags, data, size in sections:
        off = 64 + len(body)
        body += data + b"\0" * (-len(data) % 8)
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, kind, flags, 0, off,
                                   len(data) if size is None else size, 0, 0, 8, 0))
        name_at += len(name) + 1
    names_off = 64 + len(body)
    headers.append(struct.pack("<IIQQQQIIQQ", name_at, 3, 0, 0, names_off, len(names), 0, 0,
                               1, 0))
    body += names + b"\0" * (-len(names) % 8)
    sh_off = 64 + len(body)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 1, machine, 1, 0, 0, sh_off, 0, 64, 0, 0, 64,
                               len(headers), len(headers) - 1)
    return ehdr + bytes(body) + b"".join(headers)


def elf_with_fatbin(section: bytes) -> bytes:
    """A minimal ELF64 relocatable object with one `.nv_fatbin` section (and .shstrtab)."""
    return elf_with_sections((".nv_fatbin", SHT_PROGBITS, 0, section, None))


def zlib_section_claiming(size: int) -> bytes:
    """The bytes of an SHF_COMPRESSED section (Elf64_Chdr, zlib) whose header claims `size`."""
    import zlib

    return struct.pack("<IIQQ", 1, 0, size, 8) + zlib.compress(b"\0" * 4096)


def bomb_object(size: int, *, arch: int = 90, claim: int | None = None,
                declare_size: bool = True) -> bytes:
    """An object whose only SASS image is a zstd frame decoding to `size` zeros; the entry
    header claims `claim` bytes uncompressed (default: the truth)."""
    frame = zstd_zeros(size, declare_size=declare_size)
    return elf_with_fatbin(fatbin(fatbin_entry(
        frame, arch=arch, compressed=True, uncompressed=size if claim is None else claim)))
