"""The machine: jobs from cores and RAM, Windows path hazards and long paths."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from flashbuild.detect.host import GIB, probe_host, recommended_jobs
from flashbuild.platforms.linux import LinuxPlatform
from flashbuild.platforms.windows import WindowsPlatform

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(("cores", "free", "per_job", "jobs"), [
    (2, 24 * GIB, 4 * GIB, 2), (16, 10 * GIB, 4 * GIB, 2), (16, 3 * GIB, 4 * GIB, 1),
    (8, None, 4 * GIB, 8), (4, 0, 4 * GIB, 1)])
def test_recommended_jobs(cores: int, free: int | None, per_job: int, jobs: int) -> None:
    assert recommended_jobs(cores, free, per_job) == jobs


def test_linux_host(tmp_path: Path) -> None:
    host = probe_host({}, LinuxPlatform(), build_dir=tmp_path / "not" / "yet", cores=16,
                      memory=(12 * GIB, 24 * GIB))
    assert (host.jobs_heavy, host.jobs_light) == (3, 8)
    assert host.free_disk is not None and host.long_paths_enabled is None
    assert host.path_hazards == ()


def test_windows_long_paths_and_hazards(tmp_path: Path) -> None:
    build = tmp_path / "Mein Ördner" / ("x" * 40)
    reads: list[tuple[str, str, str]] = []

    def off(root: str, key: str, name: str) -> object | None:
        reads.append((root, key, name))
        return 0

    host = probe_host({"TMP": r"C:\Users\Jane Doe\AppData\Local\Temp"}, WindowsPlatform(),
                      build_dir=build, cores=2, memory=(8 * GIB, 16 * GIB), registry=off)
    assert host.long_paths_enabled is False
    assert reads == [("HKEY_LOCAL_MACHINE", r"SYSTEM\CurrentControlSet\Control\FileSystem",
                      "LongPathsEnabled")]
    kinds = {(h.role, h.what) for h in host.path_hazards}
    assert {("build folder", "spaces"), ("build folder", "long"),
            ("build folder", "non-ascii"), ("TMP", "spaces")} <= kinds


def test_windows_registry_values() -> None:
    win = WindowsPlatform()
    assert win.long_paths_enabled(lambda *_: 1) is True
    assert win.long_paths_enabled(lambda *_: None) is False  # absent = Windows' default, off

    def denied(*_: str) -> object:
        raise PermissionError("access denied")

    assert win.long_paths_enabled(denied) is None


def test_memory_from_proc_meminfo_without_psutil() -> None:
    """Recorded /proc/meminfo: MemAvailable and MemTotal, in bytes (psutil's `available` and
    `total`), read without importing psutil (doctor's start-up)."""
    from pathlib import Path

    from flashbuild.platforms.linux import parse_meminfo

    text = (Path(__file__).resolve().parents[1] / "fixtures" / "detect" /
            "proc-meminfo.txt").read_text()
    fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in text.splitlines()}
    assert parse_meminfo(text) == (fields["MemAvailable"], fields["MemTotal"])
    assert parse_meminfo("MemTotal: 100 kB\n") is None  # a kernel before 3.14
