"""A CMake tree that chooses its own arch (a GPU_ARCH cache variable defaulting to 89): without
the recipe handing --arch over, flashbuild stops after configure with the variable named; with
`define = { GPU_ARCH = "{arch_codes}" }` it builds exactly the requested SASS. Real CMake, Ninja
and nvcc (the PyPI toolkit fixture); nothing runs on a GPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.verifying.fatbin import list_images

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "build" / "archvar"


def _build(tree: Path, cuda: Path, build_dir: Path) -> tuple[int, dict[str, object], str]:
    argv = [sys.executable, "-m", "flashbuild", "build", "--recipe", str(tree / "archvar.toml"),
            "--arch", "sm_90a", "--cuda", str(cuda), "--jobs", "2", "--launcher", "none",
            "--install", "none", "--build-dir", str(build_dir), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900)
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = {}
    return done.returncode, doc, done.stderr


def test_the_arch_the_project_chose_is_checked_then_handed_over(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:
    tree = tmp_path / "archvar"
    shutil.copytree(FIXTURE, tree)
    build_dir = tmp_path / "b"

    code, doc, err = _build(tree, cuda_toolkit_root, build_dir)
    assert code == 6, (doc, err)
    text = json.dumps(doc) + err
    assert "sm_89" in text and "lacks sm_90a" in text
    assert "GPU_ARCH=89" in text, "the project's own variable is named in the evidence"
    assert not list(build_dir.rglob("kernel.cu.o")), "nothing may compile for the wrong arch"

    recipe = tree / "archvar.toml"
    recipe.write_text(recipe.read_text() + '\n[[build.options]]\n'
                      'define = { GPU_ARCH = "{arch_codes}" }\n')
    code, doc, err = _build(tree, cuda_toolkit_root, build_dir)
    assert code == 0, (doc, err)
    built = [Path(str(a["path"])) for a in doc["artifacts"]]  # type: ignore[index,union-attr]
    images = list_images(built[0])
    assert {i.name for i in images.sass} == {"sm_90a"}


def test_arch_flags_in_nvccs_environment_are_part_of_the_proof(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:
    """NVCC_APPEND_FLAGS from the recipe's [[build.env]] reaches every nvcc command but no
    build.ninja: it used to smuggle sm_80 into a --arch sm_90a build with exit 0."""
    tree = tmp_path / "archvar"
    shutil.copytree(FIXTURE, tree)
    recipe = tree / "archvar.toml"
    recipe.write_text(recipe.read_text() + '\n[[build.options]]\n'
                      'define = { GPU_ARCH = "{arch_codes}" }\n'
                      '\n[[build.env]]\n'
                      'set = { NVCC_APPEND_FLAGS = "-gencode arch=compute_80,code=sm_80" }\n')
    code, doc, err = _build(tree, cuda_toolkit_root, tmp_path / "b")
    assert code == 6, (doc, err)
    assert "nvcc's environment adds sm_80" in str(doc["what"]), doc
    assert "NVCC_APPEND_FLAGS=-gencode arch=compute_80,code=sm_80 (from the recipe's " \
        "[[build.env]])" in str(doc["evidence"]), doc
    assert not list((tmp_path / "b").rglob("kernel.cu.o")), "nothing may compile"
