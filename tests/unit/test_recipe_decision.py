"""One decision, everywhere (issue 28): `scan`, `recipe init`, `patch` and `build` choose the
recipe the same way (pipeline/choose.py `bundled_match`), and `scan` and `recipe init` agree on
what the build does by itself (scanning/proposals.py `handled_by_build`). Static scans only;
nothing is run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.scanning.draft import draft_recipe
from flashbuild.scanning.findings import ScanOptions, Severity, make_target
from flashbuild.scanning.proposals import BUILD_HOOK_ARCH
from flashbuild.scanning.scan import scan_tree
from tests.conftest import FIXTURES

#: A FlashMLA-shaped tree the bundled `flashmla` recipe matches by content (its README-less
#: setup.py says what it holds).
MINI = FIXTURES / "scan" / "flashmla-mini"
HELPERS = "csrc/kerutils/include/kerutils/device/sm80/helpers.cuh"


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.output


def _copy(tmp_path: Path, src: Path = MINI) -> Path:
    tree = tmp_path / "renamed"
    shutil.copytree(src, tree)
    return tree


def test_a_finding_the_build_handles_is_no_scan_error_and_init_says_the_same() -> None:
    # Before: FB220 (a hard-coded gencode list the build hook replaces) was a scan error
    # (exit 11) while recipe init listed it as "handled without a step".
    result = scan_tree(MINI, make_target("linux", "sm120"), ScanOptions(static=True))
    fb220 = [f for f in result.findings if f.rule == "FB220"]
    assert fb220, [f.rule for f in result.findings]
    assert all(f.severity is Severity.WARNING and f.handled == BUILD_HOOK_ARCH
               for f in fb220)
    assert not result.blocking
    drafted = draft_recipe(result, name="t", source_path=".")
    assert [(f.rule, why) for f, why in drafted.handled if f.rule == "FB220"] == [
        ("FB220", BUILD_HOOK_ARCH)] * len(fb220)
    assert not any(f.rule == "FB220" for f in drafted.todos)


def test_scan_names_the_bundled_recipe_and_the_findings_its_steps_fix(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    code, out = _cli("scan", str(tree), "--platform", "windows", "--arch", "sm120", "--static",
                     "--json")
    doc = json.loads(out)
    assert doc["recipe"]["name"] == "flashmla"
    int128 = [f for f in doc["findings"] if f["rule"] == "FB112"]
    assert len(int128) == 5
    assert {(f["path"], f["severity"], f["handled_step"]) for f in int128} == {
        (HELPERS, "warning", "msvc-int128-kerutils")}
    # The only error left is one neither the build nor the recipe's steps fix.
    assert {f["rule"] for f in doc["findings"] if f["severity"] == "error"} == {"FB200"}
    assert code == 11
    code, out = _cli("scan", str(tree), "--platform", "windows", "--arch", "sm120", "--static")
    assert "bundled recipe `flashmla` matches this tree" in out
    assert "(FB112 x5)" in out
    assert "flashbuild recipe show flashmla" in out
    assert f"flashbuild build {tree} --arch sm_120" in out
    assert "drafts the fixes" not in out and "recipe init --source" not in out


def test_scan_promises_only_the_steps_recipe_init_drafts(tmp_path: Path) -> None:
    # minikern for Windows: a finding, but nothing recipe init drafts a step for.
    code, out = _cli("scan", str(FIXTURES / "build" / "minikern"), "--platform", "windows",
                     "--arch", "sm120", "--static")
    assert code == 0, out
    assert "drafts the fixes" not in out
    assert "`flashbuild recipe init` has no step to draft for these" in out
    # A tree with an explicit kernel instantiation MSVC rejects (it leaves out the
    # definition's `__restrict__`): recipe init drafts its guard step.
    tree = tmp_path / "inst"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(inst LANGUAGES CXX CUDA)\n"
        "add_library(inst SHARED k.cu)\n", encoding="utf-8")
    (tree / "k.cu").write_text(
        "template <typename T> __global__ void scale(T* __restrict__ x) "
        "{ x[threadIdx.x] *= 2; }\n"
        "template __global__ void scale<float>(float*);\n", encoding="utf-8")
    code, out = _cli("scan", str(tree), "--platform", "windows", "--arch", "sm120", "--static")
    drafted = draft_recipe(scan_tree(tree, make_target("windows", "sm120"),
                                     ScanOptions(static=True)), name="t", source_path=".")
    assert drafted.steps, out
    assert f"`flashbuild recipe init --source {tree}` drafts {len(drafted.steps)} patch " \
        "step" in out


def test_recipe_init_names_the_bundled_recipe_and_drafts_nothing(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    out_file = tmp_path / "my.toml"
    code, out = _cli("recipe", "init", "--source", str(tree), "--platform", "windows",
                     "--arch", "sm120", "-o", str(out_file))
    assert code == 0, out
    assert not out_file.exists()
    assert "bundled recipe `flashmla` matches this tree" in out
    assert "(FB112 x5)" in out and "flashbuild recipe show flashmla" in out
    assert "--draft" in out  # drafts anyway (tests/unit/test_recipe_init.py drafts csrc so)


def test_patch_takes_the_tree_as_build_does_and_says_which_recipe(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    code, out = _cli("patch", str(tree), "--platform", "linux", "--arch", "sm120", "--dry-run")
    assert code == 0, out
    assert "using the bundled recipe `flashmla`: the tree ships the `flash_mla` package" in out
    # Under --json the line is the document's `chosen`; stdout stays one JSON document.
    code, out = _cli("patch", str(tree), "--platform", "linux", "--arch", "sm120", "--dry-run",
                     "--json")
    assert code == 0, out
    assert json.loads(out)["chosen"].startswith("using the bundled recipe `flashmla`")
    # --source names the same tree.
    code, out = _cli("patch", "--source", str(tree), "--platform", "linux", "--arch", "sm120",
                     "--dry-run")
    assert code == 0, out
    assert "using the bundled recipe `flashmla`" in out


def test_patch_of_a_tree_no_bundled_recipe_matches_names_recipe_init(tmp_path: Path) -> None:
    # Before: `patch --source TREE` applied the csrc recipe to any tree ("matched nothing").
    tree = _copy(tmp_path, FIXTURES / "build" / "minikern")
    code, out = _cli("patch", str(tree), "--platform", "linux", "--arch", "sm120", "--dry-run")
    assert code == 4, out
    assert "no bundled recipe matches" in out
    assert f"flashbuild recipe init --source {tree} -o my.toml" in " ".join(out.split())


def test_patch_with_a_recipe_says_so(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    code, out = _cli("patch", str(tree), "--recipe", "flashmla", "--platform", "linux",
                     "--arch", "sm120", "--dry-run")
    assert code == 0, out
    assert "using the recipe `flashmla` (--recipe flashmla)" in out


def test_ci_init_takes_the_tree_from_a_recipe_files_source(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # The README's chain: `recipe init --source ../t -o ../t/flashbuild.toml`, then
    # `ci init --recipe ../t/flashbuild.toml` from the folder beside the tree.
    tree = tmp_path / "t"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tree / "setup.py").write_text(
        "from setuptools import setup\nfrom torch.utils.cpp_extension import BuildExtension, "
        "CUDAExtension\nsetup(name='pkg', ext_modules=[CUDAExtension('pkg._C', ['k.cu'])], "
        "cmdclass={'build_ext': BuildExtension})\n", encoding="utf-8")
    (tree / "flashbuild.toml").write_text(
        '[recipe]\nname = "t"\n[source]\npath = "."\n[build]\nbackend = "setuptools"\n'
        '[install]\npackage = "pkg"\npackage_dir = "pkg"\n', encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code, out = _cli("ci", "init", "--recipe", "../t/flashbuild.toml", "--arch", "90a;120",
                     "--platform", "linux,windows", "--flashbuild-spec",
                     "flashbuild @ git+https://example.invalid/fb@" + "0" * 40)
    assert code == 0, out
    assert (tree / ".github" / "workflows" / "flashbuild.yml").is_file()
