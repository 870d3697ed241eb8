"""The fatbin reader on committed nvcc 13.0 objects (tests/fixtures/verify/make_fixtures.sh)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import IO

import pytest

from flashbuild.arch import Suffix
from flashbuild.verifying import fatbin_headers as fatbin_module
from flashbuild.verifying.fatbin import (
    BinaryFormatError,
    ImageKind,
    list_images,
    parse_fatbin,
)
from flashbuild.verifying.fatbin_headers import list_image_headers
from tests.hostile import (
    SHF_COMPRESSED,
    SHT_NOBITS,
    SHT_PROGBITS,
    GiB,
    TiB,
    elf_with_fatbin,
    elf_with_sections,
    fatbin,
    fatbin_entry,
    zlib_section_claiming,
)

V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"


@pytest.mark.parametrize(("name", "expected"), [
    ("sass_sm90a.o", ["sm_90a"]),
    ("sass_ptx_sm120.o", ["sm_120", "compute_120"]),
    ("ptx_compute90.o", ["compute_90"]),
    ("multi.o", ["sm_90a", "sm_100f", "sm_120a", "compute_120a"]),
    ("compressed_sm90.o", ["sm_90", "compute_90"]),
    ("libmissing_dep.so", ["sm_90a"]),
    ("kern.dll", ["sm_120", "compute_120"]),
    ("helper.dll", []),
])
def test_lists_images(name: str, expected: list[str]) -> None:
    assert list_images(V / name).names() == expected


def test_suffix_and_kind_come_from_entry_flags() -> None:
    images = list_images(V / "multi.o").images
    assert [(i.kind, i.arch.code, i.arch.suffix) for i in images] == [
        (ImageKind.SASS, 90, Suffix.ARCH), (ImageKind.SASS, 100, Suffix.FAMILY),
        (ImageKind.SASS, 120, Suffix.ARCH), (ImageKind.PTX, 120, Suffix.ARCH)]


def test_compressed_images_decompress_to_cubin_and_ptx() -> None:
    found = list_images(V / "compressed_sm90.o")
    (sass,), (ptx,) = found.sass, found.ptx
    assert ptx.compressed and sass.compressed
    assert sass.data().startswith(b"\x7fELF") and len(sass.data()) == sass.size
    assert b".target sm_90" in ptx.data()
    assert sass.payload_size < sass.size


def test_pe_fatbin_matches_the_elf_it_was_copied_from() -> None:
    pe = list_images(V / "kern.dll")
    elf = list_images(V / "sass_ptx_sm120.o")
    assert pe.format == "pe" and elf.format == "elf"
    assert [i.data() for i in pe.images] == [i.data() for i in elf.images]


def test_truncated_object_is_a_clear_error() -> None:
    with pytest.raises(BinaryFormatError) as info:
        list_images(V / "truncated.o")
    assert "damaged" in info.value.what and info.value.fix


def test_not_a_binary(tmp_path: Path) -> None:
    junk = tmp_path / "mod.so"
    junk.write_bytes(b"this is text")
    with pytest.raises(BinaryFormatError, match="not an ELF or PE"):
        list_images(junk)


def test_garbled_and_cut_fatbins() -> None:
    from elftools.elf.elffile import ELFFile

    with (V / "sass_ptx_sm120.o").open("rb") as f:
        data = ELFFile(f).get_section_by_name(".nv_fatbin").data()
    assert len(parse_fatbin(data)) == 2
    with pytest.raises(BinaryFormatError, match="damaged"):
        parse_fatbin(data[: len(data) // 2])
    garbled = bytearray(data)
    garbled[0] ^= 0xFF
    with pytest.raises(BinaryFormatError, match="magic"):
        parse_fatbin(bytes(garbled))
    # Zero padding after the last container (PE sections are padded) is not an entry.
    assert len(parse_fatbin(data + b"\0" * 24)) == 2


# --- the header-only reader (doctor --packages) ---------------------------------------------

@pytest.mark.parametrize("name", [
    "sass_sm90a.o", "sass_ptx_sm120.o", "ptx_compute90.o", "multi.o", "compressed_sm90.o",
    "libmissing_dep.so", "dynsmem.o", "resources_sm120.o", "kern.dll", "helper.dll",
])
def test_headers_list_the_same_images_as_the_full_reader(name: str) -> None:
    full = list_images(V / name)
    headers = list_image_headers(V / name)
    assert headers.names() == full.names()
    assert headers.format == full.format
    assert headers.entries == len(full.images) and headers.complete
    assert [(i.kind, i.arch) for i in headers.images] == list(
        dict.fromkeys((i.kind, i.arch) for i in full.images))


def test_headers_count_entries_and_stop_at_the_cap(tmp_path: Path) -> None:
    """Five translation units built for one arch are one image of five entries; a cap below
    that stops the walk and says the listing is incomplete."""
    obj = tmp_path / "five.so"
    obj.write_bytes(elf_with_fatbin(b"".join(
        fatbin(fatbin_entry(b"\x7fELF" + b"\0" * 60, arch=90)) for _ in range(5))))
    whole = list_image_headers(obj)
    assert whole.names() == ["sm_90"] and whole.images[0].entries == 5 and whole.complete
    capped = list_image_headers(obj, max_entries=3)
    assert capped.entries == 3 and not capped.complete
    assert list_image_headers(obj, max_entries=5).complete


def test_headers_never_read_a_payload(tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads are headers-sized whatever the payloads weigh (torch's libraries are 1-2 GB)."""
    obj = tmp_path / "big.so"
    obj.write_bytes(elf_with_fatbin(fatbin(
        fatbin_entry(b"\0" * (4 * 1024 * 1024), arch=90),
        fatbin_entry(b"\0" * (4 * 1024 * 1024), arch=120))))
    sizes: list[int] = []
    real = fatbin_module._read_at

    def spy(stream: IO[bytes], pos: int, size: int) -> bytes:
        sizes.append(size)
        return real(stream, pos, size)

    monkeypatch.setattr(fatbin_module, "_read_at", spy)
    assert list_image_headers(obj).names() == ["sm_90", "sm_120"]
    assert max(sizes) <= 4096


