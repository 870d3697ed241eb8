"""How many parallel jobs: from memory as well as cores.

Heavy nvcc translation units take several GB each; OOM kills (`cudafe++ died due to signal
9`, MSVC C1060) come from too many parallel jobs, so the safe default is
min(cores, free RAM / per-job estimate) (FACTS.md, "Building"). The nvcc jobs go into a
Ninja job pool of that size while ninja's own `-j` stays at the core count, so linking and
small C++ steps can still run beside them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from flashbuild.detect.host import recommended_jobs
from flashbuild.errors import UsageError

GIB = 1024**3
#: A plain CUDA translation unit; recipes with CUTLASS-heavy sources raise it (3-5 GB).
DEFAULT_JOB_BYTES = 2 * GIB
#: Link steps are few and memory-hungry with LTO; two at a time is plenty.
LINK_JOBS = 2


@dataclass(frozen=True)
class HostResources:
    """What the machine offers right now."""

    cores: int
    available_bytes: int


@dataclass(frozen=True)
class JobPlan:
    """ninja's `-j` and the size of the nvcc pool, with the reason in words."""

    ninja_jobs: int
    nvcc_jobs: int
    link_jobs: int
    reason: str


def probe_host() -> HostResources:
    """Cores and available memory of this machine (psutil; counts the cgroup-free view)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    available = int(psutil.virtual_memory().available)
    return HostResources(cores=max(1, cores), available_bytes=available)


def parse_jobs(text: str | int | None) -> int | None:
    """`auto` / None → None (decide from the host); `N` → N ≥ 1."""
    if text is None:
        return None
    if isinstance(text, int):
        value = text
    else:
        if text.strip().lower() == "auto":
            return None
        try:
            value = int(text)
        except ValueError:
            raise UsageError(
                f"`--jobs {text}` is not a number of jobs",
                fix="use `--jobs auto` (from cores and free memory) or a positive integer",
            ) from None
    if value < 1:
        raise UsageError(f"`--jobs {value}` must be at least 1",
                         fix="use `--jobs auto` or a positive integer")
    return value


def plan_jobs(requested: int | None, host: HostResources,
              per_job_bytes: int = DEFAULT_JOB_BYTES) -> JobPlan:
    """`--jobs N` overrides everything; `auto` = min(cores, available / per-job)."""
    if requested is not None:
        return JobPlan(requested, requested, min(LINK_JOBS, requested),
                       f"--jobs {requested} (given)")
    nvcc = recommended_jobs(host.cores, host.available_bytes, max(1, per_job_bytes))
    reason = (f"auto: {host.cores} cores, {host.available_bytes / GIB:.1f} GiB free / "
              f"{per_job_bytes / GIB:.1f} GiB per nvcc job → {nvcc} nvcc jobs")
    return JobPlan(ninja_jobs=host.cores, nvcc_jobs=nvcc, link_jobs=min(LINK_JOBS, host.cores),
                   reason=reason)
