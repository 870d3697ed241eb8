"""A patch run killed between file writes (the FLASHBUILD_TEST_KILL_AFTER_WRITES test hook makes
the process `os._exit(137)` after N writes) leaves a tree that the next `patch` or
`patch --revert` repairs: every file back to its original bytes."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from flashbuild.patching import journal as jr
from flashbuild.proc import ProcessRunner

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".flashbuild" not in p.parts}


def _patch(tree: Path, *extra: str, kill_after: int | None = None) -> tuple[int, str]:
    env = dict(os.environ)
    if kill_after is not None:
        env[jr.KILL_HOOK] = str(kill_after)
    done = ProcessRunner().run(
        [sys.executable, "-m", "flashbuild", "patch", "--source", str(tree), *extra, "--json"],
        env=env, timeout=120, check=False)
    return done.returncode, done.stdout


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    if not (ROOT / "csrc" / "CMakeLists.txt").exists():
        pytest.skip("csrc/ is not in this checkout")
    copy = tmp_path / "csrc"
    shutil.copytree(ROOT / "csrc", copy, ignore=shutil.ignore_patterns(
        "build*", "__pycache__", "*.so", ".flashbuild"))
    return copy


@pytest.mark.parametrize("kill_after", [1, 4])
@pytest.mark.parametrize("then", ["patch", "revert"])
def test_killed_run_is_repaired(tree: Path, kill_after: int, then: str) -> None:
    before = _snapshot(tree)
    code, _ = _patch(tree, "--platform", "windows", "--arch", "sm120", kill_after=kill_after)
    assert code == 137
    journal = jr.read_journal(tree)
    assert journal is not None and journal.state == "writing"
    assert _snapshot(tree) != before  # the run really was interrupted half-way
    if then == "revert":
        code, out = _patch(tree, "--revert")
        assert code == 0, out
        assert json.loads(out)["was_complete"] is False
        assert _snapshot(tree) == before
        assert not (tree / ".flashbuild").exists()
    else:
        code, out = _patch(tree, "--platform", "windows", "--arch", "sm120")
        assert code == 0, out
        assert json.loads(out)["repaired"] is True
        code, out = _patch(tree, "--revert")
        assert code == 0, out
        assert _snapshot(tree) == before


def test_second_run_while_locked_is_busy(tree: Path) -> None:
    (tree / ".flashbuild").mkdir()
    (tree / ".flashbuild" / "lock").write_text(f"{os.getpid()}\n")  # this test process: alive
    before = _snapshot(tree)
    code, out = _patch(tree, "--platform", "windows", "--arch", "sm120")
    assert code == 9
    assert "another flashbuild run" in json.loads(out)["what"]
    assert _snapshot(tree) == before
