"""Zero-config on the seed trees of ../shared/corpus (skipped where it is not beside the repo):
`flashbuild build TREE` without --recipe picks the bundled recipe for causal-conv1d by its
content, drafts FlashMLA and xformers (with its submodule) as `recipe init` does, refuses the
xformers clone without submodules naming the command, and stops FlashRT on the draft's
`[install]` TODO unless nothing is installed. Nothing is compiled and no tree is changed."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from flashbuild.building import choose
from flashbuild.errors import RecipeError, TreeError
from tests.conftest import ROOT

CORPUS = ROOT.parent / "shared" / "corpus"
TREES = ("causal-conv1d", "FlashMLA", "xformers-full", "xformers", "FlashRT")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not all((CORPUS / f"{t}.tar.gz").is_file() for t in TREES),
                       reason=f"no seed trees at {CORPUS}"),
]


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("seed")
    for name in TREES:
        with tarfile.open(CORPUS / f"{name}.tar.gz") as tar:
            tar.extractall(out, filter="data")
    return out


def _snapshot(tree: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(tree)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in tree.rglob("*") if p.is_file()}


def _choose(tree: Path, root: Path, *, installing: bool = True) -> choose.Chosen:
    return choose.choose_recipe(None, tree, arch="sm_90a", platform="linux",
                                installing=installing, build_root=root, say=lambda _m: None)


def test_causal_conv1d_gets_its_bundled_recipe(trees: Path, tmp_path: Path) -> None:
    chosen = _choose(trees / "causal-conv1d", tmp_path)
    assert (chosen.how, chosen.recipe.name) == ("bundled", "causal-conv1d")


@pytest.mark.parametrize(("name", "package"), [("FlashMLA", "flash_mla"),
                                               ("xformers-full", "xformers")])
def test_setup_py_trees_are_drafted(trees: Path, tmp_path: Path, name: str,
                                    package: str) -> None:
    tree = trees / name
    before = _snapshot(tree)
    chosen = _choose(tree, tmp_path)
    assert chosen.how == "drafted" and chosen.recipe.build.backend == "setuptools"
    assert chosen.recipe.install is not None and chosen.recipe.install.package == package
    assert chosen.draft is not None and chosen.draft.parent == tmp_path
    assert _snapshot(tree) == before


def test_the_clone_without_submodules_is_refused(trees: Path, tmp_path: Path) -> None:
    with pytest.raises(TreeError) as err:
        _choose(trees / "xformers", tmp_path)
    assert "third_party/cutlass" in str(err.value)
    assert "git submodule update --init --recursive" in err.value.fix
    assert not tmp_path.joinpath("xformers.draft.toml").exists()


def test_flashrt_stops_on_the_install_todo_unless_nothing_is_installed(
        trees: Path, tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as err:
        _choose(trees / "FlashRT", tmp_path)
    assert "[install]" in err.value.evidence and "--install none" in err.value.fix
    chosen = _choose(trees / "FlashRT", tmp_path, installing=False)
    assert chosen.how == "drafted" and chosen.recipe.build.backend == "cmake"
    assert chosen.recipe.artifact
