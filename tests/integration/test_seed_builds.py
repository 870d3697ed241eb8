"""The seed trees of ../shared/corpus built here with one command each, no recipe and no hand
edit (`flashbuild build TREE --arch sm_90a`), as far as this machine allows: nvcc 13.0 without
cuBLAS/cuSPARSE, and a CPU-only torch 2.13 (its headers lack the generated
`c10/cuda/impl/cuda_cmake_macros.h` that CUDA builds of torch ship, so a unit that includes
torch's c10/cuda headers stops; the link stops on its missing CUDA libraries).

Opt-in: `FLASHBUILD_SEED_BUILDS=1 python -m pytest tests/integration/test_seed_builds.py -n 0`
(about 4 minutes on 2 cores). The README's test command skips it; docs/benchmarks.md has the
last run. On a GPU machine with a CUDA torch the same trees build, install and pass verify
and their own tests (bench/gpu_seed_trees.sh).

What each asserts, besides the tree being unchanged:
- causal-conv1d, xformers (with its CUTLASS submodule), FlashMLA: the bundled recipe is chosen
  by content, torch's build.ninja asks nvcc for sm_90a alone for every CUDA source (the tree's
  own gencode lists replaced), and the build goes as far as this machine lets it: causal-conv1d
  to the header a CPU-only torch lacks, FlashMLA to the cuSPARSE header this toolkit lacks,
  xformers through every unit to the link on torch's CUDA libraries;
- FlashRT (CMake): the configure stops on the cuBLAS it links, and the fix names where to get
  it (with a toolkit that has cuBLAS it compiles: not this case);
- `recipe init` then `build --recipe` with that draft, no hand edit (xformers, FlashMLA,
  FlashRT): the drafted [install] package is the modules' and the build stops where the
  bundled recipe's does.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tarfile
from pathlib import Path

import pytest

from flashbuild.building.backends import setuptools as st
from flashbuild.errors import FlashbuildError
from tests.conftest import ROOT

CORPUS = ROOT.parent / "shared" / "corpus"

pytestmark = [
    pytest.mark.integration, pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("FLASHBUILD_SEED_BUILDS") != "1",
                       reason="opt-in (FLASHBUILD_SEED_BUILDS=1): about 4 minutes"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                       reason="torch is not installed"),
]


def _tree(tmp_path: Path, name: str) -> Path:
    tarball = CORPUS / f"{name}.tar.gz"
    if not tarball.is_file():
        pytest.skip(f"no {tarball}")
    with tarfile.open(tarball) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    return tmp_path / "src" / name


def _digest(tree: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(tree.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(tree).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


def _build(tree: Path, build_dir: Path, cuda: Path) -> FlashbuildError | None:
    from flashbuild.pipeline.command import run_build

    try:
        run_build(recipe=None, source=tree, arch="sm_90a", cuda=cuda, platform=None,
                  jobs_text="2", launcher_text="none", install_text="none",
                  build_dir=build_dir, as_json=True)
    except FlashbuildError as exc:
        return exc
    return None


@pytest.mark.parametrize(("name", "sources", "stop"), [
    # Its first unit includes torch's c10/cuda headers.
    ("causal-conv1d", 3, "cuda_cmake_macros.h"),
    # Its units compile (sm_90a); the link needs torch's CUDA libraries.
    ("xformers-full", 11, "cannot find -lc10_cuda"),
    # Its first unit reaches torch's ATen/cuda headers, which include cuSPARSE's.
    ("FlashMLA", 20, "cusparse.h"),
])
def test_a_setup_py_seed_tree_compiles_for_the_arch_until_this_machine_stops_it(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch, name: str,
        sources: int, stop: str) -> None:
    from flashbuild.building.archcheck import ninja_arch_flags

    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = _tree(tmp_path, name)
    before = _digest(tree)
    error = _build(tree, tmp_path / "b", cuda_toolkit_root)
    assert error is not None, "a CPU-only torch cannot build a CUDA extension"
    assert stop in error.paragraph(), error.paragraph()
    (ninja,) = (tmp_path / "b").rglob("build.ninja")
    flags = ninja_arch_flags(ninja)
    assert flags.sass == {"sm_90a"} and not flags.wide, flags
    text = ninja.read_text(encoding="utf-8")
    assert text.count("cuda_compile") - 1 >= sources, "fewer CUDA sources than the tree has"
    assert _digest(tree) == before


def test_flashrt_configures_until_the_cublas_it_links(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:
    if list(cuda_toolkit_root.rglob("libcublas.so*")):
        pytest.skip("this toolkit has cuBLAS: FlashRT compiles (not the case this test is for)")
    tree = _tree(tmp_path, "FlashRT")
    before = _digest(tree)
    error = _build(tree, tmp_path / "b", cuda_toolkit_root)
    assert error is not None
    text = error.paragraph()
    assert "CUDA::cublas" in text and "cublas" in text.split("fix:")[-1].lower(), text
    assert _digest(tree) == before


@pytest.mark.parametrize(("name", "package", "stop"), [
    ("xformers-full", "xformers", "cannot find -lc10_cuda"),
    ("FlashMLA", "flash_mla", "cusparse.h"),
    ("FlashRT", "flash_vla", "CUDA::cublas"),
])
def test_recipe_init_then_build_with_that_draft(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch, name: str,
        package: str, stop: str) -> None:
    """`flashbuild recipe init --source T --platform linux --arch sm_90a -o T.toml`, then
    `flashbuild build --recipe T.toml` with the draft as written: the drafted [install] is the
    package the build's modules belong to, and the build goes as far as with the bundled
    recipe (the same stop)."""
    from typer.testing import CliRunner

    from flashbuild.cli import app
    from flashbuild.pipeline.command import run_build
    from flashbuild.recipes.load import parse_recipe

    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = _tree(tmp_path, name)
    before = _digest(tree)
    draft = tmp_path / f"{name}.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--draft", "--source", str(tree), "--platform",
                                   "linux", "--arch", "sm_90a", "-o", str(draft)])
    assert res.exit_code == 0, res.output
    recipe = parse_recipe(draft.read_text(encoding="utf-8"), draft)
    assert recipe.install is not None and recipe.install.package == package
    with pytest.raises(FlashbuildError) as info:
        run_build(recipe=str(draft), source=tree, arch="sm_90a", cuda=cuda_toolkit_root,
                  platform=None, jobs_text="2", launcher_text="none", install_text="none",
                  build_dir=tmp_path / "b", as_json=True)
    assert stop in info.value.paragraph(), info.value.paragraph()
    assert _digest(tree) == before
