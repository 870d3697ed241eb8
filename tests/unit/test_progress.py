"""ninja [n/m] parsing and first-error extraction from recorded ninja/nvcc/gcc/MSVC logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from flashbuild.building.progress import (
    NinjaMonitor,
    estimate_left,
    failure,
    first_error,
    format_left,
    merge_ptxas,
    parse_status,
    short_description,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

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


# --- the estimate of the time left -----------------------------------------------------------

#: A recorded sm_120a build of 32 units through a pipe (ninja prints a unit's line when it
#: finishes), with the seconds after the build started at which each line arrived: the first
#: unit after 530 s (the 0:08:50 of issue 28), then one every ~60 s.
_RECORDED = [(530.0, "[1/32] Building CUDA object CMakeFiles/frt.dir/csrc/attn/fwd_a.cu.o"),
             (590.0, "[2/32] Building CUDA object CMakeFiles/frt.dir/csrc/attn/fwd_b.cu.o"),
             (650.0, "[3/32] Building CUDA object CMakeFiles/frt.dir/csrc/attn/fwd_c.cu.o"),
             (710.0, "[4/32] Building CUDA object CMakeFiles/frt.dir/csrc/attn/fwd_d.cu.o")]


def _replay(lines: list[tuple[float, str]], *, now: float) -> NinjaMonitor:
    times = iter([at for at, _line in lines])
    mon = NinjaMonitor(started=0.0, clock=lambda: next(times))
    for _at, line in lines:
        mon.feed(line)
    mon.clock = lambda: now
    return mon


def test_no_estimate_until_a_few_units_are_done() -> None:
    # 1/32 after 8:50 (and 2/32): too few units to say anything honest.
    assert _replay(_RECORDED[:1], now=540.0).left() is None
    assert _replay(_RECORDED[:2], now=600.0).left() is None


def test_estimate_is_units_left_times_recent_seconds_per_unit() -> None:
    # 3 done at 650 s, fewer than the window: 650 s / 3 units each, 29 units left.
    assert _replay(_RECORDED[:3], now=650.0).left() == pytest.approx(29 * 650 / 3)
    # Counted down from the last unit's time.
    assert _replay(_RECORDED[:3], now=700.0).left() == pytest.approx(29 * 650 / 3 - 50)


def test_estimate_follows_the_recent_rate_not_the_slow_start() -> None:
    # 20 units: a slow first one, then one every 10 s; the window of the last 8 gives 10 s.
    lines = [(300.0, "[1/40] Building CXX object a.cpp.o")]
    lines += [(300.0 + 10 * i, f"[{i + 1}/40] Building CUDA object k{i}.cu.o")
              for i in range(1, 20)]
    assert _replay(lines, now=lines[-1][0]).left() == pytest.approx(20 * 10.0)


def test_no_estimate_when_overdue_done_or_absurd() -> None:
    assert _replay(_RECORDED[:3], now=650.0 + 29 * 650 / 3 + 1).left() is None  # overdue
    done = [(10.0 * i, f"[{i}/3] Linking k{i}") for i in range(1, 4)]
    assert _replay(done, now=31.0).left() is None  # nothing left
    assert estimate_left([(1.0, 3)], 10_000_000, started=0.0, now=1.0) is None  # > a day


def test_format_left() -> None:
    assert format_left(252.2) == "about 4:13 left"
    assert format_left(3900) == "about 1:05:00 left"
    assert format_left(3) == "about 0:10 left"
    assert format_left(41) == "about 0:50 left"


def test_the_bar_shows_the_estimate_in_80_columns() -> None:
    from io import StringIO

    from rich.console import Console
    from rich.progress import Progress

    from flashbuild.building.progress import bar_columns

    mon = _replay(_RECORDED, now=710.0)
    console = Console(file=StringIO(), width=80, color_system=None, legacy_windows=False)
    bar = Progress(*bar_columns(mon), console=console)
    bar.add_task("compiling", total=32, completed=4, current="fwd_d.cu")
    console.print(bar.make_tasks_table(bar.tasks))
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    # 710 s for 4 units, 28 left: 28 x 177.5 s.
    assert "about 1:22:50 left" in shown and "4/32" in shown and "fwd_d.cu" in shown
    assert all(len(line) <= 80 for line in shown.splitlines())
    mon.finished[:] = mon.finished[:1]  # back at 1/32: no estimate shown
    console.file = StringIO()
    console.print(bar.make_tasks_table(bar.tasks))
    assert "left" not in console.file.getvalue()  # type: ignore[attr-defined]


def test_a_source_the_tree_lacks_is_named_not_ninjas_exit(tmp_path: Path) -> None:
    """Recorded (fast-hadamard-transform 1.1.0's sdist ships no csrc/): ninja refuses an input
    no rule makes; the Python traceback after it (CalledProcessError) is not the cause."""
    from flashbuild.building.progress import failure

    mon = NinjaMonitor()
    for line in _lines("setuptools_missing_source.log"):
        mon.feed(line)
    err = failure("building the setup.py project failed", mon, tmp_path / "build.log")
    assert err.what.startswith("building the setup.py project failed: ninja: error: "
                               "'/b/fht/src/csrc/fast_hadamard_transform.cpp'")
    assert "CalledProcessError" not in err.what
    assert "the tree has no /b/fht/src/csrc/fast_hadamard_transform.cpp" in err.fix
    assert "repository" in err.fix


@pytest.mark.parametrize(("line", "requirement"), [
    # mmcv 2.2.0's setup.py against setuptools >= 82
    ("ModuleNotFoundError: No module named 'pkg_resources'", '"setuptools<82"'),
    ("ModuleNotFoundError: No module named 'yaml'", '"PyYAML"'),
    ("ModuleNotFoundError: No module named 'einops.layers'", '"einops"'),
])
def test_a_module_the_building_python_lacks_names_what_to_install(
        tmp_path: Path, line: str, requirement: str) -> None:
    from flashbuild.building.progress import failure

    mon = NinjaMonitor()
    for text in ["  Traceback (most recent call last):", '    File "setup.py", line 5',
                 f"  {line}", "  error: subprocess-exited-with-error"]:
        mon.feed(text)
    err = failure("building the setup.py project failed", mon, tmp_path / "build.log")
    assert line in err.what
    assert f"python -m pip install {requirement}" in err.fix


def _tree_without_its_header(root: Path) -> Path:
    """auto-gptq 0.7.1's sdist: exllama's sources, without the .cuh headers beside them."""
    funcs = root / "exllama" / "cuda_func"
    funcs.mkdir(parents=True)
    (funcs / "column_remap.cu").write_text('#include <cuda_runtime.h>\n\n#include '
                                           '"column_remap.cuh"\n', encoding="utf-8")
    (root / "exllama" / "ext.cpp").write_text('#include "cuda_func/column_remap.cuh"\n'
                                              '#include "cusparse.h"\n', encoding="utf-8")
    return root / "exllama"


@pytest.mark.parametrize(("error", "named"), [
    # nvcc's host pass (gcc) on the .cu beside which the header belongs
    ("{d}/cuda_func/column_remap.cu:3:10: fatal error: column_remap.cuh: No such file or "
     "directory", "column_remap.cu:3"),
    # g++ on a unit that includes it through the folder it lives in
    ("{d}/ext.cpp:1:10: fatal error: cuda_func/column_remap.cuh: No such file or directory",
     "ext.cpp:1"),
    # EDG's spelling
    ('{d}/cuda_func/column_remap.cu(3): catastrophic error: cannot open source file '
     '"column_remap.cuh"', "column_remap.cu:3"),
])
def test_a_header_the_tree_lacks_beside_its_own_file_is_named(
        tmp_path: Path, error: str, named: str) -> None:
    from flashbuild.building.progress import failure

    mon = NinjaMonitor()
    mon.feed(error.format(d=_tree_without_its_header(tmp_path)))
    err = failure("building the setup.py project failed", mon, tmp_path / "build.log")
    assert "the tree has no " in err.fix and f"which {named} includes" in err.fix, err.fix
    assert "source distribution" in err.fix and "repository" in err.fix


def test_a_library_header_that_is_missing_keeps_the_compilers_message(tmp_path: Path) -> None:
    from flashbuild.building.progress import failure

    folder = _tree_without_its_header(tmp_path)
    mon = NinjaMonitor()
    mon.feed(f"{folder}/ext.cpp:2:10: fatal error: cusparse.h: No such file or directory")
    err = failure("building the setup.py project failed", mon, tmp_path / "build.log")
    assert "the tree has no" not in err.fix


def _includes(tmp_path: Path, header: str) -> Path:
    """A tree whose src/hashmap.hpp includes `header` in angle brackets at line 3."""
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "hashmap.hpp").write_text(f"#pragma once\n\n#include <{header}>\n",
                                              encoding="utf-8")
    return tree


def test_a_system_librarys_header_names_the_package_that_brings_it(tmp_path: Path) -> None:
    # torchsparse's hashmap_cpu.hpp includes <google/dense_hash_map>, from sparsehash, which
    # the tree does not ship: the compiler's words alone named no library.
    tree = _includes(tmp_path, "google/dense_hash_map")
    fix = _failed_fix(tree, [f"{tree}/src/hashmap.hpp:3:10: fatal error: google/dense_hash_map: "
                             "No such file or directory"], tmp_path / "build.log")
    assert "hashmap.hpp:3 includes <google/dense_hash_map>" in fix, fix
    assert "sparsehash's" in fix and "sudo apt install libsparsehash-dev" in fix
    assert "sparsehash-devel" in fix and "CPATH" in fix


def test_msvcs_spelling_of_a_system_librarys_header_gets_the_same_paragraph(
        tmp_path: Path) -> None:
    # cl.exe's words for the same include (C1083), as a Windows build of the tree prints them.
    tree = _includes(tmp_path, "google/dense_hash_map")
    fix = _failed_fix(tree, [f"{tree}/src/hashmap.hpp(3): fatal error C1083: Cannot open "
                             "include file: 'google/dense_hash_map': No such file or "
                             "directory"], tmp_path / "build.log")
    assert "hashmap.hpp:3 includes <google/dense_hash_map>" in fix, fix
    assert "conda install -c conda-forge sparsehash" in fix


def test_an_unknown_system_header_gets_the_general_words(tmp_path: Path) -> None:
    tree = _includes(tmp_path, "quux/quux.h")
    fix = _failed_fix(tree, [f"{tree}/src/hashmap.hpp:3:10: fatal error: quux/quux.h: No such "
                             "file or directory"], tmp_path / "build.log")
    assert "a library the tree expects installed on the system" in fix and "CPATH" in fix


def test_a_header_the_tree_holds_elsewhere_is_no_system_library(tmp_path: Path) -> None:
    # The tree has the header (a vendored copy the build passes no folder for), or it is the
    # CUDA toolkit's: neither is a package to install.
    tree = _includes(tmp_path, "google/dense_hash_map")
    (tree / "third" / "google").mkdir(parents=True)
    (tree / "third" / "google" / "dense_hash_map").write_text("", encoding="utf-8")
    fix = _failed_fix(tree, [f"{tree}/src/hashmap.hpp:3:10: fatal error: google/dense_hash_map: "
                             "No such file or directory"], tmp_path / "build.log")
    assert "system" not in fix
    cuda = _includes(tmp_path / "cuda", "cusparse.h")
    fix = _failed_fix(cuda, [f"{cuda}/src/hashmap.hpp:3:10: fatal error: cusparse.h: No such "
                             "file or directory"], tmp_path / "build.log")
    assert "system" not in fix


def test_nvccs_own_refusal_is_the_first_error_not_the_script_that_ran_it(
        tmp_path: Path) -> None:
    """Recorded (libKMCUDA 6.2.3 on an H200 machine, nvcc 13.0): FindCUDA's script runs nvcc,
    which refuses the tree's default arch; the script's `CMake Error` after it is the echo."""
    from flashbuild.building.progress import failure

    mon = NinjaMonitor()
    for line in _lines("findcuda_unsupported_arch.log"):
        mon.feed(line)
    err = failure("compiling failed", mon, tmp_path / "build.log")
    assert err.what == "compiling failed: nvcc fatal   : Unsupported gpu architecture 'sm_61'"


@pytest.mark.parametrize("said", [
    # g++ 12 here, C++: `#if CUDA_ARCH < 60` with -DCUDA_ARCH=90a
    "kmcuda.cc:54:5: error: user-defined literal in preprocessor expression",
    # gcc, C
    'kmcuda.c:54:5: error: invalid suffix "a" on integer constant',
])
def test_an_arch_suffix_where_the_tree_wants_a_number_names_the_plain_arch(
        said: str, tmp_path: Path) -> None:
    from flashbuild.arch import parse_arch_spec
    from flashbuild.building.progress import failure

    mon = NinjaMonitor()
    for line in ["[1/4] Building CXX object CMakeFiles/KMCUDA.dir/kmcuda.cc.o", said,
                 "   54 | #if CUDA_ARCH < 60"]:
        mon.feed(line)
    err = failure("compiling failed", mon, tmp_path / "build.log",
                  arch=parse_arch_spec("sm_90a"))
    assert "build for --arch sm_90 instead" in err.fix
    # A target without a suffix: the compiler's own words, nothing invented.
    plain = failure("compiling failed", mon, tmp_path / "build.log",
                    arch=parse_arch_spec("sm_90"))
    assert "--arch" not in plain.fix


def test_a_cub_call_cuda_13s_cccl_refuses_is_named_with_what_the_tree_needs(
        tmp_path: Path) -> None:
    """megablocks 0.10.0 on the GPU machine (nvcc 13.0): `cub::DeviceScan::ExclusiveSum(...,
    stream, debug_synchronous)`, a parameter CCCL 3 removed. EDG shows the call's first line
    only; the argument is read from the file."""
    from packaging.version import Version

    from flashbuild.building.progress import failure

    header = tmp_path / "csrc" / "cumsum.h"
    header.parent.mkdir()
    header.write_text("\n" * 33 + "    CUDA_CALL(cub::DeviceScan::ExclusiveSum(d_temp_storage,\n"
                      "\t\t\t\t\t    stream,\n\t\t\t\t\t    debug_synchronous));\n")
    mon = NinjaMonitor()
    for line in [f'{header}(34): error: no instance of overloaded function '
                 '"cub::DeviceScan::ExclusiveSum" matches the argument list',
                 "            argument types are: (void *, size_t, int *, int *, int, "
                 "cudaStream_t, bool)"]:
        mon.feed(line)
    err = failure("building the setup.py project failed", mon, tmp_path / "b.log",
                  cuda=Version("13.0.88"))
    assert "CCCL 3 (CUDA 13) removed" in err.fix
    assert "drop that argument" in err.fix
    # CUDA 12's CCCL still has the overload: the compiler's words, nothing invented.
    older = failure("building the setup.py project failed", mon, tmp_path / "b.log",
                    cuda=Version("12.8"))
    assert "CCCL" not in older.fix


def test_a_header_a_python_package_provides_names_the_package(tmp_path: Path) -> None:
    """Here (libKMCUDA 6.2.3, a venv without numpy): its CMakeLists asks `import numpy` for
    the include folder, gets nothing, and python.cc stops at numpy's header."""
    from flashbuild.building.progress import failure

    mon = NinjaMonitor()
    mon.feed("/b/src/python.cc:10:10: fatal error: numpy/arrayobject.h: No such file or "
             "directory")
    err = failure("compiling failed", mon, tmp_path / "build.log")
    assert "`python -m pip install numpy`" in err.fix
    other = NinjaMonitor()
    other.feed("/b/src/x.cc:3:10: fatal error: tbb/tbb.h: No such file or directory")
    assert "pip install" not in failure("compiling failed", other, tmp_path / "b.log").fix


def test_a_thc_header_says_torch_removed_it(tmp_path: Path) -> None:
    """Pointnet2.PyTorch before FB125's steps (the line as the build printed it here,
    2026-11-29): THC/THC.h is no missing package, torch 1.11 removed it."""
    from flashbuild.building.progress import failure

    mon = NinjaMonitor()
    mon.feed("/b/src/src/ball_query.cpp:3:10: fatal error: THC/THC.h: No such file or "
             "directory")
    err = failure("building the setup.py project failed", mon, tmp_path / "build.log")
    assert "removed in torch 1.11" in err.fix and "FB125" in err.fix
    other = NinjaMonitor()
    other.feed("/b/src/x.cc:3:10: fatal error: THCustom/x.h: No such file or directory")
    assert "torch 1.11" not in failure("compiling failed", other, tmp_path / "b.log").fix
    # DCNv2 on the H200 once FB125's steps were in: a TH name with no one-for-one successor.
    name = NinjaMonitor()
    name.feed("/b/src/src/cpu/dcn_v2_cpu.cpp:82:9: error: \u2018THFloatBlas_gemm\u2019 was not "
              "declared in this scope")
    assert "removed in torch 1.11" in failure("compiling failed", name, tmp_path / "c.log").fix


def test_a_lerp_of_the_tree_under_cxx20_says_why(tmp_path: Path) -> None:
    """torchmcubes here (torch 2.14.1+cu130, after FB195 raised its CMakeLists to C++20): the
    line as g++ printed it. Another conflict is no C++20 name."""
    from flashbuild.building.progress import failure

    mon = NinjaMonitor()
    mon.feed("/b/src/cxx/helper_math.h:877:44: error: \u2018float lerp(float, float, float)"
             "\u2019 conflicts with a previous declaration")
    err = failure("building the scikit-build-core project failed", mon, tmp_path / "a.log")
    assert "`using std::lerp;`" in err.fix and "--expt-relaxed-constexpr" in err.fix
    other = NinjaMonitor()
    other.feed("/b/src/x.h:3:7: error: 'int blend(int, int)' conflicts with a previous "
               "declaration")
    assert "std::" not in failure("compiling failed", other, tmp_path / "b.log").fix


#: torch-kdtree 1.0's build here (its setup.py runs CMake; CMakeLists.txt:72-73
#: `ExternalProject_Add(eigen URL "https://gitlab.com/…")`), as the log printed it.
_EIGEN_URL = "https://gitlab.com/libeigen/eigen/-/archive/3.4.0/eigen-3.4.0.tar.bz2"
_EXTERNAL_PROJECT_LOG = [
    f"-- Using src='{_EIGEN_URL}'",
    "CMake Error at build/temp.linux-x86_64-cpython-311/eigen-prefix/src/eigen-stamp/"
    "download-eigen.cmake:163 (message):",
    "  Each download failed!",
    "",
    f"    error: downloading '{_EIGEN_URL}' failed",
    "          status_code: 6",
    '          status_string: "Could not resolve hostname"',
]


def test_a_cmake_download_names_the_url_where_the_tree_asks_and_the_local_copy(
        tmp_path: Path) -> None:
    from flashbuild.building.progress import failure

    tree = tmp_path / "src"
    (tree / "build").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(
        "include(ExternalProject)\n\nExternalProject_Add( eigen\n"
        f'  URL "{_EIGEN_URL}"\n)\n', encoding="utf-8")
    (tree / "build" / "copy.cmake").write_text(f"# {_EIGEN_URL}\n", encoding="utf-8")
    mon = NinjaMonitor()
    for line in _EXTERNAL_PROJECT_LOG:
        mon.feed(line)
    err = failure("building the setup.py project failed", mon, tmp_path / "build.log",
                  tree=tree)
    assert err.what == ("the build's CMake tried to download eigen (ExternalProject), and "
                        "builds run offline here")
    assert f"{_EIGEN_URL}, CMakeLists.txt:4" in err.evidence
    assert "replaces the URL at CMakeLists.txt:4 with the archive's path" in err.fix
    # FetchContent's step is `NAME-populate`: CMake's own override is the line to add.
    fetched = NinjaMonitor()
    for line in _EXTERNAL_PROJECT_LOG:
        fetched.feed(line.replace("eigen-prefix/src/eigen-stamp/download-eigen.cmake",
                                  "_deps/eigen-subbuild/eigen-populate-prefix/src/"
                                  "eigen-populate-stamp/download-eigen-populate.cmake"))
    err = failure("compiling failed", fetched, tmp_path / "b.log", tree=tree)
    assert "(FetchContent)" in err.what
    assert 'define = { FETCHCONTENT_SOURCE_DIR_EIGEN = "/path/to/eigen" }' in err.fix
    # A compile error is no download.
    other = NinjaMonitor()
    other.feed("/b/x.cu(3): error: identifier \"y\" is undefined")
    assert "download" not in failure("compiling failed", other, tmp_path / "c.log").what


def test_a_header_from_an_empty_submodule_names_the_submodule(tmp_path: Path) -> None:
    """diff-gaussian-rasterization from an archive of its repository: third_party/glm, a git
    submodule, is an empty folder, and the first error is glm/glm.hpp not found (the line as
    the build printed it here, 2026-11-29)."""
    from flashbuild.building.progress import empty_submodules, failure

    tree = tmp_path / "tree"
    (tree / "third_party" / "glm").mkdir(parents=True)
    (tree / "third_party" / "fmt").mkdir()
    (tree / "third_party" / "fmt" / "core.h").write_text("")
    (tree / ".gitmodules").write_text(
        '[submodule "third_party/glm"]\n\tpath = third_party/glm\n'
        "\turl = https://github.com/g-truc/glm.git\n"
        '[submodule "fmt"]\n\tpath = third_party/fmt\n\turl = https://github.com/fmtlib/fmt\n'
        '[submodule "gone"]\n\turl = x\n\tpath = ../outside\n')
    assert empty_submodules(tree) == [("third_party/glm", "https://github.com/g-truc/glm.git")]
    mon = NinjaMonitor()
    for line in ["[1/5] /usr/local/cuda/bin/nvcc -c forward.cu",
                 f"{tree}/cuda_rasterizer/forward.h:19:10: fatal error: glm/glm.hpp: No such "
                 "file or directory", "compilation terminated.",
                 "ninja: build stopped: subcommand failed."]:
        mon.feed(line)
    err = failure("building the setup.py project failed", mon, tmp_path / "build.log",
                  tree=tree)
    assert "glm/glm.hpp: No such file" in err.what
    assert "submodule third_party/glm (https://github.com/g-truc/glm.git) is empty" in err.fix
    assert "git submodule update --init --recursive" in err.fix
    # No .gitmodules: the compiler's own message stays.
    (tree / ".gitmodules").unlink()
    assert "submodule" not in failure("x", mon, tmp_path / "build.log", tree=tree).fix


def _submodule_tree(tmp_path: Path) -> Path:
    """A tree with two empty git submodules: third_party/glm and csrc/cutlass."""
    tree = tmp_path / "tree"
    (tree / "third_party" / "glm").mkdir(parents=True)
    (tree / "csrc" / "cutlass").mkdir(parents=True)
    (tree / ".gitmodules").write_text(
        '[submodule "glm"]\n\tpath = third_party/glm\n\turl = https://github.com/g-truc/glm\n'
        '[submodule "cutlass"]\n\tpath = csrc/cutlass\n'
        "\turl = https://github.com/NVIDIA/cutlass.git\n")
    return tree


def _failed_fix(tree: Path, lines: list[str], log: Path) -> str:
    mon = NinjaMonitor()
    for line in lines:
        mon.feed(line)
    return failure("compiling failed", mon, log, tree=tree).fix


def test_only_a_submodule_the_missing_header_could_come_from_is_blamed(tmp_path: Path) -> None:
    """An empty submodule is named only when the missing header could be one of its files: by
    its name (glm/glm.hpp and third_party/glm) or an include folder of the failed command that
    points into it (cute/tensor.hpp through -I csrc/cutlass/include)."""
    tree = _submodule_tree(tmp_path)
    log = tmp_path / "build.log"
    glm = _failed_fix(tree, [f"{tree}/k.cu:3:10: fatal error: glm/glm.hpp: No such file or "
                             "directory"], log)
    assert "submodule third_party/glm (https://github.com/g-truc/glm) is empty" in glm
    assert "cutlass" not in glm
    # A header neither submodule could hold: the empty submodules are not the failure.
    tbb = _failed_fix(tree, [f"{tree}/k.cu:3:10: fatal error: tbb/tbb.h: No such file or "
                             "directory"], log)
    assert "submodule" not in tbb
    # cute/ is cutlass's, which only the command's include folder tells.
    cute = [f"{tree}/k.cu:3:10: fatal error: cute/tensor.hpp: No such file or directory"]
    assert "submodule" not in _failed_fix(tree, cute, log)
    for flags in (f"-I{tree}/csrc/cutlass/include", "-I csrc/cutlass/include",
                  '-isystem "csrc/cutlass/include"'):
        fix = _failed_fix(tree, ["FAILED: k.o", f"/usr/local/cuda/bin/nvcc {flags} -c k.cu "
                                 "-o k.o", *cute], log)
        assert "submodule csrc/cutlass (https://github.com/NVIDIA/cutlass.git) is empty" in fix
        assert "glm" not in fix
    # An include folder elsewhere does not tie it to the submodule.
    assert "submodule" not in _failed_fix(
        tree, ["FAILED: k.o", "nvcc -I/opt/cutlass/include -c k.cu", *cute], log)
    # MSVC's spelling of the same failure.
    msvc = _failed_fix(tree, [f"{tree}\\k.cu(3): fatal error C1083: Cannot open include file: "
                              "'glm/glm.hpp': No such file or directory"], log)
    assert "submodule third_party/glm" in msvc


def test_a_submodule_folder_that_cannot_be_listed_is_not_called_empty(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.building.progress import empty_submodules

    tree = _submodule_tree(tmp_path)
    listing = Path.iterdir

    def iterdir(self: Path) -> Iterator[Path]:
        if self.name == "glm":
            raise PermissionError(13, "Permission denied", str(self))
        return listing(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    assert empty_submodules(tree) == [("csrc/cutlass", "https://github.com/NVIDIA/cutlass.git")]