def test_damaged_headers_are_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BinaryFormatError, match="damaged"):
        list_image_headers(V / "truncated.o")
    junk = tmp_path / "mod.so"
    junk.write_bytes(b"this is text")
    with pytest.raises(BinaryFormatError, match="not an ELF or PE"):
        list_image_headers(junk)
    from elftools.elf.elffile import ELFFile

    with (V / "sass_ptx_sm120.o").open("rb") as f:
        data = ELFFile(f).get_section_by_name(".nv_fatbin").data()
    cut = tmp_path / "cut.so"
    cut.write_bytes(elf_with_fatbin(data[: len(data) // 2]))
    with pytest.raises(BinaryFormatError, match="damaged"):
        list_image_headers(cut)
    garbled = bytearray(data)
    garbled[0] ^= 0xFF
    cut.write_bytes(elf_with_fatbin(bytes(garbled)))
    with pytest.raises(BinaryFormatError, match="magic"):
        list_image_headers(cut)
    padded = tmp_path / "padded.so"
    padded.write_bytes(elf_with_fatbin(b"\0" * 40 + data + b"\0" * 24))
    assert list_image_headers(padded).names() == ["sm_120", "compute_120"]


def test_headers_refuse_what_is_not_a_regular_file(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "pipe.so"
    os.mkfifo(fifo)
    with pytest.raises(BinaryFormatError, match="not a regular file"):
        list_image_headers(fifo)


def test_header_reader_refuses_claims_the_file_cannot_hold(tmp_path: Path) -> None:
    """A compressed fatbin section cannot be walked by seeking, a NOBITS one holds nothing,
    and a section or section table past the end of the file is damage: each an error or an
    empty listing, never a read of what the header claims."""
    obj = tmp_path / "x.so"
    obj.write_bytes(elf_with_sections((".nv_fatbin", SHT_PROGBITS, SHF_COMPRESSED,
                                       zlib_section_claiming(16 * GiB), None)))
    with pytest.raises(BinaryFormatError, match="compressed"):
        list_image_headers(obj)
    obj.write_bytes(elf_with_sections((".nv_fatbin", SHT_NOBITS, 0, b"", TiB)))
    assert list_image_headers(obj).names() == []
    obj.write_bytes(elf_with_sections((".nv_fatbin", SHT_PROGBITS, 0, b"\0" * 64, TiB)))
    with pytest.raises(BinaryFormatError, match="damaged"):
        list_image_headers(obj)
    whole = bytearray(elf_with_fatbin(b"\0" * 64))
    whole[60:62] = (60000).to_bytes(2, "little")  # e_shnum: far more headers than bytes
    obj.write_bytes(bytes(whole))
    with pytest.raises(BinaryFormatError, match="damaged"):
        list_image_headers(obj)


def test_fatbins_a_library_keeps_in_its_data_sections_are_found_on_request(
        tmp_path: Path) -> None:
    """Some libraries load their own kernels (cuFFT 12: one entry in `.nv_fatbin`, thousands of
    containers in `.ldata`); `.nv_fatbin` alone would say "sm_75 only" and doctor would call the
    library broken on every newer GPU. The magic number by chance (a bad header after it) and a
    container in an executable section are not counted."""
    alloc, execinstr = 0x2, 0x4
    by_chance = struct.pack("<IHHQ", 0xBA55ED50, 7, 16, 64) + b"\1" * 64
    data = (b"\0" * 24 + fatbin(fatbin_entry(b"\1" * 32, arch=90), fatbin_entry(b"\2" * 16,
                                                                               arch=120))
            + by_chance + fatbin(fatbin_entry(b"\3" * 8, arch=100)))
    obj = tmp_path / "libkernels.so"
    obj.write_bytes(elf_with_sections(
        (".nv_fatbin", SHT_PROGBITS, 0, fatbin(fatbin_entry(b"\0" * 8, arch=75)), None),
        (".ldata", SHT_PROGBITS, alloc, data, None),
        (".text", SHT_PROGBITS, alloc | execinstr, fatbin(fatbin_entry(b"\4" * 8, arch=89)),
         None)))
    assert list_image_headers(obj).names() == ["sm_75"]
    found = list_image_headers(obj, embedded=True)
    assert found.names() == ["sm_75", "sm_90", "sm_120", "sm_100"]
    assert found.embedded == 2 and found.entries == 4
