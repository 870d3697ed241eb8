"""The one process runner, against real processes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from flashbuild.errors import ProcessError, ProcessTimeout, ToolchainError
from flashbuild.proc import ProcessRunner

pytestmark = pytest.mark.integration
PY = sys.executable


def test_output_and_echo() -> None:
    echoed: list[str] = []
    done = ProcessRunner(echo=echoed.append).run([PY, "-c", "print('hé'); import sys; "
                                                  "print('e', file=sys.stderr)"])
    assert done.stdout.strip() == "hé" and done.stderr.strip() == "e"
    assert echoed and PY in echoed[0]


def test_failure_carries_command_code_and_tail() -> None:
    with pytest.raises(ProcessError) as info:
        ProcessRunner().run([PY, "-c", "import sys; print('line\\n' * 50 + 'last'); sys.exit(7)"])
    assert info.value.details["returncode"] == 7
    assert "last" in info.value.evidence and info.value.evidence.count("line") <= 30


def test_timeout_is_a_clear_error() -> None:
    with pytest.raises(ProcessTimeout, match=r"did not finish within 0\.5 s"):
        ProcessRunner().run([PY, "-c", "import time; time.sleep(30)"], timeout=0.5)


def test_program_resolved_against_the_given_env_path(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match="was not found"):
        ProcessRunner().run(["python3"], env={"PATH": str(tmp_path)})
    tool = tmp_path / "mytool"
    tool.write_text(f"#!{PY}\nprint('mine')\n")
    tool.chmod(0o755)
    env = {**os.environ, "PATH": str(tmp_path)}
    assert ProcessRunner().run(["mytool"], env=env).stdout.strip() == "mine"


def test_stream_passes_lines_and_logs(tmp_path: Path) -> None:
    lines: list[str] = []
    log = tmp_path / "log.txt"
    with log.open("w") as fh:
        code = ProcessRunner().stream([PY, "-c", "print('[1/2] a'); print('[2/2] b')"],
                                      on_line=lines.append, log=fh)
    assert code == 0 and lines == ["[1/2] a", "[2/2] b"]
    assert log.read_text().splitlines() == lines
