"""The patch journal cannot be turned against its user: entries validated like diff paths,
the journal bound to its tree, originals hash-checked, edits since patching detected, and the
order of a run's writes such that a kill anywhere is repairable."""

from __future__ import annotations

import dataclasses
import json
import shutil
from typing import TYPE_CHECKING

import pytest

from flashbuild.errors import TreeError
from flashbuild.patching import journal as jr
from flashbuild.patching.engine import patch_tree, revert_tree
from flashbuild.recipes.load import load_recipe
from flashbuild.recipes.when import make_context
from tests.unit.patching_fakes import FIXTURES, fake_transform

if TYPE_CHECKING:
    from pathlib import Path

    from flashbuild.recipes.model import Recipe

__all__ = ["fake_transform"]
WIN120 = {"platform": "windows", "arch": "sm120"}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(FIXTURES / "tree", root)
    return root


@pytest.fixture
def recipe(fake_transform: object) -> Recipe:
    return load_recipe(FIXTURES / "demo.toml")


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".flashbuild" not in p.parts}


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "C:/x", "a/../../x", ".flashbuild/x",
                                  "a//b", "./a", ""])
def test_entries_must_be_plain_relative_paths(path: str) -> None:
    doc = {"state": "complete", "tree": "/t", "version": 2, "entries": [
        {"path": path, "original": False, "written": []}]}
    with pytest.raises((ValueError, TreeError)):
        jr.Journal.from_json(json.dumps(doc))


@pytest.mark.parametrize("entry", [
    {"path": "a", "original": True},  # an original without its hash
    {"path": "a", "original": True, "original_sha256": "../../x"},
    {"path": "a", "original": "yes", "original_sha256": "0" * 64},
    {"path": "a", "original": False, "written": ["not-a-hash"]},
    {"path": "a", "original": False, "written": "-"},
])
def test_entries_must_carry_valid_hashes(entry: dict[str, object]) -> None:
    doc = {"state": "complete", "tree": "/t", "version": 2, "entries": [entry]}
    with pytest.raises((ValueError, TypeError, KeyError)):
        jr.Journal.from_json(json.dumps(doc))


def test_journal_records_its_tree_and_what_flashbuild_wrote(tree: Path, recipe: Recipe
                                                           ) -> None:
    patch_tree(recipe, tree, make_context(**WIN120))
    journal = jr.read_journal(tree)
    assert journal is not None and journal.tree == str(tree.resolve())
    for entry in journal.entries:
        assert entry.written == (jr.sha256((tree / entry.path).read_bytes()),)


def test_a_copied_tree_does_not_trust_the_journal(tree: Path, recipe: Recipe,
                                                  tmp_path: Path) -> None:
    patch_tree(recipe, tree, make_context(**WIN120))
    copy = tmp_path / "copy"
    shutil.copytree(tree, copy)
    before = files(copy)
    with pytest.raises(TreeError, match="not written for this tree"):
        revert_tree(copy)
    assert files(copy) == before
    assert (copy / ".flashbuild" / "journal.json").is_file()


def test_edit_detection_names_the_file_and_changes_nothing(tree: Path, recipe: Recipe) -> None:
    patch_tree(recipe, tree, make_context(**WIN120))
    (tree / "README.md").write_bytes(b"mine\n")
    journal = jr.read_journal(tree)
    assert journal is not None
    assert jr.edited_files(tree, journal) == ["README.md"]
    before = files(tree)
    with pytest.raises(TreeError) as info:
        revert_tree(tree)
    assert info.value.details["files"] == ["README.md"]
    assert files(tree) == before
    report = revert_tree(tree, discard_edits=True)
    assert "README.md" in report.files_restored


def test_a_file_still_original_needs_no_saved_copy(tree: Path, recipe: Recipe) -> None:
    # What a kill while the originals were being saved leaves: a `writing` journal, no saved
    # originals, every file still as it was. The revert restores nothing and succeeds.
    pristine = files(tree)
    patch_tree(recipe, tree, make_context(**WIN120))
    journal = jr.read_journal(tree)
    assert journal is not None
    revert_tree(tree)
    jr.write_journal(tree, dataclasses.replace(journal, state="writing"))
    assert files(tree) == pristine
    report = revert_tree(tree)
    assert report.files_restored == () and not report.was_complete
    assert files(tree) == pristine and not (tree / ".flashbuild").exists()


def test_revert_dry_run_lists_and_writes_nothing(tree: Path, recipe: Recipe) -> None:
    patch_tree(recipe, tree, make_context(**WIN120))
    state = {str(p): p.read_bytes() for p in tree.rglob("*") if p.is_file()}
    report = revert_tree(tree, dry_run=True)
    assert report.dry_run and set(report.files_restored) == {"README.md", "src/math.cpp"}
    assert {str(p): p.read_bytes() for p in tree.rglob("*") if p.is_file()} == state
