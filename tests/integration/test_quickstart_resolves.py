"""The README's install command must resolve on plain PyPI, not only in a workplace with its own
find-links: pip's resolver runs in `--dry-run` mode against the real index metadata, with every
local pip setting (config files, PIP_* variables, constraints, find-links) switched off.

Two installs are checked: the README's own (`-e ".[cuda,test]"`), which must not pull torch
(its PyPI Linux wheel is the CUDA build, several GB), and the same next to PyPI's torch 2.13.0,
whose Linux wheel pins `cuda-toolkit==13.0.3`: the `cuda` extra must leave room for that pin.
Skips when PyPI cannot be reached."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INDEX = "https://pypi.org/simple"


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        return False
    return True


def _readme_install_spec() -> str:
    """The requirement the README's first command installs (`-e ".[cuda,test]"`)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r'pip install -e "(\.\[[a-z,]+\])"', readme)
    assert found, "the README's quick start no longer has `pip install -e \".[...]\"`"
    return found.group(1)


def _dry_run(tmp_path: Path, *requirements: str) -> dict[str, str]:
    if not _pypi_reachable():
        pytest.skip("pypi.org is not reachable from this machine")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no global/user pip.conf (find-links, constraints)
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--quiet",
         "--ignore-installed", "--disable-pip-version-check", "--index-url", INDEX,
         "--report", str(report), *requirements],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(report.read_text(encoding="utf-8"))
    return {item["metadata"]["name"].lower(): item["metadata"]["version"]
            for item in doc["install"]}


# `heavy`: CI's .ci/run installs this very command for real; the resolution beside torch
# below is what no other test or step checks.
@pytest.mark.heavy
def test_the_readme_install_resolves_on_plain_pypi_without_torch(tmp_path: Path) -> None:
    chosen = _dry_run(tmp_path, "-e", _readme_install_spec())
    assert "torch" not in chosen, "the test extra pulls torch (the CUDA build on plain PyPI)"
    # nvcc 13.0 with an NVVM of the same release (FACTS.md: a newer NVVM emits PTX that
    # ptxas 13.0 rejects).
    assert chosen["cuda-toolkit"].startswith("13.0."), chosen["cuda-toolkit"]
    assert chosen["nvidia-nvvm"].startswith("13.0."), chosen["nvidia-nvvm"]
    assert chosen["nvidia-cuda-nvcc"].startswith("13.0."), chosen["nvidia-cuda-nvcc"]


# `heavy` too: 35 s of CPU and about 100 s of one worker's time on the 2-core machine, all of
# it pip's resolver against the network. It guards the `cuda` extra's pins; run it with
# FLASHBUILD_HEAVY_TESTS=1 after changing them (docs/development.md).
@pytest.mark.heavy
def test_the_cuda_extra_resolves_beside_pypi_torch(tmp_path: Path) -> None:
    chosen = _dry_run(tmp_path, "-e", _readme_install_spec(), "torch==2.13.0")
    assert chosen["torch"] == "2.13.0"
    assert chosen["nvidia-nvvm"].startswith("13.0."), chosen["nvidia-nvvm"]
