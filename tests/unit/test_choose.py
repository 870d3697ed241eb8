"""Which recipe `flashbuild build TREE` uses without --recipe (pipeline/choose.py): a bundled
recipe matched by the tree's content, else a draft made by `recipe init`'s own function,
cached per tree state, never overwriting the user's edits, stopped by a TODO it cannot build
without. Scans only; nothing is compiled."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flashbuild.arch import BuildTarget, parse_arch_spec
from flashbuild.building.progress import IncludeStep
from flashbuild.errors import RecipeError, UsageError
from flashbuild.pipeline import choose
from flashbuild.scanning import draft

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MINIKERN = FIXTURES / "build" / "minikern"
_SM90A = BuildTarget(parse_arch_spec("sm_90a"))
CAUSAL_SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="causal_conv1d", packages=["causal_conv1d"],
      ext_modules=[CUDAExtension(name="causal_conv1d_cuda",
                                 sources=["csrc/causal_conv1d.cpp", "csrc/causal_conv1d_fwd.cu"])],
      cmdclass={"build_ext": BuildExtension})
"""
TOP_LEVEL_SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="top", ext_modules=[CUDAExtension(name="top_ext", sources=["csrc/k.cu"])],
      cmdclass={"build_ext": BuildExtension})
"""
#: An extension whose name only the run would know: the static draft names no module, so it
#: has nothing to install.
UNNAMED_SETUP = """import os
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="top", ext_modules=[CUDAExtension(name=os.environ["EXT"], sources=["csrc/k.cu"])],
      cmdclass={"build_ext": BuildExtension})
"""


@pytest.fixture(autouse=True)
def _no_introspection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Zero-config drafts as `recipe init` does, introspection included; that configures CMake
    or runs setup.py, which unit tests do not (tests/integration/test_zeroconfig_corpus.py
    drafts real trees with it). Here the draft falls back to static reading, as it does where
    introspection cannot run."""
    from flashbuild.pipeline import introspect
    from flashbuild.source.treemodel import Introspection

    monkeypatch.setattr(introspect, "introspect_for_draft",
                        lambda *_a, **_k: Introspection(None, "unit test: nothing is run"))


def _choose(source: Path | None, root: Path, recipe: str | None = None,
            installing: bool = True) -> tuple[choose.Chosen, list[str]]:
    said: list[str] = []
    chosen = choose.choose_recipe(recipe, source, arch=_SM90A, platform="linux",
                                  installing=installing, build_root=root, say=said.append)
    return chosen, said


def _causal_tree(path: Path) -> Path:
    (path / "csrc").mkdir(parents=True)
    (path / "causal_conv1d").mkdir()
    (path / "causal_conv1d" / "__init__.py").write_text("")
    (path / "setup.py").write_text(CAUSAL_SETUP)
    (path / "csrc" / "causal_conv1d.cpp").write_text("int x;\n")
    (path / "csrc" / "causal_conv1d_fwd.cu").write_text("__global__ void k() {}\n")
    return path


def _minikern(path: Path) -> Path:
    shutil.copytree(MINIKERN, path)
    (path / "minikern.toml").unlink()
    return path


def test_a_bundled_recipe_is_found_by_content_not_by_folder_name(tmp_path: Path) -> None:
    tree = _causal_tree(tmp_path / "renamed-clone")
    chosen, said = _choose(tree, tmp_path / "build")
    assert (chosen.how, chosen.recipe.name, chosen.tree) == ("bundled", "causal-conv1d", tree)
    assert "causal_conv1d" in said[0] and "csrc/causal_conv1d.cpp" in said[0]
    assert not (tmp_path / "build").exists()  # nothing drafted


def test_a_tree_named_like_a_bundled_recipe_is_not_taken_for_it(tmp_path: Path) -> None:
    # Before: `build --source FlashMLA` used the csrc recipe. A tree that merely has the
    # recipe's folder name is not that project either.
    tree = _minikern(tmp_path / "csrc")
    chosen, _ = _choose(tree, tmp_path / "build")
    assert chosen.how == "drafted" and chosen.recipe.name == "csrc"  # the draft's own name
    assert chosen.recipe.build.targets == ("_C", "minikern_attn")
    assert chosen.recipe.install is not None
    assert chosen.recipe.install.package == "minikern"


def test_a_recipe_file_given_as_the_tree_is_a_usage_error(tmp_path: Path) -> None:
    recipe = tmp_path / "my.toml"
    recipe.write_text("[recipe]\nname = 'x'\n")
    with pytest.raises(UsageError) as err:
        _choose(recipe, tmp_path / "build")
    assert f"--recipe {recipe}" in err.value.fix


def test_recipe_wins_and_no_tree_is_the_bundled_library(tmp_path: Path) -> None:
    tree = _causal_tree(tmp_path / "t")
    chosen, _ = _choose(tree, tmp_path / "build", recipe="csrc")
    assert (chosen.how, chosen.recipe.name, chosen.tree) == ("--recipe", "csrc", tree)
    chosen, _ = _choose(None, tmp_path / "build")
    assert (chosen.how, chosen.recipe.name) == ("default", "csrc")


