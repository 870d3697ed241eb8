"""The vcvarsall capture against a real cmd.exe: wine's, with a profile folder named José.

`capture_batch_env` builds the same line it runs on Windows (`%ComSpec% /u /d /c call
%FLASHBUILD_BATCH% x64 && set > %FLASHBUILD_SET_FILE%`, the paths quoted in the variables);
a runner that starts it under wine (Linux paths become wine's `Z:` drive) executes it, and
the environment must come back with the non-ASCII folder intact, also from folders named
with cmd's metacharacters. Skipped when wine is not installed (`apt-get install wine`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from flashbuild.platforms.windows import BATCH_VAR, SET_FILE_VAR, capture_batch_env
from flashbuild.proc import Completed, ProcessRunner

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BAT = Path(__file__).resolve().parent.parent / "fixtures" / "build" / "fake_vcvarsall.bat"


class WineRunner(ProcessRunner):
    """Runs a Windows command line under wine, with absolute Linux paths turned into `Z:`."""

    def run(self, argv: Sequence[str | os.PathLike[str]], *,
            env: Mapping[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 60.0, check: bool = True, input: str | None = None) -> Completed:
        args = [os.fspath(a) for a in argv]
        # A path has a second `/`; cmd's own switches (`/u`, `/c`) do not.
        args = [_z(a) if a.startswith("/") and "/" in a[1:] else a for a in args]
        if env is not None:  # the quoted paths capture_batch_env hands cmd in variables
            env = {k: '"' + _z(v.strip('"')) + '"' if k in (BATCH_VAR, SET_FILE_VAR) else v
                   for k, v in env.items()}
        return super().run(["wine", *args], env=env, cwd=cwd, timeout=300, check=check,
                           input=input)


def _z(path: str) -> str:
    """A Linux path as wine's `Z:` drive shows it."""
    return "Z:" + path.replace("/", "\\")


def _capture(tmp_path: Path, bat: Path, temp: Path | None = None,
             ) -> tuple[Completed, dict[str, str]]:
    if shutil.which("wine") is None:
        pytest.skip("wine not installed (apt-get install wine)")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "WINEPREFIX": str(tmp_path / "prefix"), "WINEDEBUG": "-all",
           "WINEDLLOVERRIDES": "mscoree=;mshtml=", "LANG": "C.UTF-8",
           "FB_PROFILE": "C:\\Users\\José Müller"}
    runner = WineRunner()
    saved = tempfile.tempdir
    tempfile.tempdir = str(temp) if temp is not None else None  # where set.txt goes
    try:
        done, got = capture_batch_env(runner, bat, ["x64"], env=env)
    finally:
        tempfile.tempdir = saved
        # Stop this prefix's wineserver (and only it) before tmp_path is cleaned up.
        ProcessRunner().run(["wineserver", "-k"], env=env, check=False)
    return done, got


def test_cmd_u_capture_under_wine(tmp_path: Path) -> None:
    done, got = _capture(tmp_path, BAT)
    assert done.ok, done.output
    assert got["TEMP"] == "C:\\Users\\José Müller\\AppData\\Local\\Temp"
    assert got["path"].split(";")[1] == "C:\\Users\\José Müller\\bin"
    assert got["VSCMD_SKIP_SENDTELEMETRY"] == "1" and got["VSCMD_ARG_TGT_ARCH"] == "x64"
    assert "FLASHBUILD_SET_FILE" not in got and "FLASHBUILD_BATCH" not in got
    assert "[vcvarsall.bat] Environment initialized for: 'x64'" in done.stdout


@pytest.mark.parametrize("folder", ["R&D", "a^b", "x (1)", "100%"])
def test_cmd_u_capture_with_cmd_metacharacters_in_the_paths(tmp_path: Path,
                                                            folder: str) -> None:
    # Issue 20: with TEMP under a profile such as `R&D`, `set > C:\\Users\\R&D\\…` split
    # the line ("Can't recognize 'D\\…'"); with `^` cmd ate the caret ("Path not found").
    # Here both the batch file and the temporary folder sit in such a folder.
    odd = tmp_path / folder
    odd.mkdir()
    bat = odd / BAT.name
    shutil.copy(BAT, bat)
    done, got = _capture(tmp_path, bat if "^" not in folder else BAT, temp=odd)
    assert done.ok, done.output
    assert got["VCToolsVersion"] == "14.44.35207" and got["VSCMD_ARG_TGT_ARCH"] == "x64"
