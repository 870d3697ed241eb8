"""Every screen a newcomer sees, at 80 columns, piped, under PYTHONIOENCODING=ascii: each
command's --help, `recipe list/show`, `patch --explain`, `scan`, `doctor` and `verify`.

Checked on the real entry point (`python -m flashbuild` in a child process):
- nothing is cut: no ellipsis anywhere a table could have put one, and every id and path the
  command's own data names (recipe step ids, diff paths, files, scan locations) shows whole;
- tables are aligned: every line of a box has the same width, at most 80, in ASCII too (a "…"
  that became "..." used to push its row out of line);
- help text is not ragged: the command list gives each command one line, and a paragraph's
  line never ends where the next line's first word would still have fitted (the docstrings'
  hard line breaks used to survive into the help).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.installing.manifest import Artifact, HostCompiler, Manifest, Toolkit
from tests.conftest import FIXTURES, ROOT

pytestmark = pytest.mark.integration

WIDTH = 80
HELP = [[], ["doctor"], ["verify"], ["patch"], ["build"], ["scan"], ["recipe"],
        ["recipe", "list"], ["recipe", "show"], ["recipe", "check"], ["recipe", "init"]]
BOX = "+|\u2577\u2575\u256d\u2570\u2502\u2503\u250f\u2517\u2523\u2521\u2514\u250c\u2500"


def _run(args: list[str], tmp_path: Path, *, ok: tuple[int, ...] = (0,)) -> str:
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "COLUMNS": str(WIDTH),
           "XDG_CACHE_HOME": str(tmp_path / "xdg"), "TERM": "dumb"}
    env.pop("PYTHONUTF8", None)
    done = subprocess.run([sys.executable, "-m", "flashbuild", *args], cwd=ROOT, env=env,
                          capture_output=True, timeout=180, check=False)
    out = done.stdout.decode("ascii")  # raises if anything but ASCII was written
    assert done.returncode in ok, (args, done.returncode, out, done.stderr.decode())
    return out


def _boxes(out: str) -> list[list[str]]:
    """Runs of consecutive lines that belong to a drawn box (a table or a help panel)."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in out.splitlines():
        if line[:1] and line[0] in BOX:
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def _assert_aligned(out: str) -> None:
    for block in _boxes(out):
        widths = {len(line.rstrip()) for line in block}
        assert len(widths) == 1, "a box with rows of different widths:\n" + "\n".join(block)
        assert widths.pop() <= WIDTH, "\n".join(block)


def _assert_not_cut(out: str, *whole: str) -> None:
    assert "..." not in out and "\u2026" not in out, out
    for text in whole:
        assert text in out, f"{text!r} is not shown whole:\n{out}"


def _assert_paragraphs_fill(out: str) -> None:
    """Outside the boxes, a help paragraph's lines are filled greedily: the first word of a
    continuation line would not have fitted at the end of the line before it."""
    lines = out.splitlines()
    for above, below in itertools.pairwise(lines):
        if not (above.startswith(" ") and below.startswith(" ")):
            continue
        if above.strip() == "" or below.strip() == "" or "Usage:" in above:
            continue
        if above.lstrip()[:1] in BOX or below.lstrip()[:1] in BOX:
            continue
        first = below.split()[0]
        assert len(above.rstrip()) + 1 + len(first) > WIDTH - 1, (
            f"ragged help: {first!r} fits after\n{above}\n{below}")


@pytest.mark.parametrize("command", HELP, ids=lambda c: " ".join(c) or "flashbuild")
def test_help_at_80_columns(command: list[str], tmp_path: Path) -> None:
    out = _run([*command, "--help"], tmp_path)
    _assert_aligned(out)
    _assert_paragraphs_fill(out)
    assert "..." not in out.replace("[ARGS]...", "")
    panel = re.search(r"Commands -+\+?\n(.*?)\n\+-", out, re.DOTALL)
    if panel:  # the command list: one line per command, its one-line summary
        for row in panel.group(1).splitlines():
            assert re.match(r"\| [a-z]", row), f"a command's summary wraps:\n{panel.group(1)}"


def test_bare_flashbuild_prints_help_and_exits_0(tmp_path: Path) -> None:
    out = _run([], tmp_path, ok=(0,))
    assert "Usage:" in out and "Commands" in out


