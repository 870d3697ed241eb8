"""A C-API source written when Python's type checks were self-parenthesising macros
(tests/fixtures/pyapi/bareif; libKMCUDA 6.2.3's python.cc:202): `} else if PyTuple_Check(x) {`.
The scan reports each such condition in code (not in comments, strings or `if constexpr`),
recipe init drafts the parentheses, and g++ with this Python's headers, which refuses the
pristine file when they are 3.11's or newer, compiles the patched one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.scanning.findings import ScanOptions, make_target
from flashbuild.scanning.scan import scan_tree

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pyapi" / "bareif"


def _syntax(cxx: str, source: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([cxx, "-std=c++17", "-fsyntax-only", "-I",
                           sysconfig.get_paths()["include"], str(source)],
                          capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, "LC_ALL": "C"})


def test_each_bare_condition_in_code_is_found() -> None:
    result = scan_tree(FIXTURE, make_target("linux", "sm_90a"),
                       ScanOptions(static=True, jobs=1))
    found = sorted((f.line, f.message.split("`")[1]) for f in result.findings
                   if f.rule == "FB123")
    assert found == [(9, "if PyTuple_Check(x)"), (12, "while PyList_Check(x)")]


def test_the_drafted_parentheses_make_the_file_compile(tmp_path: Path) -> None:
    cxx = shutil.which("g++")
    if cxx is None or not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        pytest.skip("no g++ or no Python.h")
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    draft = tmp_path / "draft.toml"
    runner = CliRunner()
    made = runner.invoke(app, ["recipe", "init", "--source", str(tree), "--platform",
                               "linux", "--arch", "sm_90a", "-o", str(draft)])
    assert made.exit_code == 0, made.output
    # flashbuild needs Python >= 3.11, whose headers refuse it.
    refused = _syntax(cxx, tree / "module.cc")
    assert refused.returncode != 0 and "expected '('" in refused.stderr, refused.stderr
    patched = runner.invoke(app, ["patch", "--recipe", str(draft), "--source", str(tree),
                                  "--platform", "linux", "--arch", "sm_90a"])
    assert patched.exit_code == 0, patched.output
    text = (tree / "module.cc").read_text(encoding="utf-8")
    assert "} else if (PyTuple_Check(x)) {" in text and "while (PyList_Check(x))" in text
    assert "// if PyLong_Check(x) { in a comment" in text
    built = _syntax(cxx, tree / "module.cc")
    assert built.returncode == 0, built.stderr
