"""Zero-config on the seed trees of ../shared/corpus (skipped where it is not beside the repo):
`flashbuild build TREE` without --recipe picks the bundled recipe of each seed tree by its
content, refuses the xformers clone without submodules naming the command, and, where no
bundled recipe matched (here: with the bundled recipes hidden), drafts xformers (with its
submodule) as `recipe init` does and FlashRT from its configured CMake build.
Nothing is compiled and no tree is changed."""

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


@pytest.fixture
def no_bundled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree no bundled recipe matches is drafted: hide the bundled recipes."""
    monkeypatch.setattr(choose, "bundled_for", lambda _tree: None)


# FlashMLA's draft is the same `recipe init` run that test_introspect_corpus.py checks (77 s
# of record mode and device passes here): one setup.py tree is enough for the choice.
@pytest.mark.parametrize(("name", "package"), [("xformers-full", "xformers")])
@pytest.mark.usefixtures("no_bundled")
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


@pytest.mark.usefixtures("no_bundled")
def test_flashrt_is_drafted_from_its_configured_build(trees: Path, tmp_path: Path) -> None:
    # The draft comes from CMake's File API after a configure for sm_90a (introspection), as
    # `recipe init` drafts: GPU_ARCH from --arch, only the targets that configuration defines
    # (FA2 exists for GPU_ARCH 80/86/89/120, the FP4 module and its plugins for 100/110), and
    # [install] for the flash_vla package that imports the module.
    tree = trees / "FlashRT"
    before = _snapshot(tree)
    chosen = _choose(tree, tmp_path)
    assert chosen.how == "drafted" and chosen.recipe.build.backend == "cmake"
    assert chosen.recipe.install is not None and chosen.recipe.install.package == "flash_vla"
    targets = set(chosen.recipe.build.targets)
    assert "flash_vla_kernels" in targets
    assert not targets & {"flash_vla_fa2", "flash_vla_fp4", "fmha_fp16_strided"}
    assert _snapshot(tree) == before
