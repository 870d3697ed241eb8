"""Where flashbuild finds its bundled recipes and where a build of a tree goes by default,
for the editable install (repo folders next to the package) and a regular wheel (the folders
inside the package, the tree inside site-packages)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flashbuild.building import builddir
from flashbuild.errors import RecipeError
from flashbuild.recipes import load


def _fake_install(monkeypatch: pytest.MonkeyPatch, top: Path) -> Path:
    module = top / "flashbuild" / "recipes" / "load.py"
    module.parent.mkdir(parents=True)
    monkeypatch.setattr(load, "__file__", str(module))
    return top / "flashbuild"


def test_recipes_in_the_package_come_first(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    package = _fake_install(monkeypatch, tmp_path)
    (tmp_path / "recipes").mkdir()
    (package / "_bundled" / "recipes").mkdir(parents=True)
    assert load.recipes_dir() == package / "_bundled" / "recipes"


def test_recipes_next_to_the_package_for_a_checkout(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    _fake_install(monkeypatch, tmp_path)
    (tmp_path / "recipes").mkdir()
    assert load.recipes_dir() == tmp_path / "recipes"


def test_no_recipes_anywhere_names_both_places(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    package = _fake_install(monkeypatch, tmp_path)
    with pytest.raises(RecipeError) as err:
        load.recipes_dir()
    assert str(package / "_bundled" / "recipes") in err.value.evidence
    assert str(tmp_path / "recipes") in err.value.evidence


def test_default_root_beside_a_checkout(tmp_path: Path) -> None:
    tree = tmp_path / "repo" / "csrc"
    tree.mkdir(parents=True)
    cache = tmp_path / "cache"
    assert builddir.default_root(tree, cache_dir=cache) == tmp_path / "repo" / "build" / \
        "flashbuild"
    assert builddir.default_root(tree) == tmp_path / "repo" / "build" / "flashbuild"


@pytest.mark.parametrize("site", ["site-packages", "dist-packages", "Site-Packages"])
def test_default_root_of_an_installed_tree_is_the_cache(tmp_path: Path, site: str) -> None:
    tree = tmp_path / "venv" / "lib" / site / "flashbuild" / "_bundled" / "csrc"
    tree.mkdir(parents=True)
    cache = tmp_path / "cache"
    root = builddir.default_root(tree, cache_dir=cache)
    assert root.parent == cache / "build" and root.name.startswith("csrc-")
    # Another install of the same tree gets another folder.
    other = tmp_path / "venv2" / "lib" / site / "flashbuild" / "_bundled" / "csrc"
    other.mkdir(parents=True)
    assert builddir.default_root(other, cache_dir=cache) != root
    assert builddir.default_root(tree, cache_dir=cache) == root


def test_default_root_beside_a_read_only_folder_is_the_cache(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Faked: these tests may run as root, for whom every folder is writable.
    tree = tmp_path / "ro" / "csrc"
    tree.mkdir(parents=True)
    probed: list[Path] = []

    def access(path: Path, mode: int) -> bool:
        probed.append(Path(path))
        return mode != os.W_OK

    monkeypatch.setattr(os, "access", access)
    root = builddir.default_root(tree, cache_dir=tmp_path / "cache")
    assert root.parent == tmp_path / "cache" / "build"
    # `ro/build/flashbuild` does not exist yet: the folder that would hold it is asked.
    assert probed == [tmp_path / "ro"]
