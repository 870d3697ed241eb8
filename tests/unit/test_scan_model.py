"""The scan with a tree model (issue 18 item 2): what the configured build compiles decides
which files are checked, findings it decides rest on `build`, run-time-compiled kernels are
said to be so, and the preprocessor gets each unit's real flags. The pipeline's fallback
(pipeline/scan.py) says in one line why the build could not be asked. No tool runs here: the
models are made by hand, introspection is replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashbuild.scanning import truth
from flashbuild.scanning.findings import ScanOptions, ScanResult, Truth, make_target
from flashbuild.scanning.scan import scan_tree
from flashbuild.source.setup_record import EnvRead, NetworkCall, RaisedError
from flashbuild.source.treemodel import (
    BuildTarget,
    Introspection,
    JitSite,
    SourceUnit,
    TreeModel,
    model_from_json,
    model_to_json,
)

UMMA = '__global__ void {name}() {{\n  asm volatile("tcgen05.fence::before_thread_sync;");\n}}\n'
GEN = "-gencode=arch=compute_120,code=sm_120"
LISTS = ("cmake_minimum_required(VERSION 3.24)\nproject(t LANGUAGES CXX CUDA)\n"
         "add_library(main SHARED src/main.cu)\n"
         'if(EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/with_sm100.txt")\n'
         "  add_library(sm100 SHARED src/umma_sm100.cu)\nendif()\n")


@pytest.fixture(autouse=True)
def _no_toolkit(monkeypatch: pytest.MonkeyPatch) -> None:
    """No preprocessor or compiler runs in these tests."""
    monkeypatch.setattr(truth, "find_toolchain", lambda: None)


def _tree(tmp_path: Path) -> Path:
    """A CMake tree whose sm100 library exists only when a file is there (it is not): the
    text does not say whether this configuration builds it, the configure does."""
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text(LISTS, encoding="utf-8")
    (root / "src" / "main.cu").write_text('#include "common.cuh"\n', encoding="utf-8")
    (root / "src" / "common.cuh").write_text(UMMA.format(name="common"), encoding="utf-8")
    (root / "src" / "umma_sm100.cu").write_text(UMMA.format(name="umma"), encoding="utf-8")
    return root


def _unit(path: str) -> SourceUnit:
    return SourceUnit(path=path, language="CUDA", includes=("src", "/opt/cuda/include"),
                      defines=("MAIN_FAST=1",), flags=("-O3", "--expt-relaxed-constexpr"),
                      arch_flags=(GEN,), origin="CUDA_ARCHITECTURES of main")


MODEL = TreeModel(system="cmake", via="CMake File API (codemodel-v2, cache-v2)", targets=(
    BuildTarget(name="main", kind="plugin", artifact="libmain.so",
                sources=(_unit("src/main.cu"),), defined_at="CMakeLists.txt:3 (add_library)"),))


def _scan(root: Path, model: TreeModel | None) -> ScanResult:
    return scan_tree(root, make_target("linux", "sm120"), ScanOptions(jobs=1), model=model)


def test_the_models_sources_decide_what_is_checked(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    static = _scan(root, None)
    assert {f.path for f in static.findings if f.rule == "FB160"} == {
        "src/common.cuh", "src/umma_sm100.cu"}
    result = _scan(root, MODEL)
    (fb160,) = [f for f in result.findings if f.rule == "FB160"]
    assert fb160.path == "src/common.cuh" and fb160.truth is Truth.BUILD
    assert fb160.evidence.endswith("; included from src/main.cu:1 (CMake File API "
                                   "(codemodel-v2, cache-v2))")
    # The sm100 library is not in this configuration: a note, not a finding.
    notes = {s.path: s.reason for s in result.skipped}
    assert notes["src"].startswith("1 file: C/C++ not compiled by this configuration "
                                   "(CMake File API")
    assert result.truth.startswith("build (CMake File API, 1 target);")
    assert result.setup is None


def test_run_time_compiled_kernels_are_said_to_be(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    model = TreeModel(system="setuptools", via="setup.py record mode", targets=(),
                      jit=(JitSite(where="pkg/jit.py:12", how="load_inline"),))
    result = _scan(root, model)
    assert not [f for f in result.findings if f.rule == "FB160"]
    reason = {s.path: s.reason for s in result.skipped}["src"]
    assert "compiled at run time, for the GPU it runs on" in reason
    assert "pkg/jit.py:12 load_inline" in reason
    assert "run-time compile site" in result.truth


def test_a_build_that_compiles_nothing_names_the_switches_it_read(tmp_path: Path) -> None:
    model = TreeModel(system="setuptools", via="setup.py record mode", targets=(),
                      env_reads=(EnvRead("PROJECT_CUDA_EXT", "setup.py:8"),))
    result = _scan(_tree(tmp_path), model)
    assert not [f for f in result.findings if f.rule == "FB160"]
    assert "nothing is compiled as run, and the build reads PROJECT_CUDA_EXT (setup.py:8)" \
        in result.truth


def test_the_preprocessor_gets_each_units_real_flags(tmp_path: Path) -> None:
    from flashbuild.source.reach import from_model

    root = _tree(tmp_path)
    files = ["src/main.cu", "src/common.cuh", "src/umma_sm100.cu"]
    reach = from_model(MODEL, files, lambda rel: (root / rel).read_text(encoding="utf-8"))
    assert reach.reachable.keys() == {"src/main.cu", "src/common.cuh"}
    units, capped = truth.units_for(reach, {"src/common.cuh"}, set())
    assert capped == set()
    unit = units["src/main.cu"]
    assert unit.include_dirs == ("src", "/opt/cuda/include")
    assert unit.flags == ("-DMAIN_FAST=1", "-O3", "--expt-relaxed-constexpr", GEN)


def test_a_stored_model_reads_back_equal() -> None:
    model = TreeModel(system="setuptools", via="setup.py record mode", targets=MODEL.targets,
                      env_reads=(EnvRead("MY_SWITCH", "setup.py:4"),),
                      network=(NetworkCall("getaddrinfo", "example.invalid", "setup.py:7"),),
                      exception=RaisedError("RuntimeError", "no", "setup.py:9"),
                      jit=(JitSite("a.py:1", "nvcc", ("-arch=sm_90a",)),), seconds=1.25)
    assert model_from_json(json.loads(json.dumps(model_to_json(model)))) == model
    with pytest.raises(ValueError, match="expected"):
        model_from_json({**model_to_json(model), "targets": "nope"})


# --- the pipeline: when the build cannot be asked ------------------------------------------

def _pipeline(monkeypatch: pytest.MonkeyPatch, outcome: Introspection | None
              ) -> tuple[list[str], list[str]]:
    """Replace introspection with `outcome`; return (lines said, introspections run)."""
    from flashbuild.pipeline import introspect

    ran: list[str] = []

    def fake(recipe: object, tree: Path, spec: object, **_kw: object) -> Introspection:
        ran.append(str(tree))
        assert outcome is not None
        return outcome

    monkeypatch.setattr(introspect, "introspect", fake)
    return [], ran


@pytest.mark.parametrize(("outcome", "reason"), [
    (Introspection(model=None, fallback="the CMake configure failed (CMakeLists.txt:5: no)"),
     "the CMake configure failed (CMakeLists.txt:5: no)"),
    (Introspection(model=TreeModel(system="setuptools", via="setup.py record mode", targets=(),
                                   exception=RaisedError("RuntimeError", "bad arch",
                                                         "setup.py:10"))),
     "setup.py raised RuntimeError: bad arch (setup.py:10) when run as the build runs it"),
    (Introspection(model=TreeModel(
        system="setuptools", via="setup.py record mode", targets=(),
        network=(NetworkCall("getaddrinfo", "example.invalid", "setup.py:7"),),
        exception=RaisedError("OSError", "refused", "setup.py:7"))),
     "setup.py reached for the network (getaddrinfo example.invalid at setup.py:7)"),
])
def test_a_failed_introspection_falls_back_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: Introspection,
        reason: str) -> None:
    from flashbuild.pipeline.scan import scan_with_build

    root = _tree(tmp_path)
    said, ran = _pipeline(monkeypatch, outcome)
    result = scan_with_build(root, make_target("linux", "sm120"), ScanOptions(jobs=1),
                             say=said.append)
    assert len(ran) == 1
    assert len(said) == 1 and said[0].startswith("static reading: introspection could not run")
    assert reason in said[0] and reason in result.truth
    static = _scan(root, None)
    assert [(f.rule, f.path, f.severity, f.truth) for f in result.findings] == [
        (f.rule, f.path, f.severity, f.truth) for f in static.findings]


@pytest.mark.parametrize(("platform", "files", "reason"), [
    ("windows", True, "introspection configures for this machine (linux); the target is "
     "windows"),
    ("linux", False, "no build files: no CMakeLists.txt and no setup.py at the top"),
])
def test_what_cannot_be_introspected_is_not_tried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, platform: str, files: bool,
        reason: str) -> None:
    from flashbuild import platforms
    from flashbuild.pipeline.scan import scan_with_build

    if platforms.current().name != "linux":
        pytest.skip("the reasons name this machine's platform")
    root = _tree(tmp_path)
    if not files:
        (root / "CMakeLists.txt").unlink()
    said, ran = _pipeline(monkeypatch, None)
    result = scan_with_build(root, make_target(platform, "sm120"), ScanOptions(jobs=1),
                             say=said.append)
    assert ran == []
    assert len(said) == 1 and reason in said[0] and reason in result.truth


def test_static_asks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.pipeline.scan import scan_with_build

    said, ran = _pipeline(monkeypatch, None)
    result = scan_with_build(_tree(tmp_path), make_target("linux", "sm120"),
                             ScanOptions(jobs=1, static=True), say=said.append)
    assert (ran, said) == ([], [])
    assert result.truth.startswith("static reading (--static)")


def test_a_setup_py_that_went_on_without_the_network_is_still_the_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.pipeline.scan import scan_with_build

    model = TreeModel(system="setuptools", via="setup.py record mode", targets=MODEL.targets,
                      network=(NetworkCall("getaddrinfo", "example.invalid", "setup.py:7"),))
    said, _ran = _pipeline(monkeypatch, Introspection(model=model))
    result = scan_with_build(_tree(tmp_path), make_target("linux", "sm120"),
                             ScanOptions(jobs=1), say=said.append)
    assert said == ["introspection: setup.py record mode, 1 target (0.0 s)"]
    assert result.truth.startswith("build (setup.py record, 1 extension)")


def test_the_scan_says_it_is_introspecting_before_it_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 28: the first scan of a tree sat silent through the configure.
    from flashbuild.pipeline.scan import scan_with_build

    told: list[str] = []
    said, ran = _pipeline(monkeypatch, Introspection(model=MODEL))
    scan_with_build(_tree(tmp_path), make_target("linux", "sm120"), ScanOptions(jobs=1),
                    say=said.append, stage=told.append)
    assert len(ran) == 1
    assert told[0] == "introspecting the build (a CMake configure)"
    assert told[1].startswith("reading ")
