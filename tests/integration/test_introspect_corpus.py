"""recipe init with introspection on the seed trees of ../shared/corpus (linux / sm_90a): the
drafted build tables are what the configured build says, and the tree is left byte-identical.
Skips when the corpus or a CUDA toolkit is not there."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.recipes.load import parse_recipe
from tests.markers import needs_torch

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _tree(name: str, tmp_path: Path) -> Path:
    tarball = CORPUS / f"{name}.tar.gz"
    if not tarball.is_file():
        pytest.skip(f"no {tarball}")
    with tarfile.open(tarball) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / name


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            h.update(p.relative_to(root).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


def _init(name: str, tmp_path: Path) -> tuple[str, Path]:
    tree = _tree(name, tmp_path)
    before = _digest(tree)
    out = tmp_path / f"{name}.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--draft", "--source", str(tree), "--platform",
                                   "linux", "--arch", "sm_90a", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert _digest(tree) == before, "recipe init changed the tree"
    text = out.read_text(encoding="utf-8")
    assert "build tables: checked against the configured build" in text, text[:2000]
    return text, out


@pytest.mark.usefixtures("cuda_toolkit_root")
def test_flashrt_draft_names_only_what_this_configuration_builds(tmp_path: Path) -> None:
    text, out = _init("FlashRT", tmp_path)
    recipe = parse_recipe(text, out)
    # flash_vla_fa2 exists only for GPU_ARCH 80/86/89/120, flash_vla_fp4 and the plugins for
    # 100/110 (issue 18: the static draft listed them and ninja stopped on "unknown target").
    assert recipe.build.targets == ("flash_vla_kernels",)
    assert "flash_vla_fa2 (CMakeLists.txt:" in text
    assert [o.define for o in recipe.build.options] == [{"GPU_ARCH": "{arch_numbers}"}]
    assert recipe.install is not None
    assert (recipe.install.package, recipe.install.package_dir) == ("flash_vla", "flash_vla")
    # Exports come only from the preprocessed bindings: none drafted from the text.
    assert len(recipe.verify.exports) < 100


@pytest.mark.usefixtures("cuda_toolkit_root")
@needs_torch  # record mode runs the setup.py through torch's BuildExtension
@pytest.mark.parametrize(("name", "package"), [
    pytest.param("FlashMLA", "flash_mla", marks=pytest.mark.heavy),
    ("xformers-full", "xformers")])
def test_setup_py_seed_trees_are_recorded(name: str, package: str, tmp_path: Path) -> None:
    text, out = _init(name, tmp_path)
    recipe = parse_recipe(text, out)
    assert recipe.build.backend == "setuptools"
    assert recipe.install is not None and recipe.install.package == package
    assert "setup.py record mode: builds" in text
    assert "setup.py raises" not in text
