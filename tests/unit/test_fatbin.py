"""The fatbin reader on committed nvcc 13.0 objects (tests/fixtures/verify/make_fixtures.sh)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild.arch import Suffix
from flashbuild.verifying.fatbin import BinaryFormatError, ImageKind, list_images, parse_fatbin

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