def test_recipe_list_and_show_at_80_columns(tmp_path: Path) -> None:
    from flashbuild.recipes.load import bundled_recipes, load_recipe

    out = _run(["recipe", "list"], tmp_path)
    _assert_aligned(out)
    _assert_not_cut(out, *(str(path) for path in bundled_recipes()))
    for path in bundled_recipes():
        recipe = load_recipe(path)
        out = _run(["recipe", "show", recipe.name], tmp_path)
        _assert_aligned(out)
        _assert_not_cut(out, *(s.id for s in recipe.patch),
                        *(s.diff for s in recipe.patch if s.diff))


def test_patch_explain_at_80_columns(tmp_path: Path) -> None:
    from flashbuild.recipes.load import load_recipe

    tree = tmp_path / "csrc"
    shutil.copytree(ROOT / "csrc", tree)
    out = _run(["patch", "--recipe", "csrc", "--source", str(tree), "--platform", "windows",
                "--arch", "sm120", "--dry-run", "--explain"], tmp_path)
    # The README's example: a summary per step and one line per file, not the 710 lines of
    # every site and the whole diff it printed before issue 28.
    lines = out.splitlines()
    assert len(lines) <= 40, out
    assert all(len(line) <= WIDTH for line in lines if str(tree) not in line), out
    assert not any(line.startswith(("---", "+++", "@@")) for line in lines), out
    steps = load_recipe("csrc").patch
    for step in steps:
        assert any(line.startswith(("yes ", "no  ")) and f" {step.id} (" in line
                   for line in lines), step.id
    assert sum(line.startswith("    why: ") for line in lines) == len(steps)
    # -v: every site and the diff; the report's own lines still fit.
    detail = _run(["-v", "patch", "--recipe", "csrc", "--source", str(tree), "--platform",
                   "windows", "--arch", "sm120", "--dry-run", "--explain"], tmp_path)
    report = detail.split("--- a/")[0].splitlines()
    assert len(detail.splitlines()) > 300 and "keep kernels/norm.cu:267" in detail
    assert all(len(line) <= WIDTH for line in report if str(tree) not in line)


def test_scan_at_80_columns(tmp_path: Path) -> None:
    tree = FIXTURES / "scan" / "othertree"
    args = ["scan", str(tree), "--platform", "windows", "-j", "1"]
    out = _run(args, tmp_path, ok=(11,))
    report = json.loads(_run([*args, "--json"], tmp_path, ok=(11,)))
    _assert_aligned(out)
    for finding in report["findings"]:
        if finding["severity"] != "note":
            assert f"\n{finding['path']}:" in out, finding["path"]
    assert re.search(r": (error|warn) FB\d+", out)  # the verdict words doctor and verify use


def test_doctor_at_80_columns(tmp_path: Path) -> None:
    out = _run(["doctor", "--arch", "sm120"], tmp_path, ok=(0, 3))
    report = json.loads(_run(["doctor", "--arch", "sm120", "--json"], tmp_path, ok=(0, 3)))
    _assert_aligned(out)
    assert "..." not in out
    for toolkit in (report["toolkits"] or {}).get("candidates", []):
        assert toolkit["root"] in out, toolkit["root"]
    # A verdict line is indented two spaces (its evidence and fix six).
    words = {line.split()[0] for line in out.splitlines() if re.match(r"  \S", line)}
    assert words and words <= {"ok", "warn", "error", "skip"}, words


def test_verify_at_80_columns(tmp_path: Path) -> None:
    pkg = tmp_path / "site" / "flashkern"
    pkg.mkdir(parents=True)
    shutil.copy(FIXTURES / "verify" / "sass_ptx_sm120.o", pkg / "sass_ptx_sm120.o")
    Manifest(flashbuild="0.1.0", recipe="csrc", platform="linux", archs="120",
             toolkit=Toolkit(root="/cuda", version="13.0"),
             host_compiler=HostCompiler(kind="gcc", version="12", path="/usr/bin/g++"),
             artifacts=(Artifact(path="sass_ptx_sm120.o", kind="module"),)).write(pkg)
    out = _run(["verify", str(pkg), "--no-gpu"], tmp_path, ok=(0, 8))
    _assert_aligned(out)
    assert str(pkg) in out
    checks = [line.split()[0] for line in out.splitlines() if line.startswith("  ")
              and line.split() and line.split()[0].isalpha()]
    assert checks and set(checks) <= {"ok", "warn", "error", "skip", "fix:"}, checks
