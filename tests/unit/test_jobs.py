"""--jobs auto = min(cores, free RAM / per-job estimate); --jobs N overrides."""

from __future__ import annotations

import pytest

from flashbuild.building.jobs import GIB, HostResources, parse_jobs, plan_jobs
from flashbuild.building.launcher import choose_launcher, parse_launcher
from flashbuild.errors import ToolchainError, UsageError
from tests.fakes import ReplayRunner


def test_memory_bounds_nvcc_jobs_not_ninja() -> None:
    plan = plan_jobs(None, HostResources(cores=16, available_bytes=10 * GIB), 4 * GIB)
    assert plan.nvcc_jobs == 2  # 10 GiB / 4 GiB
    assert plan.ninja_jobs == 16  # linking and C++ still run beside the nvcc pool
    assert "16 cores" in plan.reason


def test_cores_bound_when_memory_is_plenty() -> None:
    assert plan_jobs(None, HostResources(2, 24 * GIB)).nvcc_jobs == 2


def test_at_least_one_job_when_memory_is_short() -> None:
    assert plan_jobs(None, HostResources(8, GIB // 2), 4 * GIB).nvcc_jobs == 1


def test_explicit_jobs_override() -> None:
    plan = plan_jobs(5, HostResources(1, 0))
    assert (plan.ninja_jobs, plan.nvcc_jobs) == (5, 5)


@pytest.mark.parametrize(("text", "want"), [("auto", None), ("AUTO", None), ("3", 3), (None, None)])
def test_parse_jobs(text: str | None, want: int | None) -> None:
    assert parse_jobs(text) == want


@pytest.mark.parametrize("text", ["0", "-2", "many"])
def test_parse_jobs_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_jobs(text)


def test_launcher_auto_prefers_sccache() -> None:
    both = ReplayRunner(found={"sccache": "/usr/bin/sccache", "ccache": "/usr/bin/ccache"})
    chosen = choose_launcher("auto", both, {})
    assert chosen is not None and chosen.name == "sccache" and chosen.cuda
    only_ccache = ReplayRunner(found={"ccache": "/usr/bin/ccache"})
    chosen = choose_launcher("auto", only_ccache, {})
    assert chosen is not None and chosen.name == "ccache" and not chosen.cuda
    assert "-MD" in chosen.note
    assert choose_launcher("auto", ReplayRunner(), {}) is None
    assert choose_launcher("none", both, {}) is None


def test_named_launcher_must_exist() -> None:
    with pytest.raises(ToolchainError):
        choose_launcher("sccache", ReplayRunner(), {})
    with pytest.raises(UsageError):
        parse_launcher("distcc")
    assert parse_launcher(" SCCache ") == "sccache"
