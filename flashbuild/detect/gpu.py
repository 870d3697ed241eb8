"""NVIDIA GPUs: NVML (nvidia-ml-py) first, `nvidia-smi` as the fallback. No GPU is normal.

NVML answers in-process in milliseconds and gives the newest CUDA the driver supports
(`nvmlSystemGetCudaDriverVersion_v2`). Every NVML call is guarded: a missing library, an old
driver or a container without devices falls through to nvidia-smi, whose failure means "no
GPU", not an error.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from packaging.version import InvalidVersion, Version

from flashbuild.errors import FlashbuildError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flashbuild.proc import Runner

SMI_TIMEOUT = 15.0
SMI_QUERY = ("nvidia-smi", "--query-gpu=name,compute_cap,memory.total,driver_version",
             "--format=csv,noheader,nounits")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    capability: tuple[int, int]
    memory_mib: int | None

    @property
    def sm(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "name": self.name,
                "compute_capability": f"{self.capability[0]}.{self.capability[1]}",
                "sm": self.sm, "memory_mib": self.memory_mib}


@dataclass(frozen=True)
class GpuReport:
    gpus: tuple[Gpu, ...]
    driver_version: str | None
    driver_cuda: Version | None
    """Newest CUDA the driver supports (13.0 for driver 580)."""
    source: Literal["nvml", "nvidia-smi", "none"]
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"gpus": [g.to_json() for g in self.gpus], "driver_version": self.driver_version,
                "driver_cuda": str(self.driver_cuda) if self.driver_cuda else None,
                "source": self.source, "problems": list(self.problems)}


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def probe_nvml(nvml: Any) -> GpuReport | None:
    """GPUs through an NVML binding (the `pynvml` module of nvidia-ml-py, or a fake).
    None when NVML cannot answer."""
    try:
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        count = int(nvml.nvmlDeviceGetCount())
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        encoded = int(nvml.nvmlSystemGetCudaDriverVersion_v2())  # 13000 = 13.0
        gpus = []
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle).total
            gpus.append(Gpu(index, _text(nvml.nvmlDeviceGetName(handle)),
                            (int(major), int(minor)), int(memory) // (1024 * 1024)))
        return GpuReport(tuple(gpus), driver,
                         Version(f"{encoded // 1000}.{encoded % 1000 // 10}"), "nvml")
    except Exception:
        return None
    finally:
        # Shutting down a half-initialised NVML may fail; nothing depends on it.
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def parse_smi_query(text: str) -> tuple[list[Gpu], str | None]:
    """`name, compute_cap, memory.total, driver_version` CSV lines (no header, no units)."""
    gpus: list[Gpu] = []
    driver = None
    for line in text.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            continue
        match = re.fullmatch(r"(\d+)\.(\d+)", fields[1])
        if not match:
            continue
        memory = int(fields[2]) if fields[2].isdigit() else None
        gpus.append(Gpu(len(gpus), fields[0], (int(match[1]), int(match[2])), memory))
        driver = fields[3] or driver
    return gpus, driver


def parse_smi_cuda_version(text: str) -> Version | None:
    """The `CUDA Version: 13.0` of plain `nvidia-smi`."""
    match = re.search(r"CUDA Version:\s*(\d+\.\d+)", text)
    try:
        return Version(match[1]) if match else None
    except InvalidVersion:
        return None


def probe_smi(env: Mapping[str, str], runner: Runner) -> GpuReport:
    if runner.which("nvidia-smi", env) is None:
        return GpuReport((), None, None, "none")
    problems: list[str] = []
    try:
        done = runner.run(list(SMI_QUERY), env=env, timeout=SMI_TIMEOUT, check=False)
    except FlashbuildError as exc:
        return GpuReport((), None, None, "none", (f"nvidia-smi failed: {exc.what}",))
    gpus, driver = parse_smi_query(done.stdout)
    if not gpus:
        # "No devices were found" (exit 6) or a driver that cannot talk to the GPU (exit 9).
        return GpuReport((), None, None, "none")
    cuda = None
    try:
        cuda = parse_smi_cuda_version(
            runner.run(["nvidia-smi"], env=env, timeout=SMI_TIMEOUT, check=False).stdout)
    except FlashbuildError as exc:
        problems.append(f"nvidia-smi failed: {exc.what}")
    return GpuReport(tuple(gpus), driver, cuda, "nvidia-smi", tuple(problems))


def _load_pynvml() -> Any:
    try:
        import pynvml  # noqa: PLC0415  # optional
    except Exception:
        return None
    return pynvml


def probe_gpus(env: Mapping[str, str], runner: Runner, *, nvml: Any = None,
               driver_loaded: bool | None = None) -> GpuReport:
    """NVML, else nvidia-smi, else no GPU. Never raises. `nvml=None` loads pynvml, unless
    the platform says no NVIDIA driver is loaded (`driver_loaded=False`): importing pynvml
    alone costs ~60 ms, a third of a warm doctor run."""
    binding = nvml
    if binding is None and driver_loaded is not False:
        binding = _load_pynvml()
    if binding is not None:
        report = probe_nvml(binding)
        if report is not None and report.gpus:
            return report
    return probe_smi(env, runner)