def test_a_draft_is_written_for_review_said_and_reused(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _minikern(tmp_path / "mk")
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    chosen, said = _choose(tree, tmp_path / "build")
    assert chosen.draft == tmp_path / "build" / "mk.draft.toml" and chosen.draft.is_file()
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before  # tree untouched
    text = "\n".join(said)
    assert "backend cmake" in text and "targets _C, minikern_attn" in text
    assert "installs package `minikern` from python/minikern" in text

    def no_scan(*_a: object, **_k: object) -> int:
        raise AssertionError("an unchanged tree was drafted again")

    monkeypatch.setattr(draft, "draft_tree", no_scan)
    monkeypatch.setattr(choose, "parse_todos", no_scan)  # the kept TODOs, not the comments
    again, _ = _choose(tree, tmp_path / "build")
    assert again.recipe.build.targets == chosen.recipe.build.targets
    monkeypatch.undo()
    # The user's edit of the draft is theirs: used, never overwritten, even after the tree
    # changes.
    edited = chosen.draft.read_text().replace('name = "mk"', 'name = "mine"')
    chosen.draft.write_text(edited)
    (tree / "kernels" / "add.cu").write_text((tree / "kernels" / "add.cu").read_text() + "\n")
    mine, said = _choose(tree, tmp_path / "build")
    assert mine.recipe.name == "mine" and "as you edited it" in said[0]
    assert chosen.draft.read_text() == edited


def test_the_headers_gcc_names_go_into_flashbuilds_own_draft_only(tmp_path: Path) -> None:
    tree = _minikern(tmp_path / "mk")
    chosen, _ = _choose(tree, tmp_path / "build")
    assert chosen.draft is not None
    step = IncludeStep(file="bindings.cpp", anchor="#include <Python.h>", header="memory",
                       name="std::unique_ptr")
    amended = choose.add_to_draft(chosen, [step])
    assert amended is not None and amended.draft == chosen.draft
    assert [p.id for p in amended.recipe.patch][-1] == "include-bindings-memory"
    assert "bindings.cpp uses std::unique_ptr without including <memory>" in \
        chosen.draft.read_text()
    # Still flashbuild's own draft: reused as it is, not taken for the user's edit.
    again, said = _choose(tree, tmp_path / "build")
    assert not any("as you edited it" in s for s in said)
    assert [p.id for p in again.recipe.patch] == [p.id for p in amended.recipe.patch]
    assert choose.add_to_draft(again, [step]) is None  # nothing new to add
    # A recipe that is the user's is never written to: a bundled one, an edited draft.
    bundled, _ = _choose(_causal_tree(tmp_path / "cc"), tmp_path / "build2")
    assert choose.add_to_draft(bundled, [step]) is None
    edited = chosen.draft.read_text() + "\n# mine\n"
    chosen.draft.write_text(edited)
    other = IncludeStep(file="attn.cu", anchor="x", header="vector", name="std::vector")
    assert choose.add_to_draft(again, [other]) is None
    assert chosen.draft.read_text() == edited


def test_a_new_drafting_format_drafts_again(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _minikern(tmp_path / "mk")
    _, said = _choose(tree, tmp_path / "build")
    assert any("drafting one" in s for s in said)
    _, said = _choose(tree, tmp_path / "build")
    assert not any("drafting one" in s for s in said)  # reused
    monkeypatch.setattr(choose, "DRAFT_FORMAT", choose.DRAFT_FORMAT + 1)
    _, said = _choose(tree, tmp_path / "build")
    assert any("drafting one" in s for s in said)


def test_a_changed_tree_is_drafted_again(tmp_path: Path) -> None:
    tree = _minikern(tmp_path / "mk")
    _choose(tree, tmp_path / "build")
    (tree / "python" / "minikern" / "__init__.py").unlink()  # no package any more
    chosen, _ = _choose(tree, tmp_path / "build", installing=False)
    assert chosen.recipe.install is None


def test_a_top_level_module_without_a_package_is_installed_by_its_name(
        tmp_path: Path) -> None:
    # Issue 30 (rotary-emb): `CUDAExtension("top_ext", ...)` and no package was a TODO that
    # stopped the build with exit 4; pip puts top_ext*.so at the top of site-packages.
    tree = tmp_path / "top"
    (tree / "csrc").mkdir(parents=True)
    (tree / "setup.py").write_text(TOP_LEVEL_SETUP)
    (tree / "csrc" / "k.cu").write_text("__global__ void k() {}\n")
    chosen, said = _choose(tree, tmp_path / "build")
    install = chosen.recipe.install
    assert install is not None and install.package is None
    assert install.top_level == ("top_ext",)
    assert any("installs top-level module `top_ext`" in line for line in said)
    assert not any("TODO [install]" in line for line in said)


def test_a_todo_the_build_needs_stops_it_with_its_text(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def no_reading(_text: str) -> list[choose.Todo]:
        raise AssertionError("the draft's TODOs were read back out of its comments")

    # Drafted and reused, the TODOs are the typed ones drafting made (issue 26 item 3).
    monkeypatch.setattr(choose, "parse_todos", no_reading)
    tree = tmp_path / "top"
    (tree / "csrc").mkdir(parents=True)
    (tree / "setup.py").write_text(UNNAMED_SETUP)
    (tree / "csrc" / "k.cu").write_text("__global__ void k() {}\n")
    with pytest.raises(RecipeError) as err:
        _choose(tree, tmp_path / "build")
    assert "no package for the extension modules of setup.py" in str(err.value)
    assert "modules: none named" in err.value.evidence
    assert "add [install] package" in err.value.fix and "--install none" in err.value.fix
    assert not any(p.name == "build" for p in tree.iterdir())
    # Without installing, the same TODO does not block: it is listed.
    chosen, said = _choose(tree, tmp_path / "build", installing=False)
    assert chosen.recipe.install is None
    assert any("TODO [install]" in line for line in said)


def test_parse_todos_reads_the_rendered_blocks() -> None:
    text = ("# TODO: [install] no package\n#   evidence: modules: x\n#   fix:      add it\n\n"
            "# TODO: FB220 (setup-hardcoded-gencode, error) setup.py:4:1\n")
    assert choose.parse_todos(text) == [choose.Todo("install", "no package", "modules: x",
                                                    "add it")]
