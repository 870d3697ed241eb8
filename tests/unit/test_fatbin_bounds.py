"""Issue 22: a GPU image is read with a size cap and streamed decompression, and an unreadable
image a target needs fails verify (it passed with a warning); one for another arch warns."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from elftools.elf.elffile import ELFFile

from flashbuild.verifying.fatbin import (
    MAX_IMAGE_BYTES,
    BinaryFormatError,
    UnknownCodecError,
    list_images,
    parse_fatbin,
)
from flashbuild.verifying.verify import Status
from tests.hostile import (
    SHF_COMPRESSED,
    SHT_NOBITS,
    SHT_PROGBITS,
    GiB,
    TiB,
    bomb_object,
    elf_with_fatbin,
    elf_with_sections,
    fatbin,
    fatbin_entry,
    zlib_section_claiming,
    zstd_zeros,
)
from tests.unit.test_verify_inputs import V, run

if TYPE_CHECKING:
    from pathlib import Path


def test_a_claim_over_the_cap_is_refused_before_decoding() -> None:
    found = parse_fatbin(fatbin(fatbin_entry(zstd_zeros(1024), compressed=True,
                                             uncompressed=TiB)))[0]
    with pytest.raises(BinaryFormatError, match=r"128 MiB per image") as err:
        found.data()
    assert "1,099,511,627,776 bytes (1.0 TiB)" in err.value.evidence


def test_decoding_stops_just_past_a_lying_claim() -> None:
    found = parse_fatbin(fatbin(fatbin_entry(zstd_zeros(16 * GiB, declare_size=False),
                                             compressed=True, uncompressed=4096)))[0]
    with pytest.raises(BinaryFormatError, match="damaged") as err:
        found.data()
    assert "decompresses to more than" in err.value.evidence


def test_decoding_without_a_claim_stops_at_the_cap() -> None:
    found = parse_fatbin(fatbin(fatbin_entry(zstd_zeros(16 * GiB, declare_size=False),
                                             compressed=True, uncompressed=0)))[0]
    with pytest.raises(BinaryFormatError, match="larger than flashbuild reads") as err:
        found.data()
    assert f"passed {MAX_IMAGE_BYTES:,} bytes" in err.value.evidence


def test_an_honest_small_image_decodes() -> None:
    found = parse_fatbin(fatbin(fatbin_entry(zstd_zeros(300_000), compressed=True,
                                             uncompressed=300_000)))[0]
    assert found.data() == b"\0" * 300_000


def test_an_unknown_codec_is_its_own_error() -> None:
    found = parse_fatbin(fatbin(fatbin_entry(b"LZ4?" * 8, compressed=True,
                                             uncompressed=64)))[0]
    with pytest.raises(UnknownCodecError):
        found.data()


def test_an_unreadable_target_image_fails_and_is_not_reported_present(tmp_path: Path) -> None:
    (tmp_path / "_C.so").write_bytes(bomb_object(3 * GiB))
    report = run(tmp_path / "_C.so", "sm_90")
    assert not report.ok
    images = [(c.status, c.summary) for c in report.checks if c.area == "images"]
    assert images == [(Status.FAIL, "the sm_90 image is unreadable: the target arch has no "
                       "usable GPU code")]
    (proof,) = report.binaries
    assert proof.missing == ("sm_90",) and proof.sass == ()


def test_an_unreadable_image_of_another_arch_warns(tmp_path: Path) -> None:
    with (V / "sass_sm90a.o").open("rb") as f:
        good = ELFFile(f).get_section_by_name(".nv_fatbin").data()
    bomb = fatbin(fatbin_entry(zstd_zeros(1024), arch=120, compressed=True, uncompressed=TiB))
    (tmp_path / "_C.so").write_bytes(elf_with_fatbin(good + bomb))
    assert list_images(tmp_path / "_C.so").names() == ["sm_90a", "sm_120"]
    report = run(tmp_path / "_C.so", "sm_90a", strict=False)
    assert report.ok, report.failures
    warned = [c.summary for c in report.warnings if "unreadable" in c.summary]
    assert warned == ["the sm_120 image is unreadable"]


def test_a_compressed_fatbin_section_claiming_16_gib_is_refused(tmp_path: Path) -> None:
    (tmp_path / "_C.so").write_bytes(elf_with_sections(
        (".nv_fatbin", SHT_PROGBITS, SHF_COMPRESSED, zlib_section_claiming(16 * GiB), None)))
    with pytest.raises(BinaryFormatError, match="larger than flashbuild reads") as err:
        list_images(tmp_path / "_C.so")
    assert "claims 17,179,869,184 bytes (compressed)" in err.value.evidence


def test_a_cubin_whose_info_section_claims_1_tib_of_zeros_fails(tmp_path: Path) -> None:
    # SHT_NOBITS data is made of sh_size zeros: pyelftools would allocate them all.
    cubin = elf_with_sections((".nv.info", SHT_NOBITS, 0, b"", TiB), machine=190)
    (tmp_path / "_C.so").write_bytes(elf_with_fatbin(fatbin(fatbin_entry(cubin))))
    report = run(tmp_path / "_C.so", "sm_90")
    fail = next(c for c in report.failures if "unreadable" in c.summary)
    assert "section .nv.info of the sm_90 cubin is larger than flashbuild reads" in fail.evidence
