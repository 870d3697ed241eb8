"""The real doctor on this machine, through the installed CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PYPI_ROOT = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cu13"


def doctor(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run([sys.executable, "-m", "flashbuild", "doctor", *args], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_doctor_json_finds_both_toolkits_and_passes_for_sm90a(tmp_path: Path) -> None:
    if not (PYPI_ROOT / "bin" / "nvcc").is_file():
        pytest.skip("the PyPI CUDA toolkit is not installed (pip install -e .[cuda])")
    done = doctor("--json", "--arch", "sm_90a", cache=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    document = json.loads(done.stdout)
    assert document["schema_version"] == 1 and document["ok"] is True
    assert document["targets"] == ["sm_90a"]
    found = {Path(t["root"]).resolve(): t for t in document["toolkits"]["candidates"]}
    pypi = found[PYPI_ROOT.resolve()]
    assert pypi["layout"] == "pypi" and pypi["version"].startswith("13.0")
    assert "sm_90" in pypi["codes"] and pypi["has_headers"]
    # Other toolkits depend on the machine (a /usr/local/cuda-X.Y folder may be anything, or
    # a link to the PyPI one): the test only asks that each one doctor lists is really there.
    assert all(root.exists() for root in found)
    assert document["toolkits"]["chosen"] is not None
    assert document["host_window"]["gcc_max"] == 15
    assert any(v["rule"] == "toolkit.codes" and v["severity"] == "ok"
               for v in document["verdicts"])
    # The warm run answers from the cache written by the cold one: same findings.
    assert any((tmp_path / "flashbuild" / "probes").glob("nvcc-*.json"))
    warm = doctor("--json", "--arch", "sm_90a", cache=tmp_path)
    assert warm.returncode == 0
    assert json.loads(warm.stdout)["toolkits"] == document["toolkits"]


def test_doctor_report_and_bad_arch(tmp_path: Path) -> None:
    done = doctor("--arch", "sm_70", cache=tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "dropped sm_70" in done.stdout and "fix:" in done.stdout
    bad = doctor("--arch", "banana", cache=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "banana" in bad.stderr
