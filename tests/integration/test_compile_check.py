"""`recipe init --compile-check` with the real nvcc: a drafted allow-list edit is built for
sm_120 as the tree is (fails: #error) and with the draft (compiles), and the draft says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app

pytestmark = pytest.mark.integration

GATE = """#pragma once
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ == 900 || __CUDA_ARCH__ == 1000
#define LIB_SUPPORTED 1
#else
#error "lib: unsupported __CUDA_ARCH__"
#endif
#endif
"""


def test_drafted_allow_list_edit_is_compile_checked(tmp_path: Path,
                                                     cuda_toolkit_root: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(
        "project(t LANGUAGES CXX CUDA)\nadd_library(t SHARED src/k.cu)\n", encoding="utf-8")
    (tree / "src" / "gate.h").write_text(GATE, encoding="utf-8")
    (tree / "src" / "k.cu").write_text(
        "#include \"gate.h\"\n__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n",
        encoding="utf-8")
    out = tmp_path / "draft.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--source", str(tree), "--platform",
                                   "linux", "--arch", "sm120", "--compile-check", "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    if "no CUDA toolkit with nvcc found" in text:
        pytest.skip("doctor's toolkit choice has no nvcc here")
    assert "# compile-checked: src/k.cu fails as is and compiles with the drafted steps" in text
    assert "# compile check (nvcc " in text
