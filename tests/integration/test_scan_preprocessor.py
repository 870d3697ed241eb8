"""`flashbuild scan` with the real preprocessor (issue 18 item 3): a gate the static reader
cannot decide (a function-like macro) is decided by nvcc's own device pass, both ways; the
instruction findings are confirmed or dropped by compiling their unit; `--static` runs nothing.
Needs a CUDA toolkit with nvcc (the venv's PyPI toolkit will do); skips without one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from flashbuild.scanning.findings import ScanOptions, Severity, Truth, make_target
from flashbuild.scanning.scan import scan_tree
from flashbuild.scanning.truth import find_toolchain

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(find_toolchain() is None, reason="no CUDA toolkit with nvcc")]

SETUP = """from setuptools import setup
from torch.utils.cpp_extension import CUDAExtension
setup(name='m', version='1', ext_modules=[CUDAExtension(
    name='m', sources=['k.cu'], include_dirs=['inc'],
    extra_compile_args={'nvcc': ['-O3', '-DUSE_WRAPPERS=1']})])
"""
WRAP = """#pragma once
#define ARCH_IN(lo, hi) (__CUDA_ARCH__ >= lo && __CUDA_ARCH__ < hi)
#if defined(__CUDA_ARCH__) && ARCH_IN(1000, 1200)
__device__ __forceinline__ void only_sm100(unsigned b) {
  asm volatile("tcgen05.commit.cta_group::1.b64 [%0];" :: "r"(b));
}
#endif
#if defined(__CUDA_ARCH__) && ARCH_IN(1000, 1300)
__device__ __forceinline__ void up_to_sm120(unsigned b) {
  asm volatile("tcgen05.commit.cta_group::1.b64 [%0];" :: "r"(b));
}
#endif
"""
KERNEL = """#include "wrap.cuh"
__global__ void k(unsigned b) {
#if defined(__CUDA_ARCH__) && ARCH_IN(1000, 1200)
  only_sm100(b);
#endif
#if defined(__CUDA_ARCH__) && ARCH_IN(1000, 1300)
  up_to_sm120(b);
#endif
}
"""


def _tree(root: Path) -> Path:
    (root / "inc").mkdir(parents=True)
    (root / "setup.py").write_text(SETUP, encoding="utf-8")
    (root / "inc" / "wrap.cuh").write_text(WRAP, encoding="utf-8")
    (root / "k.cu").write_text(KERNEL, encoding="utf-8")
    return root


def test_device_pass_decides_what_the_static_reader_cannot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = _tree(tmp_path / "t")
    never = ScanOptions(jobs=1, compile="never")  # the preprocessor alone
    result = scan_tree(root, make_target("linux", "sm120"), never)
    found = {f.line: f for f in result.findings if f.rule == "FB160"}
    assert set(found) == {5, 10}
    # ARCH_IN(1000, 1200) is false for sm_120: the pass drops the line, it stays a note.
    assert (found[5].severity, found[5].truth) == (Severity.NOTE, Truth.PREPROCESSOR)
    # ARCH_IN(1000, 1300) holds for sm_120: the pass keeps it and a kernel calls it.
    assert (found[10].severity, found[10].truth) == (Severity.ERROR, Truth.PREPROCESSOR)
    assert result.truth.startswith("preprocessor (nvcc ")
    again = scan_tree(root, make_target("linux", "sm120"), never)
    assert "0 pass(es) run" in again.truth  # cached by content + flags
    # With the compiler (one unit: within the automatic budget), ptxas confirms it.
    compiled = scan_tree(root, make_target("linux", "sm120"), ScanOptions(jobs=1))
    assert [(f.line, f.severity, f.truth) for f in compiled.findings
            if f.rule == "FB160" and f.severity is Severity.ERROR] == \
        [(10, Severity.ERROR, Truth.COMPILER)]


def test_static_runs_nothing_and_says_so(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = _tree(tmp_path / "t")
    result = scan_tree(root, make_target("linux", "sm120"), ScanOptions(jobs=1, static=True))
    assert {(f.line, f.severity, f.truth) for f in result.findings if f.rule == "FB160"} == \
        {(5, Severity.NOTE, Truth.STATIC), (10, Severity.NOTE, Truth.STATIC)}
    assert result.truth.startswith("static reading (--static)")
    assert not (tmp_path / "cache").exists()


COMPILE_SETUP = """from setuptools import setup
from torch.utils.cpp_extension import CUDAExtension
setup(name='m', version='1', ext_modules=[CUDAExtension(
    name='m', sources=['unused.cu', 'used.cu'], extra_compile_args={'nvcc': ['-O3']})])
"""
ASM = 'asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.b64 [%0];" :: "r"(b));'


def test_instruction_findings_confirmed_by_compiling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "t"
    root.mkdir()
    (root / "setup.py").write_text(COMPILE_SETUP, encoding="utf-8")
    # A kernel template nothing instantiates: no PTX, so ptxas never sees the asm.
    (root / "unused.cu").write_text(
        f"template <int N> __global__ void k(unsigned b) {{ {ASM} }}\n", encoding="utf-8")
    (root / "used.cu").write_text(f"__global__ void k2(unsigned b) {{ {ASM} }}\n",
                                  encoding="utf-8")
    result = scan_tree(root, make_target("linux", "sm120"), ScanOptions(jobs=1))
    found = {f.path: f for f in result.findings if f.rule == "FB160"}
    assert (found["unused.cu"].severity, found["unused.cu"].truth) == \
        (Severity.NOTE, Truth.COMPILER)
    assert (found["used.cu"].severity, found["used.cu"].truth) == \
        (Severity.ERROR, Truth.COMPILER)
    assert "compiled 2 unit(s)" in result.truth
    never = scan_tree(root, make_target("linux", "sm120"), ScanOptions(jobs=1, compile="never"))
    assert {f.truth for f in never.findings if f.rule == "FB160"} == {Truth.PREPROCESSOR}
