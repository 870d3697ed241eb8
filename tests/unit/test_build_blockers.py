"""`flashbuild build` stops on doctor's blocking verdicts, but not on run-time-only ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild import platforms
from flashbuild.arch import parse_arch_spec
from flashbuild.building.driver import NOT_BUILD_BLOCKERS, doctor_blockers
from flashbuild.detect import doctor
from flashbuild.detect.cuda import ToolkitSearch
from flashbuild.detect.rules import RULES
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
