"""The README's `recipe init` then `ci init` lines, run as written (issue 28: both exited 2):
from a folder beside `../mykernels`, a small tree of the fixtures. The lines are read from the
README itself, so a README that stops working fails here."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def _readme_line(start: str) -> list[str]:
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith(start):
            return shlex.split(line, comments=True)
    pytest.fail(f"the README has no line starting with {start!r}")


def test_the_readme_recipe_init_and_ci_init_lines_work_as_written(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "tests" / "fixtures" / "scan" / "othertree", tmp_path / "mykernels")
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for start in ("flashbuild recipe init ", "flashbuild ci init "):
        argv = _readme_line(start)
        assert "../mykernels" in " ".join(argv)
        done = subprocess.run([sys.executable, "-m", "flashbuild", *argv[1:]], cwd=work,
                              env=env, capture_output=True, text=True, timeout=300,
                              check=False)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    workflow = tmp_path / "mykernels" / ".github" / "workflows" / "flashbuild.yml"
    text = workflow.read_text(encoding="utf-8")
    assert "flashbuild.toml" in text  # the job finds the recipe inside its checkout
