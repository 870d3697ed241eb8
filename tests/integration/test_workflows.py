"""The GitHub Actions workflows must lint clean: they run the real thing on Windows runners
that this machine cannot reproduce, so a typo there is only found by a linter here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))


def _actionlint() -> str:
    exe = shutil.which("actionlint") or shutil.which(
        "actionlint", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("actionlint is not installed: `pip install -e .[test]` provides it")
    return exe


@pytest.mark.integration
def test_workflows_exist_for_linux_and_windows() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in WORKFLOWS)
    assert "windows-2022" in text and "windows-latest" in text and "ubuntu-" in text
    assert '".[cuda,test]"' in text, "CI must install with the CUDA extra, as the README says"
    assert "flashbuild doctor" in text and "upload-artifact" in text


@pytest.mark.integration
@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_lints_clean(workflow: Path) -> None:
    done = subprocess.run([_actionlint(), "-no-color", str(workflow)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.integration
def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: echo ${{ matrix.nope }}\n", encoding="utf-8")
    done = subprocess.run([_actionlint(), "-no-color", str(bad)], capture_output=True,
                          text=True, check=False)
    assert done.returncode != 0
