"""A preprocessor pass that blocks (issue 27): a header that is a FIFO makes gcc's open()
wait for a writer for ever. The pass took 300 s per run (the `-M -MG` probe and the run each)
and the scan's report did not say it had timed out. Now a pass has one budget for all its
runs (TIMEOUT_S), the report names the unit that timed out, and nothing is left running."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from flashbuild.source import preprocess
from tests.reliability.helpers import cli, record, snapshot

CUDA = Path("/usr/local/cuda-13.0")
WRAP = """#pragma once
#define ARCH_IN(lo, hi) (__CUDA_ARCH__ >= lo && __CUDA_ARCH__ < hi)
#if defined(__CUDA_ARCH__) && ARCH_IN(1000, 1300)
__device__ __forceinline__ void up_to_sm120(unsigned b) {
  asm volatile("tcgen05.commit.cta_group::1.b64 [%0];" :: "r"(b));
}
#endif
"""
KERNEL = """#include "wrap.cuh"
#include "fifo.h"
__global__ void k(unsigned b) {
#if defined(__CUDA_ARCH__) && ARCH_IN(1000, 1300)
  up_to_sm120(b);
#endif
}
"""


def _running(marker: str) -> list[str]:
    done = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=False)
    return [line for line in done.stdout.splitlines() if marker in line and "ps -eo" not in line]


@pytest.mark.skipif(not (CUDA / "bin" / "nvcc").is_file() or shutil.which("ps") is None,
                    reason="needs the CUDA 13.0 toolkit and ps")
def test_a_fifo_header_times_the_pass_out_and_says_so(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    (tree / "inc").mkdir(parents=True)
    (tree / "inc" / "wrap.cuh").write_text(WRAP)
    (tree / "k.cu").write_text(KERNEL)
    # The FIFO lies outside the tree: introspection copies the tree and refuses a FIFO in it.
    outside = tmp_path / "fifo-include"
    outside.mkdir()
    os.mkfifo(outside / "fifo.h")
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(x LANGUAGES CXX CUDA)\n"
        f"add_library(k SHARED k.cu)\ntarget_include_directories(k PRIVATE inc {outside})\n")
    before = snapshot(tree)
    monkeypatch.setattr(preprocess, "TIMEOUT_S", 3.0)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{CUDA / 'bin'}{os.pathsep}{os.environ['PATH']}")
    start = time.monotonic()
    out = cli("scan", str(tree), "--arch", "sm120", "--jobs", "1", timeout=120)
    seconds = time.monotonic() - start
    time.sleep(preprocess.KILL_AFTER_S + 1)  # `timeout`'s own kill, had the tree survived
    left = _running(str(outside))
    said = "1 unit(s) timed out after 3 s" in " ".join(out.output.split())
    record("preprocessor pass on a FIFO header", clear_error=None, data_lost=False,
           tree_changed=snapshot(tree) != before, hang=out.hang or seconds > 60,
           left_running=bool(left), internal=out.traceback or out.internal,
           false_pass=not said)
    assert out.code == 0 and not out.traceback, out.output
    assert said, out.output
    assert seconds < 60, seconds
    assert not left, left
