"""GPUs: NVML through a fake binding, nvidia-smi from recorded output (H200, RTX 5090, none)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import Version

from flashbuild.detect import gpu as gpu_module
from flashbuild.detect.gpu import SMI_QUERY, parse_smi_query, probe_gpus
from tests.fakes import ReplayRunner

if TYPE_CHECKING:
    import pytest

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "detect"


class NVMLError(Exception):
    pass


@dataclass
class Memory:
    total: int


class FakeNvml:
    """The calls flashbuild makes on pynvml; `fail` names one that raises."""

    def __init__(self, gpus: list[tuple[str, tuple[int, int], int]], fail: str = "") -> None:
        self.gpus = gpus
        self.fail = fail
        self.shutdown = False

    def _check(self, name: str) -> None:
        if self.fail == name:
            raise NVMLError(name)

    def nvmlInit(self) -> None:
        self._check("init")

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        self._check("count")
        return len(self.gpus)

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"580.159.04"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 13000

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        self._check("capability")
        return self.gpus[handle][1]

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.gpus[handle][0]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Memory:
        return Memory(self.gpus[handle][2])


def smi_runner(query: str, plain: str) -> ReplayRunner:
    return ReplayRunner(responses={SMI_QUERY: (FIX / query).read_text(),
                                   ("nvidia-smi",): (FIX / plain).read_text()})


def test_nvml_answers_first() -> None:
    nvml = FakeNvml([("NVIDIA H200", (9, 0), 150754820096)])
    report = probe_gpus({}, ReplayRunner(), nvml=nvml)
    assert report.source == "nvml" and nvml.shutdown
    assert report.gpus[0].sm == "sm_90" and report.gpus[0].memory_mib == 143771
    assert report.driver_cuda == Version("13.0") and report.driver_version == "580.159.04"


def test_every_nvml_failure_falls_back_to_nvidia_smi() -> None:
    for fail in ("init", "count", "capability"):
        nvml = FakeNvml([("NVIDIA H200", (9, 0), 1)], fail=fail)
        report = probe_gpus({}, smi_runner("nvidia-smi-query-h200.csv", "nvidia-smi-h200.txt"),
                            nvml=nvml)
        assert report.source == "nvidia-smi", fail


def test_nvidia_smi_h200_recorded() -> None:
    report = probe_gpus({}, smi_runner("nvidia-smi-query-h200.csv", "nvidia-smi-h200.txt"),
                        nvml=FakeNvml([]))
    (gpu,) = report.gpus
    assert (gpu.name, gpu.capability, gpu.memory_mib) == ("NVIDIA H200", (9, 0), 143771)
    assert report.driver_version == "580.159.04" and report.driver_cuda == Version("13.0")


def test_nvidia_smi_rtx5090() -> None:
    report = probe_gpus({}, smi_runner("nvidia-smi-query-rtx5090.csv",
                                       "nvidia-smi-rtx5090.txt"), nvml=FakeNvml([]))
    assert report.gpus[0].sm == "sm_120" and report.driver_cuda == Version("12.9")


def test_no_gpu_is_normal() -> None:
    none = ReplayRunner()
    none.add(*SMI_QUERY, out=(FIX / "nvidia-smi-none.txt").read_text(), code=6)
    report = probe_gpus({}, none, nvml=FakeNvml([], fail="init"))
    assert report.gpus == () and report.source == "none" and report.problems == ()
    # No nvidia-smi at all.
    assert probe_gpus({}, ReplayRunner(), nvml=FakeNvml([], fail="init")).gpus == ()


def test_hanging_nvidia_smi_is_a_problem_not_a_crash() -> None:
    report = probe_gpus({}, ReplayRunner(hangs={"nvidia-smi"}), nvml=FakeNvml([], fail="init"))
    assert report.gpus == () and "did not finish" in report.problems[0]


def test_garbage_csv_is_ignored() -> None:
    gpus, driver = parse_smi_query("NVIDIA-SMI has failed\n, , ,\nA, twelve, 1, 2\n")
    assert gpus == [] and driver is None



def test_nvml_is_skipped_when_the_platform_sees_no_driver(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_load() -> None:
        raise AssertionError("pynvml was imported although no driver is loaded")

    monkeypatch.setattr(gpu_module, "_load_pynvml", must_not_load)
    report = probe_gpus({}, smi_runner("nvidia-smi-query-h200.csv", "nvidia-smi-h200.txt"),
                        driver_loaded=False)
    assert report.source == "nvidia-smi"


def test_nvidia_smi_h100_recorded() -> None:
    report = probe_gpus({}, smi_runner("nvidia-smi-query-h100.csv", "nvidia-smi-h100.txt"),
                        nvml=FakeNvml([], fail="init"))
    (gpu,) = report.gpus
    assert (gpu.name, gpu.sm, gpu.memory_mib) == ("NVIDIA H100 80GB HBM3", "sm_90", 81559)
    assert report.driver_cuda == Version("13.0")
