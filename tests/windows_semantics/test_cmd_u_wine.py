"""The vcvarsall capture against a real cmd.exe: wine's, with a profile folder named José.

`capture_batch_env` builds the same `cmd /u /d /c call <bat> x64 && set > <file>` line it
runs on Windows; a runner that starts it under wine (Linux paths become wine's `Z:` drive)
executes it, and the environment must come back with the non-ASCII folder intact. Skipped
when wine is not installed (`apt-get install wine`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from flashbuild.platforms.windows import capture_batch_env
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
        args = ["Z:" + a.replace("/", "\\") if a.startswith("/") and "/" in a[1:] else a
                for a in args]
        return super().run(["wine", *args], env=env, cwd=cwd, timeout=300, check=check,
                           input=input)


def test_cmd_u_capture_under_wine(tmp_path: Path) -> None:
    if shutil.which("wine") is None:
        pytest.skip("wine not installed (apt-get install wine)")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "WINEPREFIX": str(tmp_path / "prefix"), "WINEDEBUG": "-all",
           "WINEDLLOVERRIDES": "mscoree=;mshtml=", "LANG": "C.UTF-8",
           "FB_PROFILE": "C:\\Users\\José Müller"}
    runner = WineRunner()
    try:
        done, got = capture_batch_env(runner, BAT, ["x64"], env=env)
    finally:
        # Stop this prefix's wineserver (and only it) before tmp_path is cleaned up.
        ProcessRunner().run(["wineserver", "-k"], env=env, check=False)
    assert done.ok, done.output
    assert got["TEMP"] == "C:\\Users\\José Müller\\AppData\\Local\\Temp"
    assert got["path"].split(";")[1] == "C:\\Users\\José Müller\\bin"
    assert got["VSCMD_SKIP_SENDTELEMETRY"] == "1" and got["VSCMD_ARG_TGT_ARCH"] == "x64"
    assert "[vcvarsall.bat] Environment initialized for: 'x64'" in done.stdout
