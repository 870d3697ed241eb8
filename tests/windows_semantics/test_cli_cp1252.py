"""Every command's human output with stdout piped and PYTHONIOENCODING=cp1252 (issue 11, item 1).

That is what a GitHub Windows runner gives a step: Python encodes a piped stdout in the ANSI
code page, where "→", "✓" and "✗" do not exist. Each command runs as `python -m flashbuild`
in a child process (the real entry point, which prepares the streams); it may succeed or
report a problem with its documented exit code, but never end in an encoding error or an
internal error, and what it prints must decode as cp1252."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from flashbuild.installing.manifest import Artifact, HostCompiler, Manifest, Toolkit

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
INTERNAL_ERROR = 1  # FlashbuildError's own code: what the CLI edge gives a bug


def _run(args: list[str], tmp_path: Path, *, cwd: Path = ROOT) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONIOENCODING": "cp1252", "XDG_CACHE_HOME": str(tmp_path / "xdg"),
           "COLUMNS": "80"}
    env.pop("PYTHONUTF8", None)
    done = subprocess.run([sys.executable, "-m", "flashbuild", *args], cwd=cwd, env=env,
                          capture_output=True, timeout=120, check=False)
    out = done.stdout.decode("cp1252")  # raises if the child wrote anything else
    err = done.stderr.decode("cp1252")
    for text in (out, err):
        assert "UnicodeEncodeError" not in text and "Traceback" not in text, text
        assert "internal error" not in text, text
    assert done.returncode != INTERNAL_ERROR, out + err
    return done.returncode, out, err


HELP = [[], ["doctor"], ["verify"], ["patch"], ["build"], ["scan"], ["recipe"],
        ["recipe", "list"], ["recipe", "show"], ["recipe", "check"], ["recipe", "init"]]


def test_help_of_every_command(tmp_path: Path) -> None:
    for command in HELP:
        code, out, _ = _run([*command, "--help"], tmp_path)
        assert code == 0 and "Usage:" in out, command
        # Item 9: a flag takes no value, so its help shows no `<bool>` placeholder.
        assert "<bool>" not in out, command


def test_doctor(tmp_path: Path) -> None:
    code, out, _ = _run(["doctor", "--arch", "sm120"], tmp_path)
    assert code in (0, 3)
    assert "✓" not in out and ("ok    nothing blocks a build" in out or "error " in out)


def test_scan_and_recipe_init(tmp_path: Path) -> None:
    tree = FIX / "scan" / "othertree"
    code, out, _ = _run(["scan", str(tree), "--platform", "windows", "-j", "1"], tmp_path)
    assert code == 11 and "14 errors, 6 warnings, 0 notes" in out
    code, out, _ = _run(["recipe", "init", "--source", str(tree), "--platform", "windows"],
                        tmp_path)
    assert code == 0 and "[[patch]]" in out


def test_patch_dry_run_with_explain(tmp_path: Path) -> None:
    tree = tmp_path / "csrc"
    shutil.copytree(ROOT / "csrc", tree)
    code, out, _ = _run(["patch", "--recipe", "csrc", "--source", str(tree), "--platform",
                         "windows", "--arch", "sm120", "--dry-run", "--explain"], tmp_path)
    assert code == 0 and "files would be written" in out


def test_recipe_list_show_check(tmp_path: Path) -> None:
    assert _run(["recipe", "list"], tmp_path)[0] == 0
    assert _run(["recipe", "show", "csrc"], tmp_path)[0] == 0
    code, out, _ = _run(["recipe", "check", str(ROOT / "recipes" / "csrc.toml")], tmp_path)
    assert code == 0 and "is valid" in out
    broken = tmp_path / "broken→.toml"
    broken.write_text("[recipe]\nname = 'x'\nbogus = 1\n", encoding="utf-8")
    code, _, err = _run(["recipe", "check", str(broken)], tmp_path)
    assert code == 4 and "broken->.toml" in err  # a name the code page lacks, degraded


def test_verify_an_installed_fixture(tmp_path: Path) -> None:
    pkg = tmp_path / "site" / "flashkern"
    pkg.mkdir(parents=True)
    shutil.copy(FIX / "verify" / "sass_ptx_sm120.o", pkg / "sass_ptx_sm120.o")
    Manifest(flashbuild="0.1.0", recipe="csrc", platform="linux", archs="120",
             toolkit=Toolkit(root="/cuda", version="13.0"),
             host_compiler=HostCompiler(kind="gcc", version="12", path="/usr/bin/g++"),
             artifacts=(Artifact(path="sass_ptx_sm120.o", kind="module"),)).write(pkg)
    code, out, _ = _run(["verify", str(pkg), "--no-gpu"], tmp_path)
    assert code in (0, 8)
    assert "targets sm_120)" in out  # item 9: the user's spelling, not `120-real`


def test_build_error_path(tmp_path: Path) -> None:
    # A real build needs a toolchain; its error paths print through the same console.
    code, _, err = _run(["build", "--recipe", str(tmp_path / "missing→.toml")], tmp_path)
    assert code in (2, 4) and "error:" in err
