"""The recipe `flashbuild recipe init` drafts for windows + sm_120, applied with `flashbuild
patch` to a copy of csrc, makes every csrc translation unit compile with nvcc + gcc for sm_120
(compile-only, -j2): no hand edits. And the draft's build side ([build], [[artifact]],
[install], [verify]) is enough for `flashbuild build` + `flashbuild verify` as drafted (one
real build of a copy of csrc for sm_120, -j2, installed in place into the copy)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.proc import ProcessRunner

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def test_drafted_recipe_makes_csrc_compile_for_windows_sm120(tmp_path: Path,
                                                             cuda_toolkit_root: Path) -> None:
    import pybind11

    override = os.environ.get("FLASHBUILD_TEST_CUDA_ROOT")
    nvcc = Path(override or cuda_toolkit_root) / "bin" / "nvcc"
    tree = tmp_path / "csrc"
    shutil.copytree(ROOT / "csrc", tree, ignore=shutil.ignore_patterns("__pycache__", "build*"))
    recipe = tmp_path / "drafted.toml"
    runner = CliRunner()
    res = runner.invoke(app, ["recipe", "init", "--draft", "--source", str(tree), "--platform",
                              "windows", "--arch", "sm120", "-o", str(recipe)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["patch", "--recipe", str(recipe), "--source", str(tree),
                              "--platform", "windows", "--arch", "sm120"])
    assert res.exit_code == 0, res.output
    # After the patch the Windows + sm_120 scan has no blocking C++/CUDA finding left.
    res = runner.invoke(app, ["scan", str(tree), "--platform", "linux", "--arch", "sm120",
                              "--json"])
    assert res.exit_code == 0, res.output

    sources = sorted(p for p in tree.rglob("*") if p.suffix in (".cu", ".cpp")
                     and "sm90" not in p.parts)
    includes = ["-I", str(tree), "-I", pybind11.get_include(),
                "-I", sysconfig.get_paths()["include"]]
    run = ProcessRunner()

    def compile_one(src: Path) -> None:
        out = tmp_path / "obj" / (src.name + ".o")
        out.parent.mkdir(exist_ok=True)
        run.run([str(nvcc), "-std=c++17", "-c", "-gencode", "arch=compute_120,code=sm_120",
                 "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC", *includes,
                 str(src), "-o", str(out)], timeout=600)

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(compile_one, sources))
    assert len(list((tmp_path / "obj").glob("*.o"))) == len(sources)


def test_drafted_recipe_builds_and_verifies_csrc_for_sm120(tmp_path: Path,
                                                         cuda_toolkit_root: Path) -> None:
    tree = tmp_path / "csrc"
    shutil.copytree(ROOT / "csrc", tree, ignore=shutil.ignore_patterns(
        "build*", "__pycache__", "*.so", ".flashbuild", "flashbuild-manifest.json"))
    recipe = tmp_path / "drafted.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--draft", "--source", str(tree), "--platform",
                                   "linux", "--arch", "sm120", "-o", str(recipe)])
    assert res.exit_code == 0, res.output
    text = recipe.read_text(encoding="utf-8")
    assert "[build]" in text and "[install]" in text and "[verify]" in text, text

    def flashbuild(*args: str) -> tuple[int, str, str]:
        done = subprocess.run([sys.executable, "-m", "flashbuild", *args], cwd=tmp_path,
                              capture_output=True, text=True, check=False, timeout=900)
        return done.returncode, done.stdout, done.stdout[-4000:] + done.stderr[-4000:]

    code, _, output = flashbuild("build", "--recipe", str(recipe), "--arch", "sm120",
                                 "--cuda", str(cuda_toolkit_root), "--install", "inplace",
                                 "--jobs", "2", "--launcher", "none",
                                 "--build-dir", str(tmp_path / "build"))
    assert code == 0, output
    pkg = tree / "python" / "flashkern"
    manifest = json.loads((pkg / "flashbuild-manifest.json").read_text(encoding="utf-8"))
    assert sorted(a["kind"] for a in manifest["artifacts"]) == ["module", "plugin"]
    assert "_C.attention_plugin_name" in manifest["exports"]
    code, stdout, output = flashbuild("verify", str(pkg), "--arch", "sm120", "--no-gpu",
                                      "--json")
    assert code == 0, output
    report = json.loads(stdout)
    exports = [c for c in report["checks"] if c["area"] == "exports"]
    assert [c["status"] for c in exports] == ["ok"], exports
