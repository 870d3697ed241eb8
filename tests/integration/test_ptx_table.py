"""The scan's PTX instruction table against ptxas: every row's PTX assembled for the sm_120
family and its neighbours with the toolkit's own ptxas, accepted exactly where the table says."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flashbuild.arch import parse_arch
from flashbuild.scanning.ptx_table import INSTRUCTIONS, ptx_kernel

pytestmark = pytest.mark.integration

TARGETS = ("sm_120", "sm_120a", "sm_120f", "sm_90a", "sm_100a")


def _ptxas(root: Path) -> Path:
    found = [p for p in (root / "bin" / "ptxas", root / "bin" / "ptxas.exe") if p.is_file()]
    if not found:
        pytest.skip(f"no ptxas in {root / 'bin'}")
    return found[0]


@pytest.mark.parametrize("name", sorted(INSTRUCTIONS))
def test_table_matches_ptxas(name: str, cuda_toolkit_root: Path, tmp_path: Path) -> None:
    ptxas = _ptxas(cuda_toolkit_root)
    row = INSTRUCTIONS[name]
    table: dict[str, bool] = {}
    measured: dict[str, bool] = {}
    for target in TARGETS:
        src = tmp_path / f"{target}.ptx"
        src.write_text(ptx_kernel(row.ptx, target), encoding="utf-8")
        res = subprocess.run([str(ptxas), f"-arch={target}", str(src), "-o",
                              str(tmp_path / f"{target}.cubin")],
                             capture_output=True, text=True, timeout=60, check=False)
        if res.returncode != 0:
            # Only "this target lacks it" counts as a rejection; a malformed body is a bug.
            assert "not supported" in res.stderr, res.stderr
        measured[target] = res.returncode == 0
        table[target] = row.accepts(parse_arch(target).arch)
    assert measured == table
