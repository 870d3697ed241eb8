"""`validate_elf`: an ELF file's structure is checked before any section is trusted (issue 27)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from flashbuild.verifying.fatbin import BinaryFormatError, list_images, validate_elf
from tests.hostile import elf_with_fatbin, fatbin, fatbin_entry

V = Path(__file__).resolve().parent.parent / "fixtures" / "verify"
#: Offsets in the ELF64 header and section header (the ELF specification).
E_SHOFF, E_SHNUM, E_SHSTRNDX = 40, 60, 62
SH_TYPE, SH_OFFSET = 4, 24


def _elf() -> bytearray:
    return bytearray(elf_with_fatbin(fatbin(fatbin_entry(b"x" * 64))))


def _section_header(blob: bytearray, index: int) -> int:
    (shoff,) = struct.unpack_from("<Q", blob, E_SHOFF)
    return shoff + index * 64


@pytest.mark.parametrize("name", ["dynsmem.o", "libmissing_dep.so", "placeholders_sm87.cubin",
                                  "sass_sm90a.o"])
def test_real_files_and_their_cubins_pass(name: str) -> None:
    path = V / name
    validate_elf(path.read_bytes(), name)
    for image in list_images(path).sass:
        validate_elf(image.data(), image.name)


def test_a_minimal_object_passes() -> None:
    validate_elf(bytes(_elf()), "min.o")


def _damage(field: str) -> bytearray:
    blob = _elf()
    if field == "shoff past the end":
        struct.pack_into("<Q", blob, E_SHOFF, len(blob) + 8)
    elif field == "shnum past the end":
        struct.pack_into("<H", blob, E_SHNUM, 1000)
    elif field == "section past the end":
        struct.pack_into("<Q", blob, _section_header(blob, 1) + SH_OFFSET, len(blob))
    elif field == "shstrndx out of range":
        struct.pack_into("<H", blob, E_SHSTRNDX, 7)
    elif field == "shstrndx not a string table":
        struct.pack_into("<I", blob, _section_header(blob, 2) + SH_TYPE, 1)
    elif field == "cut header":
        del blob[40:]
    return blob


@pytest.mark.parametrize("field", ["shoff past the end", "shnum past the end",
                                   "section past the end", "shstrndx out of range",
                                   "shstrndx not a string table", "cut header"])
def test_damaged_structure_is_refused(field: str) -> None:
    with pytest.raises(BinaryFormatError, match="not a valid ELF file"):
        validate_elf(bytes(_damage(field)), "bad.o")


def test_a_section_past_the_end_is_refused_by_list_images(tmp_path: Path) -> None:
    # The host binary too, before pyelftools reads a section of it.
    (tmp_path / "bad.so").write_bytes(bytes(_damage("section past the end")))
    with pytest.raises(BinaryFormatError, match=r"bad\.so is a damaged ELF file") as info:
        list_images(tmp_path / "bad.so")
    assert "spans bytes" in info.value.evidence


def test_a_zeroed_cubin_half_is_refused() -> None:
    (image,) = list_images(V / "sass_sm90a.o").sass
    cubin = bytearray(image.data())
    cubin[len(cubin) // 2:] = bytes(len(cubin) - len(cubin) // 2)
    with pytest.raises(BinaryFormatError, match="not a valid ELF file"):
        validate_elf(bytes(cubin), image.name)


@pytest.mark.parametrize("sh_type", [8, 0x70000007, 0x70000009, 0x7000000A, 0x70000015])
def test_a_reservation_of_gpu_memory_may_lie_past_the_end(sh_type: int) -> None:
    # `.nv.shared.<kernel>` as the device linker writes it (SHT_CUDA_SHARED), and the other
    # types that name memory, not file bytes: its offset and size are no damage (bitsandbytes'
    # 1.4 MB sm_90a cubin, a section "spanning" to byte 2,751,463, was refused as damaged).
    blob = _damage("section past the end")
    struct.pack_into("<I", blob, _section_header(blob, 1) + SH_TYPE, sh_type)
    validate_elf(bytes(blob), "reserved.o")
    struct.pack_into("<I", blob, _section_header(blob, 1) + SH_TYPE, 0x70000000)
    with pytest.raises(BinaryFormatError, match="not a valid ELF file"):
        validate_elf(bytes(blob), "info.o")
