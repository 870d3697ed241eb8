"""The seed trees of ../shared/corpus built here with one command each, no recipe and no hand
edit (`flashbuild build TREE --arch sm_90a`), as far as this machine allows: nvcc 13.0 without
cuBLAS/cuSPARSE, and a CPU-only torch (its headers, no CUDA libraries, so a setup.py build
stops at the link).

Opt-in: `FLASHBUILD_SEED_BUILDS=1 python -m pytest tests/integration/test_seed_builds.py -n 0`
(about 20 minutes on 2 cores: causal-conv1d's backward kernel alone takes 8). The README's test
command skips it; docs/benchmarks.md has the last run. On a GPU machine with a CUDA torch the
same trees build, install and pass verify and their own tests (bench/gpu_seed_trees.sh).

What each asserts:
- causal-conv1d and xformers (with its CUTLASS submodule): every object of the extension is
  compiled, for sm_90a only, and the build stops at the link on torch's CUDA libraries;
- FlashMLA: its first unit needs headers only a CUDA build of torch and a toolkit with
  cuSPARSE ship, and the build stops there naming the header;
- FlashRT (CMake): the configure stops on the cuBLAS it links, and says where to get it;
- none of the four trees is changed.
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
                       reason="opt-in (FLASHBUILD_SEED_BUILDS=1): about 20 minutes"),
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


@pytest.mark.parametrize(("name", "objects"), [("causal-conv1d", 4), ("xformers-full", 11)])
def test_a_setup_py_seed_tree_compiles_every_unit_and_stops_at_the_link(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch, name: str,
        objects: int) -> None:
    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = _tree(tmp_path, name)
    before = _digest(tree)
    error = _build(tree, tmp_path / "b", cuda_toolkit_root)
    assert error is not None, "a CPU-only torch cannot link a CUDA extension"
    text = error.paragraph()
    assert "c10_cuda" in text or "torch_cuda" in text, text
    built = [p for p in (tmp_path / "b").rglob("*.o") if "cuda" in p.name or p.suffix == ".o"]
    cu_objects = [p for p in built if p.name.endswith(".cuda.o") or p.name.endswith("cu.o")]
    assert len(cu_objects) >= objects, sorted(p.name for p in built)
    assert _digest(tree) == before


def test_flashmla_stops_at_its_first_unit_naming_what_this_machine_lacks(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    tree = _tree(tmp_path, "FlashMLA")
    before = _digest(tree)
    error = _build(tree, tmp_path / "b", cuda_toolkit_root)
    assert error is not None
    text = error.paragraph()
    assert "cusparse.h" in text or "cuda_cmake_macros.h" in text, text
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
