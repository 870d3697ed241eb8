"""FB154: kernels whose body for the target's device pass is only a trap (or nothing), read
statically on a fixture tree written for these tests (tests/fixtures/scan/placeholders)."""

from __future__ import annotations

import shutil
from pathlib import Path

from flashbuild.scanning.findings import Severity, make_target
from flashbuild.scanning.scan import scan_tree

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "tests" / "fixtures" / "scan" / "placeholders"


def _fb154(root: Path, arch: str) -> list[str]:
    result = scan_tree(root, make_target("linux", arch))
    return [f"{f.severity.value} {f.path}:{f.line}" for f in result.findings if f.rule == "FB154"]


def test_sm120_flags_the_kernels_that_only_trap() -> None:
    # hopper_only_kernel: printf + __trap() under `if (threadIdx.x == 0)`; launcher_kernel:
    # its whole body calls Impl::run, whose sm_120 branch is a macro of printf + __trap().
    # checked_kernel (a conditional trap inside real work) and wide_kernel (`>= 900`: real
    # work for sm_120) are not reported, and they run, so there is no error.
    assert _fb154(TREE, "sm120") == ["warning src/attention.cuh:9",
                                     "warning src/attention.cuh:37"]


def test_sm90a_has_no_placeholder() -> None:
    assert _fb154(TREE, "sm_90a") == []


def test_the_finding_says_what_the_kernel_is_written_for() -> None:
    result = scan_tree(TREE, make_target("linux", "sm120"))
    first, via = (f for f in result.findings if f.rule == "FB154")
    assert "`hopper_only_kernel` only traps on sm_120" in first.message
    assert "gated to sm_90" in first.message
    assert "keeps `printf(" in first.evidence
    assert "through `run`" in via.message
    assert "--arch sm_90a" in first.fix.manual
    assert "do not widen" in first.fix.manual


def test_every_kernel_a_placeholder_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    shutil.copy(TREE / "src" / "attention.cuh", root / "src" / "attention.cu")
    result = scan_tree(root, make_target("linux", "sm120"))
    errors = [f for f in result.findings if f.rule == "FB154" and
              f.severity is Severity.ERROR]
    assert [e.message for e in errors] == [
        "kernels for sm_120: none - every kernel is gated to sm_90 and traps on sm_120"]
    assert "--arch sm_90a" in errors[0].fix.manual
    assert _fb154(root, "sm_90a") == []


def test_an_empty_body_for_the_target_is_reported(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "k.cu").write_text(
        "__global__ void k(float* o) {\n"
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n"
        "  o[threadIdx.x] = 1.0f;\n"
        "#endif\n"
        "}\n", encoding="utf-8")
    result = scan_tree(root, make_target("linux", "sm80"))
    found = [f for f in result.findings if f.rule == "FB154"]
    assert [f.severity for f in found] == [Severity.WARNING, Severity.ERROR]
    assert "is empty on sm_80" in found[0].message
    assert "does nothing" in found[1].message
    assert _fb154(root, "sm120") == []


def test_undecided_gates_are_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "k.cu").write_text(
        "__global__ void k(float* o) {\n"
        "#if PROJECT_OPTION && __CUDA_ARCH__ == 900\n"
        "  o[threadIdx.x] = 1.0f;\n"
        "#else\n"
        "  __trap();\n"
        "#endif\n"
        "}\n", encoding="utf-8")
    assert _fb154(root, "sm120") == []


def test_runtime_major_check_is_not_widened_into_placeholders(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    shutil.copy(TREE / "src" / "attention.cuh", root / "src" / "attention.cu")
    (root / "src" / "api.cpp").write_text(
        "bool is_sm90(const cudaDeviceProp& prop) {\n"
        "  return prop.major == 9 && prop.minor == 0;\n"
        "}\n", encoding="utf-8")
    result = scan_tree(root, make_target("linux", "sm120"))
    (check,) = (f for f in result.findings if f.rule == "FB153")
    assert "test `major >= 9`" not in check.fix.manual
    assert check.fix.manual.startswith("keep the check: widening it (`major >= 9`) routes "
                                       "sm_120 into kernels that trap")
    assert "`hopper_only_kernel`" in check.evidence
