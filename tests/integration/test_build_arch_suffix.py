"""`--arch sm_120` on a CMake tree that appends the `a` itself (FlashRT's class: GPU_ARCH=120
becomes sm_120a), issue 28. Without the arch handed over, the arch check names the tree's
GPU_ARCH, never the BOOL option beside it; with it, the check stops with the one `--arch` to
type (sm_120a); a recipe with `[build] arch_suffix = "a"` builds sm_120a for `--arch sm_120`
and says so. Real CMake, Ninja and nvcc (the PyPI toolkit fixture); nothing runs on a GPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.verifying.fatbin import list_images

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "build" / "archsuffix"


def _build(tree: Path, cuda: Path, build_dir: Path) -> tuple[int, dict[str, object], str]:
    argv = [sys.executable, "-m", "flashbuild", "build", "--recipe",
            str(tree / "archsuffix.toml"), "--arch", "sm_120", "--cuda", str(cuda), "--jobs",
            "2", "--launcher", "none", "--install", "none", "--build-dir", str(build_dir),
            "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900)
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = {}
    return done.returncode, doc, done.stderr


def test_a_tree_that_adds_the_a_itself(tmp_path: Path, cuda_toolkit_root: Path) -> None:
    tree = tmp_path / "archsuffix"
    shutil.copytree(FIXTURE, tree)
    recipe = tree / "archsuffix.toml"
    build_dir = tmp_path / "b"

    # 1. The tree builds its own default (sm_90a): the fix names GPU_ARCH, not the BOOL.
    code, doc, err = _build(tree, cuda_toolkit_root, build_dir)
    assert code == 6, (doc, err)
    assert "FA_ARCH_NATIVE_ONLY=OFF" in str(doc["evidence"]), doc
    assert "define = { GPU_ARCH = \"{arch_numbers}\" }" in str(doc["fix"]), doc
    assert "FA_ARCH_NATIVE_ONLY =" not in str(doc["fix"]), doc

    # 2. GPU_ARCH handed over: the tree compiles sm_120a; the fix is the --arch to type.
    recipe.write_text(recipe.read_text() + '\n[[build.options]]\n'
                      'define = { GPU_ARCH = "{arch_numbers}" }\n')
    code, doc, err = _build(tree, cuda_toolkit_root, build_dir)
    assert code == 6, (doc, err)
    assert doc["fix"] == "build with `--arch sm_120a`", doc
    assert "runs only on compute capability 12.0" in str(doc["evidence"]), doc
    assert not list(build_dir.rglob("kernel.cu.o")), "nothing may compile for the wrong arch"

    # 3. The recipe says the tree builds the `a` variant: --arch sm_120 builds as sm_120a.
    recipe.write_text(recipe.read_text().replace(
        'targets = ["archsuffix"]', 'targets = ["archsuffix"]\narch_suffix = "a"'))
    code, doc, err = _build(tree, cuda_toolkit_root, build_dir)
    assert code == 0, (doc, err)
    notes = " ".join(str(n) for n in doc["notes"])  # type: ignore[union-attr]
    assert "--arch sm_120 is built as sm_120a" in notes, doc
    assert "runs only on compute capability 12.0" in notes, doc
    built = [Path(str(a["path"])) for a in doc["artifacts"]]  # type: ignore[index,union-attr]
    assert {i.name for i in list_images(built[0]).sass} == {"sm_120a"}
