"""doctor's orchestration and CLI edge: parallel probes, failures as verdicts, exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from flashbuild.arch import Arch, parse_arch_spec
from flashbuild.cli import app
from flashbuild.detect import doctor
from flashbuild.detect.pyenv import PythonEnv
from flashbuild.platforms.linux import LinuxPlatform
from flashbuild.proc import Completed
from tests.fakes import ReplayRunner

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flashbuild.detect.rules import Findings

REAL_COLLECT = doctor.collect
FIX = Path(__file__).resolve().parent.parent / "fixtures" / "detect"


class NoNvml:
    def nvmlInit(self) -> None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")


class Machine(LinuxPlatform):
    def __init__(self, roots: list[str]) -> None:
        self.roots = roots

    def standard_toolkit_roots(self, env: Mapping[str, str]) -> list[str]:
        return self.roots


def fake_machine(tmp_path: Path, smi: str | None) -> tuple[ReplayRunner, Machine, PythonEnv]:
    root = tmp_path / "cuda-13.0"
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "bin" / "nvcc").write_text("")
    (root / "bin" / "nvcc.profile").write_text("")
    (root / "include" / "crt").mkdir(parents=True, exist_ok=True)
    (root / "include" / "cuda_runtime.h").write_text("")
    (root / "include" / "crt" / "host_config.h").write_text(
        (FIX / "host_config_13.0.h").read_text())

    def nvcc(argv: tuple[str, ...]) -> Completed:
        name = "nvcc-version-13.0.txt" if argv[1] == "--version" else \
            "nvcc-list-gpu-code-13.0.txt"
        return Completed(argv, 0, (FIX / name).read_text(), "")

    responses: dict[tuple[str, ...], object] = {
        ("nvcc",): nvcc, ("g++", "--version"): "g++ (Debian 12.2.0-14) 12.2.0\n",
        ("ninja", "--version"): "1.13.2\n", ("cmake", "--version"): "cmake version 4.4.4\n"}
    if smi:
        from flashbuild.detect.gpu import SMI_QUERY

        responses[SMI_QUERY] = (FIX / f"nvidia-smi-query-{smi}.csv").read_text()
        responses[("nvidia-smi",)] = (FIX / f"nvidia-smi-{smi}.txt").read_text()
    runner = ReplayRunner(responses=responses)  # type: ignore[arg-type]
    py = PythonEnv("python", "3.11.7", "cpython", "cp311", ".so", None, (tmp_path / "site",))
    return runner, Machine([str(tmp_path / "cuda-*")]), py


def collect(tmp_path: Path, smi: str | None, **kw: object) -> Findings:
    runner, machine, py = fake_machine(tmp_path, smi)
    return REAL_COLLECT({}, runner, machine, python=py, nvml=NoNvml(), build_dir=tmp_path,
                          cores=2, memory=(20 * 2**30, 24 * 2**30), **kw)  # type: ignore[arg-type]


def test_collect_runs_every_probe(tmp_path: Path) -> None:
    f = collect(tmp_path, "h200")
    assert f.probe_failures == ()
    assert f.toolkit is not None and str(f.toolkit.version) == "13.0.88"
    assert f.gpus is not None and f.gpus.gpus[0].name == "NVIDIA H200"
    assert f.targets == (Arch(9, 0),) and f.target_origin == "gpus"
    assert f.compilers is not None and f.compilers.gxx is not None
    assert f.host is not None and f.host.jobs_heavy == 2


def test_arch_overrides_the_gpus(tmp_path: Path) -> None:
    f = collect(tmp_path, "h200", spec=parse_arch_spec("sm_120a"))
    assert [a.sm for a in f.targets] == ["sm_120a"] and f.target_origin == "--arch"


def test_native_without_gpu_means_no_target(tmp_path: Path) -> None:
    f = collect(tmp_path, None, spec=parse_arch_spec("native"))
    assert f.targets == () and f.target_origin == "none"


def test_a_probe_that_raises_becomes_a_failure(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("NVML segfaulted politely")

    monkeypatch.setattr(doctor, "probe_gpus", boom)
    f = collect(tmp_path, None)
    assert f.gpus is None and f.probe_failures == (("gpus", "RuntimeError: NVML segfaulted "
                                                             "politely"),)


def test_a_probe_over_budget_is_reported(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    release = threading.Event()

    def slow(*args: object, **kwargs: object) -> None:
        release.wait(5)

    monkeypatch.setattr(doctor, "probe_host", slow)
    f = collect(tmp_path, None, budget=0.2)
    release.set()
    assert ("host", "did not finish within 0.2 s") in f.probe_failures


@pytest.mark.parametrize("arch", ["banana", "sm_999"])
def test_bad_arch_is_a_usage_error_without_traceback(arch: str) -> None:
    result = CliRunner().invoke(app, ["doctor", "--arch", arch])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "not a GPU architecture" in result.output


def _fake_collect(tmp_path: Path, smi: str | None) -> object:
    def fake(*args: object, **kwargs: object) -> Findings:
        return collect(tmp_path, smi, spec=kwargs.get("spec"))
    return fake


def test_json_document_and_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(doctor, "collect", _fake_collect(tmp_path, "h200"))
    ok = CliRunner().invoke(app, ["doctor", "--json", "--arch", "sm_90a"])
    assert ok.exit_code == 0, ok.output
    document = json.loads(ok.stdout)
    assert document["schema_version"] == 1 and document["ok"] is True
    assert document["targets"] == ["sm_90a"]
    assert {"verdicts", "toolkits", "host_window", "compilers", "gpus", "python", "host",
            "probe_failures"} <= set(document)
    assert document["host_window"]["msc_end"] == 1950
    # sm_70 was removed in CUDA 13.0: an error verdict → exit 3.
    blocked = CliRunner().invoke(app, ["doctor", "--json", "--arch", "sm_70"])
    assert blocked.exit_code == 3
    rules = {v["rule"]: v["severity"] for v in json.loads(blocked.stdout)["verdicts"]}
    assert rules["toolkit.arch-removed"] == "error"


def test_rich_report_shows_marks_and_fixes(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "collect", _fake_collect(tmp_path, "rtx5090"))
    result = CliRunner().invoke(app, ["doctor", "--arch", "sm_90a"])
    assert result.exit_code == 3
    lines = result.output.splitlines()
    # One verdict vocabulary with verify and scan: ASCII words, no symbols a pipe degrades.
    assert any(line.split()[:1] == ["error"] for line in lines) and "fix:" in result.output
    assert any(line.split()[:1] == ["ok"] for line in lines)
    assert not {"✗", "✓", "⚠"} & set(result.output)
    assert "CUDA toolkit" in result.output


def _keys(value: object, prefix: str = "") -> set[str]:
    """Every key path of a JSON document (list items merged)."""
    out: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            out.add(prefix + key)
            out |= _keys(item, prefix + key + ".")
    elif isinstance(value, list):
        for item in value:
            out |= _keys(item, prefix)
    return out


def test_json_keys_match_the_recorded_h100_document(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The H100 document was recorded from a real run; a key renamed or dropped since then
    breaks users' scripts and must come with a schema_version bump."""
    recorded = json.loads((FIX / "doctor-h100.json").read_text())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(doctor, "collect", _fake_collect(tmp_path, "h100"))
    result = CliRunner().invoke(app, ["doctor", "--json"])
    current = json.loads(result.stdout)
    assert current["schema_version"] == recorded["schema_version"]
    # Keys that only appear with data the fake machine lacks (torch, VS) are not compared.
    missing = {k for k in _keys(recorded) - _keys(current)
               if not k.startswith(("python.torch.", "compilers.visual_studios."))}
    assert not missing, f"keys gone from the JSON document: {sorted(missing)}"
