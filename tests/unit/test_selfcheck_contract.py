"""The GPU self-check's JSON contract: recorded `python -m flashkern.selfcheck --json` reports
(hand-written in its schema) replayed through runtime.py's parser and into verify's verdicts,
and the real selfcheck module's own serialiser read back by the same parser."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from flashbuild.installing.manifest import Artifact, HostCompiler, Manifest, Toolkit
from flashbuild.platforms import get
from flashbuild.proc import Completed
from flashbuild.verifying import runtime
from flashbuild.verifying.verify import Status, verify_install
from tests.fakes import ReplayRunner

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
F = ROOT / "tests" / "fixtures" / "selfcheck"
V = ROOT / "tests" / "fixtures" / "verify"
SELFCHECK_PY = ROOT / "csrc" / "python" / "flashkern" / "selfcheck.py"
ARGV = ("python", "-m", "flashkern.selfcheck", "--json")


def replay(stdout: str, code: int, *, stderr: str = "", bench: bool = False) -> ReplayRunner:
    runner = ReplayRunner()
    argv = (*ARGV, "--bench") if bench else ARGV
    runner.responses[argv] = Completed(argv, code, stdout, stderr)
    return runner


def selfcheck(runner: ReplayRunner, *, bench: bool = False) -> runtime.SelfCheckResult:
    return runtime.run_selfcheck("flashkern", runner=runner, bench=bench, python="python",
                                 env={"PATH": "/usr/bin"})


def fixture(name: str) -> str:
    return (F / name).read_text()


# ---- recorded reports through the parser ---------------------------------------------------


def test_each_failed_check_is_a_failure_with_its_evidence() -> None:
    result = selfcheck(replay(fixture("sm120_traits_missing.json"), 1))
    assert not result.ok
    assert result.report is not None and result.report.capability == "12.0"
    findings = runtime.selfcheck_findings(result, "flashkern")
    fails = {f.subject: f for f in findings if f.status == "fail"}
    assert list(fails) == [
        "flashkern kernel_smem_bytes <= opt-in limit [-]",
        "flashkern rms_norm 7x1000 misaligned [bfloat16]",
        "flashkern fused_add_rms_norm_fp8 16x8192 [float16]",
        "flashkern softmax 2x65539 [bfloat16]",
    ]
    smem = fails["flashkern kernel_smem_bytes <= opt-in limit [-]"]
    assert smem.summary == "kernel_smem_bytes <= opt-in limit failed"
    assert "163840 B" in smem.evidence and "101376 B" in smem.evidence
    assert "shared memory" in smem.fix and "--arch sm120" in smem.fix
    rms = fails["flashkern rms_norm 7x1000 misaligned [bfloat16]"]
    assert rms.summary == "rms_norm 7x1000 misaligned (bfloat16) differs from torch"
    assert "max |got - want| 0.516, allowed 0.064 + 0.064·|want|" in rms.evidence
    assert "first at index 0" in rms.evidence
    assert "NVIDIA RTX PRO 6000" in rms.evidence and "capability 12.0" in rms.evidence
    fp8 = fails["flashkern fused_add_rms_norm_fp8 16x8192 [float16]"]
    assert "n/a (not finite)" in fp8.evidence and "got nan" in fp8.evidence
    launch = fails["flashkern softmax 2x65539 [bfloat16]"]
    assert launch.summary == "softmax 2x65539 (bfloat16) failed"
    assert "invalid argument" in launch.evidence
    assert [f.summary for f in findings if f.status == "ok"] == [
        "5 of 9 kernel checks passed on NVIDIA RTX PRO 6000 Blackwell Workstation Edition "
        "(capability 12.0)"]
    (skip,) = [f for f in findings if f.status == "skip"]
    assert skip.subject == "flashkern attention_forward" and "no attention plugin" in skip.summary


def test_verify_turns_the_report_into_failed_checks(tmp_path: Path) -> None:
    pkg = tmp_path / "site" / "flashkern"
    pkg.mkdir(parents=True)
    shutil.copy(V / "sass_ptx_sm120.o", pkg / "sass_ptx_sm120.o")
    Manifest(flashbuild="0.1.0", recipe="csrc", platform="linux", archs=("sm_120",),
             toolkit=Toolkit(root="/cuda", version="13.0"),
             host_compiler=HostCompiler(kind="gcc", version="12", path="/usr/bin/g++"),
             artifacts=(Artifact(path="sass_ptx_sm120.o", kind="module"),)).write(pkg)
    runner = replay(fixture("sm120_traits_missing.json"), 1)
    runner.add("ldconfig", "-p", out=(V / "ldconfig-p.txt").read_text())
    report = verify_install(manifest_path=pkg, runner=runner, platform=get("linux"),
                            env={"PATH": "/usr/bin"}, import_module=False, run_gpu=True,
                            python="python")
    assert ARGV in [c[:4] for c in runner.calls]
    assert not report.ok
    gpu = [c for c in report.checks if c.area == "gpu"]
    assert [c.subject for c in gpu if c.status is Status.FAIL] == [
        "flashkern kernel_smem_bytes <= opt-in limit [-]",
        "flashkern rms_norm 7x1000 misaligned [bfloat16]",
        "flashkern fused_add_rms_norm_fp8 16x8192 [float16]",
        "flashkern softmax 2x65539 [bfloat16]",
    ]
    assert all(c.evidence and c.fix for c in gpu if c.status is Status.FAIL)
    assert [c.status for c in gpu if c.status is not Status.FAIL] == [Status.OK, Status.SKIP]
    doc = report.to_json()
    assert json.dumps(doc)  # the verify report stays serialisable


def test_pass_with_bench_table_and_an_untimed_kernel() -> None:
    result = selfcheck(replay(fixture("h100_pass_bench.json"), 0, bench=True), bench=True)
    assert result.ok
    findings = runtime.selfcheck_findings(result, "flashkern")
    assert [(f.area, f.status) for f in findings] == [("gpu", "ok"), ("bench", "ok"),
                                                     ("bench", "warn")]
    assert findings[0].summary == ("4 of 4 kernel checks passed on NVIDIA H100 80GB HBM3 "
                                   "(capability 9.0)")
    table = findings[1].summary.splitlines()
    assert table[0].startswith("bandwidth against a device-to-device copy")
    assert any(line.split()[0] == "residual_add" and "3.09 TB/s" in line and "97%" in line
               for line in table)
    assert findings[2].summary == "1 kernel(s) could not be timed"
    assert "rope: RuntimeError: CUDA error: unspecified launch failure" in findings[2].evidence


@pytest.mark.parametrize(("required", "status"), [(False, "warn"), (True, "fail")])
def test_no_cuda_device_is_a_warning_unless_asked_for(required: bool, status: str) -> None:
    result = selfcheck(replay(fixture("no_cuda.json"), runtime.SELFCHECK_UNAVAILABLE))
    assert not result.ok and result.report is not None
    (finding,) = runtime.selfcheck_findings(result, "flashkern", required=required)
    assert finding.status == status
    assert finding.summary == "the kernel self-check cannot run here"
    assert "CPU-only build" in finding.evidence and "--no-gpu" in finding.fix


def test_a_crash_before_the_report_is_a_failure_with_the_output() -> None:
    stderr = "Traceback (most recent call last):\nImportError: libcudart.so.13: cannot open"
    result = selfcheck(replay("", -11, stderr=stderr))
    assert not result.ok and result.report is None
    (finding,) = runtime.selfcheck_findings(result, "flashkern")
    assert finding.status == "fail" and finding.summary == "kernel self-check failed"
    assert "exit status -11" in finding.evidence
    assert "printed no JSON report" in finding.evidence and "libcudart.so.13" in finding.evidence
    assert "python -m flashkern.selfcheck" in finding.fix


def test_stray_output_before_the_one_line_report_is_ignored() -> None:
    doc = json.dumps(json.loads(fixture("h100_pass_bench.json")))
    result = selfcheck(replay(f"loading plugin...\n{{not json\n{doc}\n", 0))
    assert result.ok and result.report is not None and len(result.report.checks) == 4


def test_a_passing_report_from_a_child_that_exits_nonzero_is_not_a_pass() -> None:
    result = selfcheck(replay(fixture("h100_pass_bench.json"), 134))
    assert not result.ok
    statuses = [(f.status, f.summary) for f in runtime.selfcheck_findings(result, "flashkern")]
    assert statuses[0] == ("fail", "kernel self-check did not finish cleanly on NVIDIA H100 80GB "
                                   "HBM3 (capability 9.0)")


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.update(schema_version=2), "schema_version 2"),
    (lambda d: d["checks"][0].pop("ok"), "missing `ok`"),
    (lambda d: d["checks"][1].update(max_abs_err="0.5"), "`max_abs_err` must be float"),
    (lambda d: d.update(checks={}), "`checks` must be a list"),
])
def test_a_report_off_its_schema_fails_with_the_reason(mutate: object, message: str) -> None:
    doc = json.loads(fixture("sm120_traits_missing.json"))
    assert callable(mutate)
    mutate(doc)
    result = selfcheck(replay(json.dumps(doc), 1))
    assert result.report is None and message in result.parse_error
    (finding,) = runtime.selfcheck_findings(result, "flashkern")
    assert finding.status == "fail" and message in finding.evidence


def test_a_sticky_cuda_error_lists_the_first_failures_and_counts_the_rest() -> None:
    checks = [{"name": f"residual_add n={n}", "dtype": "float32", "ok": False,
               "max_abs_err": None, "tol": None,
               "detail": "RuntimeError: CUDA error: an illegal memory access was encountered"}
              for n in range(runtime.MAX_LISTED_FAILURES + 7)]
    doc = {"schema_version": 1, "device": "NVIDIA H100 80GB HBM3", "capability": "9.0",
           "checks": checks, "bench": None, "ok": False}
    result = selfcheck(replay(json.dumps(doc), 1))
    findings = runtime.selfcheck_findings(result, "flashkern")
    fails = [f for f in findings if f.status == "fail"]
    assert len(fails) == runtime.MAX_LISTED_FAILURES + 2  # listed, "7 more", "0 of 27 passed"
    assert fails[runtime.MAX_LISTED_FAILURES].summary == "7 more kernel check(s) failed"
    assert fails[-1].summary.startswith("0 of 27 kernel checks passed")


def test_a_custom_command_without_json_is_judged_by_its_exit_status() -> None:
    runner = ReplayRunner()
    runner.add("python", "-m", "mykern.check", out="all good")
    result = runtime.run_selfcheck("mykern", runner=runner, python="python",
                                   command=("{python}", "-m", "{package}.check"), env={})
    assert result.ok and result.report is None
    (finding,) = runtime.selfcheck_findings(result, "mykern")
    assert (finding.status, finding.summary) == ("ok", "kernel self-check passed")


# ---- the real selfcheck module's side of the contract --------------------------------------


@pytest.fixture(scope="module")
def selfcheck_module() -> ModuleType:
    """flashkern/selfcheck.py loaded by path: it imports neither torch nor the extension at
    import time, so its serialiser runs here without a GPU or a build."""
    spec = importlib.util.spec_from_file_location("flashkern_selfcheck_under_test",
                                                  SELFCHECK_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_modules_own_json_reads_back(selfcheck_module: ModuleType) -> None:
    sc = selfcheck_module
    report = sc.Report(
        device="NVIDIA H100 80GB HBM3", capability="9.0",
        checks=(sc.CheckResult("rms_norm 7x1000 misaligned", "bfloat16", False, 0.5, 0.064,
                               0.064, "6996 of 7000 values outside tolerance"),
                sc.CheckResult("softmax 2x65539", "float16", False, None, 2e-4, 8e-3,
                               "got nan"),
                sc.CheckResult("sm_version", sc.NO_DTYPE, True, None, None, None, "90")),
        skipped=(sc.Skipped("attention_forward", "no plugin"),),
        bench=(sc.BenchRow("residual_add", 3 << 26, 0.06, 3.3, 0.97),
               sc.BenchRow("rope", 1 << 26, None, None, None, "RuntimeError: boom")))
    assert report.exit_code == sc.EXIT_FAILED
    text = report.dumps()
    assert "\n" not in text and "NaN" not in text
    parsed = runtime.parse_selfcheck(text)
    assert parsed == runtime.SelfCheckReport(
        device="NVIDIA H100 80GB HBM3", capability="9.0",
        checks=(runtime.KernelCheck("rms_norm 7x1000 misaligned", "bfloat16", False, 0.5, 0.064,
                                    0.064, "6996 of 7000 values outside tolerance"),
                runtime.KernelCheck("softmax 2x65539", "float16", False, None, 2e-4, 8e-3,
                                    "got nan"),
                runtime.KernelCheck("sm_version", "-", True, None, None, None, "90")),
        bench=(runtime.BenchRow("residual_add", 3.3, 0.97),
               runtime.BenchRow("rope", None, None, "RuntimeError: boom")),
        ok=False, skipped=(("attention_forward", "no plugin"),), error=None)
    assert "FAIL  rms_norm 7x1000 misaligned" in report.table()


def test_the_module_exits_2_with_a_report_when_it_cannot_run(
        selfcheck_module: ModuleType, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    sc = selfcheck_module
    monkeypatch.setattr(sc, "_unavailable", lambda: "torch is not importable (test)")
    assert sc.main(["--json"]) == runtime.SELFCHECK_UNAVAILABLE
    parsed = runtime.parse_selfcheck(capsys.readouterr().out)
    assert parsed.error == "torch is not importable (test)" and parsed.checks == ()
    assert sc.main([]) == runtime.SELFCHECK_UNAVAILABLE
    out = capsys.readouterr()
    assert out.out == "" and "cannot run: torch is not importable (test)" in out.err


def test_a_failed_part_keeps_its_own_error_and_tolerance(selfcheck_module: ModuleType) -> None:
    sc = selfcheck_module
    close = sc._Measure(True, 1e-3, 1e-2, 1e-2)
    far = sc._Measure(False, 0.5, 0.064, 0.064, "bad")
    fact = sc._Measure(True, None, None, None)
    both = close & far & fact
    assert (both.ok, both.max_abs_err, both.tol, both.detail) == (False, 0.5, 0.064, "bad")
    nonfinite = close & sc._Measure(False, None, 2e-3, 2e-3, "got nan")
    assert nonfinite.max_abs_err is None and nonfinite.tol == 2e-3
