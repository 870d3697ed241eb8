"""Zero-config on the seed trees of ../shared/corpus (skipped where it is not beside the repo):
`flashbuild build TREE` without --recipe picks the bundled recipe of each seed tree by its
content and refuses the xformers clone without submodules naming the command. Where no bundled
recipe matched, it drafts as `recipe init` does: those tests (xformers with its submodule,
FlashRT from its configured CMake build) are in test_introspect_corpus.py, beside `recipe
init`'s draft of the same tree, whose configure or record they reuse. Nothing is compiled and
no tree is changed."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from flashbuild.arch import BuildTarget, parse_arch_spec
from flashbuild.errors import TreeError
from flashbuild.pipeline import choose
from tests.conftest import ROOT

_SM90A = BuildTarget(parse_arch_spec("sm_90a"))

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
    return choose.choose_recipe(None, tree, arch=_SM90A, platform="linux",
                                installing=installing, build_root=root, say=lambda _m: None)


@pytest.mark.parametrize(("name", "recipe"), [("causal-conv1d", "causal-conv1d"),
                                              ("FlashMLA", "flashmla"),
                                              ("xformers-full", "xformers"),
                                              ("FlashRT", "flashrt")])
def test_seed_trees_get_their_bundled_recipe(trees: Path, tmp_path: Path, name: str,
                                             recipe: str) -> None:
    chosen = _choose(trees / name, tmp_path)
    assert (chosen.how, chosen.recipe.name) == ("bundled", recipe)


def test_the_clone_without_submodules_is_refused(trees: Path, tmp_path: Path) -> None:
    with pytest.raises(TreeError) as err:
        _choose(trees / "xformers", tmp_path)
    assert "third_party/cutlass" in str(err.value)
    assert "git submodule update --init --recursive" in err.value.fix
    assert not tmp_path.joinpath("xformers.draft.toml").exists()
