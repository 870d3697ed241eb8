"""`flashbuild build` stops on doctor's blocking verdicts, but not on run-time-only ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild import platforms
from flashbuild.arch import parse_arch_spec
from flashbuild.detect import doctor
from flashbuild.detect.cuda import ToolkitSearch
from flashbuild.detect.rules import RULES
from flashbuild.pipeline.command import NOT_BUILD_BLOCKERS, doctor_blockers
from tests.fakes import ReplayRunner


def test_a_machine_without_a_toolkit_blocks_the_build(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "find_toolkits", lambda *a, **k: ToolkitSearch(
        candidates=(), chosen=None, reason="no candidate folder holds nvcc"))
    env = {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path)}
    blockers = doctor_blockers(env, ReplayRunner(), platforms.get("linux"),
                               spec=parse_arch_spec("sm120"), cuda=None,
                               cache_dir=tmp_path / "cache")
    assert any("CUDA" in b or "toolkit" in b.lower() for b in blockers), blockers
    assert all("(fix: " in b for b in blockers)


def test_run_time_only_rules_exist() -> None:
    # A renamed rule would silently start blocking builds again.
    assert set(RULES) >= NOT_BUILD_BLOCKERS


def test_msvc_outside_window_does_not_block_when_build_activates_a_toolset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # windows-latest: VS 2026 (toolset 14.50 = _MSC_VER 1950) is the default, CUDA 13.0
    # accepts < 1950, a 14.44 toolset is installed too. Doctor reports the default as an
    # error, but `flashbuild build` activates 14.44 itself (msvc.pick_toolset, which raises
    # its own error when no toolset fits), so the verdict must not stop the build.
    from flashbuild.detect.compilers import HostCompilers, MsvcToolset, VisualStudio
    from flashbuild.detect.rules import Severity, evaluate
    from tests.unit.test_detect_rules import findings, search, toolkit

    vs = VisualStudio("a", "Visual Studio 2026", Path("C:/VS/18"), "18.0.1", "2026", False,
                      tuple(MsvcToolset(t, Path("C:/VS") / t)
                            for t in ("14.44.35207", "14.50.35717")), "14.50.35717")
    found = findings(platform="windows",
                     toolkits=search(toolkit(host_config="host_config_13.0.h")),
                     compilers=HostCompilers("msvc", visual_studios=(vs,)))
    assert any(v.rule_id == "msvc.version" and v.severity is Severity.ERROR
               for v in evaluate(found))  # doctor still says so
    monkeypatch.setattr(doctor, "collect", lambda *a, **k: found)
    blockers = doctor_blockers({}, ReplayRunner(), platforms.get("windows"),
                               spec=parse_arch_spec("sm120"), cuda=None,
                               cache_dir=tmp_path / "cache")
    assert not [b for b in blockers if "MSVC" in b], blockers


def test_build_checks_skip_the_gpu_and_python_probes(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML start-up and the torch probe only feed run-time verdicts; a no-op rebuild must
    not pay for them."""
    ran: list[str] = []

    def must_not_run(*args: object, **kwargs: object) -> None:
        ran.append("probe")

    monkeypatch.setattr(doctor, "probe_gpus", must_not_run)
    monkeypatch.setattr(doctor, "probe_pyenv", must_not_run)
    monkeypatch.setattr(doctor, "find_toolkits", lambda *a, **k: ToolkitSearch(
        candidates=(), chosen=None, reason="none"))
    env = {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path)}
    blockers = doctor_blockers(env, ReplayRunner(), platforms.get("linux"),
                               spec=parse_arch_spec("sm120"), cuda=None,
                               cache_dir=tmp_path / "cache")
    assert ran == [], "a run-time-only probe ran during the build's checks"
    assert blockers  # the toolkit probe still ran and still blocks
