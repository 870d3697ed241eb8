"""The wheel goes in with `--no-deps` (pip must never swap the torch it was built against), so
what the distribution itself requires and this Python lacks is said after the install: real
`pip check` in a throwaway venv holding a distribution with one requirement missing, one in
conflict and one whose marker leaves it out (torch-linear-assignment's shape: it requires
scipy, which the GPU machine and a fresh venv lack; verify then failed its import)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from flashbuild.installing.install import unmet_requirements
from flashbuild.proc import ProcessRunner

pytestmark = pytest.mark.integration


def _venv_with(root: Path, name: str, requires: list[str]) -> str:
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True,
                             check=True).stdout.strip()
    info = Path(purelib) / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: " + name.replace("_", "-") + "\nVersion: 0.1\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires), encoding="utf-8")
    return python


@pytest.mark.skipif(sysconfig.get_platform().startswith("win"), reason="venv layout")
def test_what_the_installed_distribution_lacks_is_one_warning(tmp_path: Path) -> None:
    python = _venv_with(tmp_path, "req_demo", [
        "flashbuild-absent-dependency>=1.0", "packaging>=999",
        'flashbuild-absent-two; sys_platform == "no-such-platform"'])
    (warning,) = unmet_requirements(python, "req_demo", ProcessRunner())
    # pip check names a missing requirement without its specifier.
    assert warning.startswith("req_demo requires flashbuild-absent-dependency, not "
                              "installed; packaging>=999 (this Python has packaging "), warning
    assert "absent-two" not in warning  # its marker is false here
    assert f"`{python} -m pip install 'flashbuild-absent-dependency'`" in warning
    assert "without its dependencies" in warning


def test_a_distribution_with_what_it_needs_gives_none(tmp_path: Path) -> None:
    python = _venv_with(tmp_path, "req_met", ["packaging"])
    assert unmet_requirements(python, "req-met", ProcessRunner()) == []


def test_a_pip_check_that_cannot_run_says_nothing(tmp_path: Path) -> None:
    # The wheel is installed by then: a pip that cannot start costs the warning, not the
    # install.
    assert unmet_requirements(str(tmp_path / "no-such-python"), "req", ProcessRunner()) == []
