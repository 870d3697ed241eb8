"""ninja [n/m] parsing and first-error extraction from recorded ninja/nvcc/gcc/MSVC logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashbuild.building.progress import (
    NinjaMonitor,
    first_error,
    merge_ptxas,
    parse_status,
    short_description,
)

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "build" / "logs"


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text(encoding="utf-8").splitlines()


def test_parse_status() -> None:
    what = "Building CUDA object x.cu.o"
    assert parse_status(f"[3/10] {what}") == (3, 10, what)
    assert parse_status("ptxas info    : Used 10 registers") is None
    assert short_description(f"{what[:-6]}CMakeFiles/_C.dir/kernels/add.cu.o") == "add.cu"
    assert short_description(f"{what[:-6]}CMakeFiles\\_C.dir\\kernels\\norm.cu.obj") == "norm.cu"


def test_monitor_counts_and_ptxas() -> None:
    seen: list[int] = []
    mon = NinjaMonitor(listener=lambda m: seen.append(m.done))
    for line in _lines("ninja_ok.log"):
        mon.feed(line)
    assert (mon.done, mon.total, mon.edges) == (8, 8, 8)
    assert seen == list(range(1, 9))
    assert not mon.no_work
    add = mon.ptxas["Building CUDA object CMakeFiles/_C.dir/kernels/add.cu.o"]
    assert any("Used 10 registers" in x for x in add)
    assert not any("Compile time" in x for x in add)  # differs per run
    assert first_error(mon.lines) is None


def test_monitor_no_work() -> None:
    mon = NinjaMonitor()
    for line in _lines("ninja_noop.log"):
        mon.feed(line)
    assert mon.no_work


@pytest.mark.parametrize(("log", "line", "context"), [
    ("nvcc_error.log", 6, "undefined_symbol;"),  # nvcc: file.cu(5): error: ...
    ("gcc_error.log", 5, "m2.def"),  # gcc: file.cpp:7:3: error: ...
    ("msvc_error.log", 5, "dlfcn.h"),  # MSVC: fatal error C1083
    ("msvc_link_error.log", 4, "LNK1120"),  # MSVC link: error LNK2019
])
def test_first_error(log: str, line: int, context: str) -> None:
    """`line` is the 1-based line of the recorded log that holds the first real error."""
    lines = _lines(log)
    found = first_error(lines)
    assert found is not None
    assert found.line == lines[line - 1].strip()
    assert "error" in found.line
    assert context in found.context
    assert found.failed_edge.startswith("FAILED: ")


def test_failed_line_when_no_compiler_error() -> None:
    found = first_error(_lines("ninja_failed_only.log"))
    assert found is not None and found.line.startswith("FAILED: CMakeFiles/_C.dir/kernels/add.cu.o")


def test_merge_ptxas_keeps_other_files(tmp_path: Path) -> None:
    record = tmp_path / "ptxas.json"
    text = merge_ptxas(record, {"a.cu": ["ptxas info : Used 8 registers"],
                                "b.cu": ["ptxas info : Used 9 registers"]})
    assert text is not None and "Used 8" in text and "Used 9" in text
    # A partial rebuild replaces one file's lines; a no-op rebuild returns the same text.
    again = merge_ptxas(record, {"a.cu": ["ptxas info : Used 12 registers"]})
    assert again is not None and "Used 12" in again and "Used 9" in again and "Used 8" not in again
    assert merge_ptxas(record, {}) == again
    assert json.loads(record.read_text())["b.cu"] == ["ptxas info : Used 9 registers"]
    assert merge_ptxas(tmp_path / "none.json", {}) is None


def test_an_error_directive_is_explained_and_resource_reports_are_cut(tmp_path: Path) -> None:
    """Recorded: csrc built for sm_89 stops at arch/sm_gate.h's `#error`; ninja finishes the
    other running compiles, whose `ptxas info` reports filled the whole tail."""
    from flashbuild.building.progress import failure

    mon = NinjaMonitor()
    for line in _lines("error_directive_sm89.log"):
        mon.feed(line)
    err = failure("compiling failed", mon, tmp_path / "build.log")
    assert 'error: #error "flashkern: unsupported __CUDA_ARCH__' in err.what
    assert "ptxas info" not in err.evidence and "bytes stack frame" not in err.evidence
    assert "ninja: build stopped" in err.evidence
    assert "own `#error`" in err.fix and "docs/kernels.md" in err.fix
    assert any(lines for lines in mon.ptxas.values())  # still recorded for verify
