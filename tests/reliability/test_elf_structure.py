"""ELF structure checked before a section is trusted, and memory bounded on huge inputs (issue
27). The cases run the real CLI in a fresh interpreter that reports its own peak memory
(`check` from test_hostile_verify.py): under 512 MiB, exit 8 with one paragraph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashbuild.verifying.fatbin import list_images
from tests.reliability.test_hostile_verify import V, check

if TYPE_CHECKING:
    from pathlib import Path

GiB = 1024 ** 3


def _zero_second_half_of_cubin(source: Path, target: Path) -> None:
    """Copy `source` to `target` with the second half of its (uncompressed) SASS cubin zeroed:
    the object around it and the fatbin headers stay intact."""
    (image,) = list_images(source).sass
    assert not image.compressed and image.payload.startswith(b"\x7fELF")
    blob = bytearray(source.read_bytes())
    at = blob.find(image.payload)
    half = image.payload_size // 2
    blob[at + half:at + image.payload_size] = bytes(image.payload_size - half)
    target.write_bytes(bytes(blob))


def test_a_cubin_with_its_second_half_zeroed_fails(tmp_path: Path) -> None:
    # Before: "sm_90a SASS present" and exit 0; cuobjdump says "Invalid ELF".
    _zero_second_half_of_cubin(V / "sass_sm90a.o", tmp_path / "_C.so")
    out = check("elf: cubin second half zeroed", tmp_path, "_C.so", "--arch", "sm_90a",
                say="the sm_90a cubin is damaged: not a valid ELF file")
    assert "sm_90a image is unreadable" in out.output


def _sparse(path: Path, head: bytes, size: int) -> None:
    with path.open("wb") as out:
        out.write(head)
        out.truncate(size)  # sparse: no disk blocks, reads back as zeros


def test_a_2_gib_sparse_elf_fails_in_bounded_memory(tmp_path: Path) -> None:
    # A real ELF header (its section headers now zeros) on 2 GiB: before, verify read the
    # whole file (and pyelftools copies of it) to 4-6 GB of RSS, or a MemoryError.
    head = (V / "libmissing_dep.so").read_bytes()[:64]
    _sparse(tmp_path / "big.so", head, 2 * GiB)
    check("elf: 2 GiB sparse ELF", tmp_path, "big.so", "--json",
          say="names no string table")


def test_2_gib_of_zeros_fails_in_bounded_memory(tmp_path: Path) -> None:
    # Before: the whole file read for its first four bytes (2.1 GB peak).
    _sparse(tmp_path / "zeros.so", b"", 2 * GiB)
    check("elf: 2 GiB of zeros", tmp_path, "zeros.so", "--json",
          say="is not an ELF or PE binary")
