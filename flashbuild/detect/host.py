"""The machine: cores, free memory, free disk, a safe nvcc job count, Windows path hazards.

Heavy nvcc translation units (CUTLASS templates) take 3 to 5 GB each and OOM kills come from too
many parallel jobs, so the recommended job count is min(cores, free RAM / per-job estimate)
(FACTS.md "Building"). On Windows, paths over 260 characters fail in ninja unless long paths
are enabled, and spaces in TMP or the user name break nvcc's MSVC environment setup.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from flashbuild.platforms.base import Platform, RegistryReader

GIB = 1024**3
HEAVY_JOB_BYTES = 4 * GIB
"""A CUTLASS-heavy nvcc job (FACTS.md: 3 to 5 GB)."""
LIGHT_JOB_BYTES = 3 * GIB // 2
"""An ordinary kernel file."""
#: Build folders deeper than this leave too little of Windows' 260-character limit for the
#: object paths ninja and nvcc add below them.
LONG_BUILD_PATH = 60


@dataclass(frozen=True)
class PathHazard:
    path: str
    what: str
    """`spaces`, `long`, `non-ascii`."""
    role: str
    """`build folder`, `TMP`, `TEMP`."""

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "what": self.what, "role": self.role}


@dataclass(frozen=True)
class HostInfo:
    cores: int
    free_ram: int | None
    """Available memory in bytes (psutil)."""
    total_ram: int | None
    build_dir: Path
    free_disk: int | None
    """Free bytes on the build folder's file system."""
    jobs_heavy: int
    jobs_light: int
    long_paths_enabled: bool | None
    """Windows LongPathsEnabled; None off Windows or when unreadable."""
    path_hazards: tuple[PathHazard, ...] = ()
    os_release: str = ""
    """Linux's /etc/os-release text: which package manager the install commands name."""

    def to_json(self) -> dict[str, object]:
        return {"cores": self.cores, "free_ram": self.free_ram, "total_ram": self.total_ram,
                "build_dir": str(self.build_dir), "free_disk": self.free_disk,
                "jobs_heavy": self.jobs_heavy, "jobs_light": self.jobs_light,
                "long_paths_enabled": self.long_paths_enabled,
                "path_hazards": [h.to_json() for h in self.path_hazards]}


def recommended_jobs(cores: int, free_ram: int | None, per_job: int) -> int:
    """max(1, min(cores, free RAM // per-job estimate)); cores alone when RAM is unknown."""
    if free_ram is None:
        return max(1, cores)
    return max(1, min(cores, free_ram // per_job))


def path_hazards(path: str, role: str) -> list[PathHazard]:
    found = []
    if " " in path:
        found.append(PathHazard(path, "spaces", role))
    if len(path) > LONG_BUILD_PATH:
        found.append(PathHazard(path, "long", role))
    if not path.isascii():
        found.append(PathHazard(path, "non-ascii", role))
    return found


def _existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return path


def probe_host(env: Mapping[str, str], platform: Platform, *, build_dir: Path,
               cores: int | None = None, memory: tuple[int, int] | None = None,
               registry: RegistryReader | None = None) -> HostInfo:
    """`cores` and `memory` (available, total) are injectable for tests; by default they come
    from psutil. Never raises."""
    if cores is None:
        cores = os.cpu_count() or 1
    free_ram: int | None
    total_ram: int | None
    if memory is None:
        memory = platform.memory()
    free_ram, total_ram = memory if memory is not None else (None, None)
    try:
        free_disk: int | None = shutil.disk_usage(_existing(build_dir)).free
    except OSError:
        free_disk = None
    hazards: list[PathHazard] = []
    long_paths = platform.long_paths_enabled(registry)
    if platform.name == "windows":
        hazards += path_hazards(str(build_dir), "build folder")
        for var in ("TMP", "TEMP"):
            if env.get(var):
                hazards += [h for h in path_hazards(env[var], var) if h.what != "long"]
    return HostInfo(cores, free_ram, total_ram, build_dir, free_disk,
                    recommended_jobs(cores, free_ram, HEAVY_JOB_BYTES),
                    recommended_jobs(cores, free_ram, LIGHT_JOB_BYTES),
                    long_paths, tuple(hazards), platform.os_release())
