"""The placeholder reader on kernels compiled here by the real nvcc."""

from __future__ import annotations

import subprocess
from pathlib import Path

from flashbuild.verifying.placeholders import Body, placeholder_report

SOURCE = Path(__file__).resolve().parent.parent / "fixtures" / "verify" / "placeholders.cu"


def test_trap_branch_is_caught_only_on_the_arch_that_takes_it(
        cuda_toolkit_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "placeholders.o"
    subprocess.run([str(cuda_toolkit_root / "bin" / "nvcc"), "-c", str(SOURCE), "-o", str(out),
                    "-gencode", "arch=compute_90a,code=sm_90a",
                    "-gencode", "arch=compute_120,code=sm_120"],
                   check=True, capture_output=True, timeout=300)
    found = {r.arch: {k.short: k.body for k in r.kernels} for r in placeholder_report(out)}
    assert set(found) == {"sm_90a", "sm_120"}
    assert found["sm_120"]["arch_gated"] is Body.PLACEHOLDER
    assert found["sm_90a"]["arch_gated"] is Body.REAL
    for arch in found.values():
        assert arch["checked"] is Body.REAL
        assert arch["unsupported"] is Body.PLACEHOLDER
        assert arch["trap_only"] is Body.PLACEHOLDER
