"""`doctor --packages` through the real entry point (a child process), and over this venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from flashbuild.arch import parse_arch_spec
from flashbuild.pipeline.installed import arch_targets, check_packages, default_site_packages
from tests.conftest import FIXTURES, ROOT
from tests.unit.test_doctor_packages import add_distribution

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.integration


def _doctor(site: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "COLUMNS": "80", "TERM": "dumb",
           "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    env.pop("PYTHONUTF8", None)
    return subprocess.run([sys.executable, "-m", "flashbuild", "doctor", "--packages", *args],
                          cwd=ROOT, env=env, capture_output=True, timeout=120, check=False)


def test_an_sm_90a_package_fails_on_sm_120_through_the_cli(tmp_path: Path) -> None:
    """The fake distribution sits on PYTHONPATH, so the child finds it where `import` would,
    beside everything this venv has installed; piped, ASCII, 80 columns."""
    site = tmp_path / "site"
    add_distribution(site, "hopper-only-kernels", "0.1", {
        "hopper_only_kernels/_C.so": FIXTURES / "verify" / "sass_sm90a.o"})
    done = _doctor(site, "--arch", "sm_120")
    out = done.stdout.decode("ascii")  # raises if anything but ASCII was written
    assert done.returncode == 3, (out, done.stderr.decode())
    box = [line for line in out.splitlines() if line[:1] and line[0] in "+|"]
    assert box and {len(line) for line in box} == {len(box[0])} and len(box[0]) <= 80, out
    assert "hopper-only-kernels 0.1" in out and "fails" in out
    assert "hopper_only_kernels/_C.so: sm_90a SASS" in out
    document = json.loads(_doctor(site, "--arch", "sm_90a", "--json").stdout)
    package = next(p for p in document["packages"] if p["name"] == "hopper-only-kernels")
    assert package["verdict"] == "ok" and document["site_packages"][0] == str(site)


def test_this_venv_lists_nothing_wrong_for_its_cpu_torch() -> None:
    """The venv's torch is the CPU build: its libraries hold no GPU code, so it is not listed,
    and reading every binary of the environment is fast."""
    pytest.importorskip("torch")
    started = time.monotonic()
    report = check_packages(default_site_packages(), arch_targets(parse_arch_spec("sm_120")),
                            origin="--arch")
    assert time.monotonic() - started < 30
    assert report.distributions > 10 and report.binaries > 10
    names = {r.package.name.lower() for r in report.packages}
    torch_version = next(
        (p.name for folder in default_site_packages() for p in folder.glob("torch-*.dist-info")),
        "")
    if "+cpu" in torch_version:
        assert "torch" not in names
    assert not report.problems
