"""The recipe `flashbuild recipe init` drafts for windows + sm_120, applied with `flashbuild
patch` to a copy of csrc, makes every csrc translation unit compile with nvcc + gcc for sm_120
(compile-only, -j2): no hand edits."""

from __future__ import annotations

import os
import shutil
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
    res = runner.invoke(app, ["recipe", "init", "--source", str(tree), "--platform", "windows",
                              "--arch", "sm120", "-o", str(recipe)])
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
