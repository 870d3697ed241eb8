"""The staged mirror: copies (never hard links), patches that never reach the user's tree,
cheap and correct syncs (new, deleted, replaced, edited files), mtimes that only move forward."""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from flashbuild.building import staging
from flashbuild.errors import TreeError
from flashbuild.patching import journal as jr
from flashbuild.patching.engine import PatchReport, patch_tree
from flashbuild.recipes.load import load_recipe
from flashbuild.recipes.when import make_context
from tests.unit.patching_fakes import FIXTURES, fake_transform

if TYPE_CHECKING:
    from collections.abc import Callable

    from flashbuild.recipes.model import Recipe

__all__ = ["fake_transform"]

WIN120 = make_context(platform="windows", arch="sm120")
LINUX90 = make_context(platform="linux", arch="sm_90a")


def snapshot(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Bytes, inode and mtime (ns) of every file under `root`, flashbuild's state included."""
    return {p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_ino,
                                             p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(FIXTURES / "tree", root)
    (root / "src" / "util.h").write_text("int util();\n")
    return root


@pytest.fixture
def recipe(fake_transform: object) -> Recipe:
    return load_recipe(FIXTURES / "demo.toml")


@pytest.fixture
def build(tmp_path: Path) -> Path:
    return tmp_path / "build" / "demo-120-windows-0000"


def patcher(recipe: Recipe, ctx: object = WIN120) -> Callable[[Path], PatchReport]:
    return lambda mirror: patch_tree(recipe, mirror, ctx)  # type: ignore[arg-type]


def same_inode(a: Path, b: Path) -> bool:
    return (a.stat().st_ino, a.stat().st_dev) == (b.stat().st_ino, b.stat().st_dev)


def test_mirror_is_copied_and_patching_it_leaves_the_tree_alone(
        tree: Path, build: Path, recipe: Recipe) -> None:
    before = snapshot(tree)
    done = staging.stage(tree, build, patcher(recipe))
    mirror = build / "src"
    assert done.mirror == mirror
    assert set(done.patched.files_written) == {"src/math.cpp", "README.md"}
    assert set(done.sync.copied) == {"README.md", "src/math.cpp", "src/util.h"}
    # Copies, never links: a build step that writes to a mirror file (issue 27: a configure's
    # file(WRITE)) leaves the user's file alone.
    assert not same_inode(mirror / "src/util.h", tree / "src/util.h")
    assert not same_inode(mirror / "src/math.cpp", tree / "src/math.cpp")
    with (mirror / "src/util.h").open("a") as fh:
        fh.write("// a build step wrote this\n")
    assert (mirror / "src/math.cpp").read_text().endswith("// sm_120\n")
    assert (mirror / "README.md").read_text().endswith("windows only\n")
    assert snapshot(tree) == before  # bytes, inodes and mtimes of the user's tree
    assert not (tree / ".flashbuild").exists()
    assert (mirror / ".flashbuild" / "journal.json").is_file()
    assert not (build / ".flashbuild").exists()  # the build folder's lock was released


def test_unchanged_rerun_touches_nothing(tree: Path, build: Path, recipe: Recipe) -> None:
    staging.stage(tree, build, patcher(recipe))
    snap = snapshot(build / "src")
    again = staging.stage(tree, build, patcher(recipe))
    assert not again.sync.changed and again.sync.summary() == "unchanged"
    assert again.patched.files_written == ()
    assert snapshot(build / "src") == snap  # nothing relinked or rewritten: mtimes untouched


def test_new_deleted_replaced_and_edited_files(tree: Path, build: Path, recipe: Recipe) -> None:
    staging.stage(tree, build, patcher(recipe))
    mirror = build / "src"
    (tree / "src" / "new").mkdir()
    (tree / "src" / "new" / "fresh.cu").write_text("__global__ void k() {}\n")
    (tree / "src" / "util.h").unlink()
    (tree / "docs").mkdir()
    (tree / "docs" / "a.txt").write_text("a\n")
    added = staging.stage(tree, build, patcher(recipe))
    assert set(added.sync.copied) == {"src/new/fresh.cu", "docs/a.txt"}
    assert added.sync.removed == ("src/util.h",)
    shutil.rmtree(tree / "docs")
    # an editor that saves through a temp file + rename: another inode
    replaced = tree / "notes.txt"
    replaced.write_text("v1\n")
    gone = staging.stage(tree, build, patcher(recipe))
    assert set(gone.sync.removed) == {"docs/a.txt", "docs/"}
    assert gone.sync.copied == ("notes.txt",)
    old_mtime = (mirror / "notes.txt").stat().st_mtime_ns
    tmp = tree / "notes.txt.new"
    tmp.write_text("v2 longer\n")
    os.utime(tmp, ns=(old_mtime + 10**9, old_mtime + 10**9))
    tmp.replace(replaced)
    done = staging.stage(tree, build, patcher(recipe))
    assert done.sync.copied == ("notes.txt",) and done.sync.removed == ()
    assert not (mirror / "docs").exists() and not (mirror / "src/util.h").exists()
    assert (mirror / "notes.txt").read_text() == "v2 longer\n"
    # an in-place edit of an unpatched file is copied again
    with (tree / "src/new/fresh.cu").open("a") as fh:
        fh.write("// more\n")
    again = staging.stage(tree, build, patcher(recipe))
    assert again.sync.copied == ("src/new/fresh.cu",)
    assert (mirror / "src/new/fresh.cu").read_text().endswith("// more\n")


def test_edited_patched_source_is_repatched_and_the_rest_keeps_its_mtime(
        tree: Path, build: Path, recipe: Recipe) -> None:
    staging.stage(tree, build, patcher(recipe))
    mirror = build / "src"
    readme = (mirror / "README.md").stat()
    math = tree / "src" / "math.cpp"
    math.write_text(math.read_text() + "int extra() { return 1; }\n")  # in place, same inode
    done = staging.stage(tree, build, patcher(recipe))
    assert set(done.sync.reverted) == {"src/math.cpp"}
    text = (mirror / "src/math.cpp").read_text()
    assert "int extra()" in text and "int mul(int a, int b)" in text
    assert text.endswith("// sm_120\n")
    # README.md was reverted and patched again to the same bytes: its old mtime is back
    assert done.kept_mtimes == ("README.md",)
    assert (mirror / "README.md").stat().st_mtime_ns == readme.st_mtime_ns
    assert jr.read_original(mirror, "src/math.cpp") == math.read_bytes()
    assert not (tree / ".flashbuild").exists()


def test_another_plan_in_the_same_mirror_settles(tree: Path, build: Path,
                                                 recipe: Recipe) -> None:
    staging.stage(tree, build, patcher(recipe, WIN120))
    mirror = build / "src"
    other = staging.stage(tree, build, patcher(recipe, LINUX90))
    assert "README.md" in other.patched.files_written  # the engine put the original back
    assert (mirror / "README.md").read_bytes() == (tree / "README.md").read_bytes()
    snap = snapshot(mirror)
    settled = staging.stage(tree, build, patcher(recipe, LINUX90))
    # the restored README.md is the mirror's own inode with the source's bytes: kept as is
    assert not settled.sync.changed and snapshot(mirror) == snap


def test_a_relink_never_moves_an_mtime_backwards(tree: Path, build: Path,
                                                 recipe: Recipe) -> None:
    staging.stage(tree, build, patcher(recipe))
    mirror = build / "src"
    seen = (mirror / "src/util.h").stat().st_mtime_ns
    # replaced by a file with other bytes and an older mtime (rsync -a, cp -p, tar x)
    tmp = tree / "src" / "util.h.new"
    tmp.write_text("int util(int);\n")
    os.utime(tmp, ns=(seen - 10**9, seen - 10**9))
    tmp.replace(tree / "src" / "util.h")
    done = staging.stage(tree, build, patcher(recipe))
    assert done.sync.copied == ("src/util.h",)
    assert (mirror / "src/util.h").read_text() == "int util(int);\n"
    assert (mirror / "src/util.h").stat().st_mtime_ns > seen
    # and that copy is current from now on (same bytes): no churn
    again = staging.stage(tree, build, patcher(recipe))
    assert not again.sync.changed


def test_the_mirror_never_hard_links(tree: Path, build: Path, recipe: Recipe,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Path, target: Path) -> None:
        raise AssertionError("the mirror hard-linked a source file")

    monkeypatch.setattr(Path, "hardlink_to", refuse)
    before = snapshot(tree)
    done = staging.stage(tree, build, patcher(recipe))
    assert set(done.sync.copied) == {"README.md", "src/math.cpp", "src/util.h"}
    mirror = build / "src"
    assert (mirror / "src/util.h").stat().st_mtime_ns == (tree / "src/util.h").stat().st_mtime_ns
    assert snapshot(tree) == before
    assert not staging.stage(tree, build, patcher(recipe)).sync.changed


def test_read_only_source_file_gets_a_writable_copy(tree: Path, build: Path,
                                                    recipe: Recipe) -> None:
    readme = tree / "README.md"
    readme.chmod(0o444)
    try:
        before = readme.read_bytes()
        done = staging.stage(tree, build, patcher(recipe))
        assert "README.md" in done.sync.copied
        assert (build / "src/README.md").read_text().endswith("windows only\n")
        assert readme.read_bytes() == before
        assert not stat.S_IMODE(readme.stat().st_mode) & stat.S_IWUSR
    finally:
        readme.chmod(0o644)


def test_skipped_folders(tree: Path, tmp_path: Path, recipe: Recipe) -> None:
    for folder in (".git", "build", "src/__pycache__", "pkg.egg-info", "cmake-out",
                   "out/flashbuild"):
        (tree / folder).mkdir(parents=True)
        (tree / folder / "x.txt").write_text("x\n")
    (tree / "cmake-out" / "CMakeCache.txt").write_text("# a build folder in the tree\n")
    inside = tree / "out" / "flashbuild" / "demo-key"  # a build folder inside the tree
    staging.stage(tree, inside, patcher(recipe), skip=[tree / "out" / "flashbuild"])
    mirror = inside / "src"
    assert {p.relative_to(mirror).as_posix() for p in mirror.rglob("*") if p.is_file()
            and ".flashbuild" not in p.parts} == {"README.md", "src/math.cpp", "src/util.h"}
    assert (mirror / "out").is_dir() and not (mirror / "out" / "flashbuild").exists()


def test_symlinks_stay_inside_the_mirror_or_point_where_they_pointed(
        tree: Path, build: Path, recipe: Recipe, tmp_path: Path) -> None:
    outside = tmp_path / "outside.h"
    outside.write_text("// outside\n")
    (tree / "src" / "alias.h").symlink_to("util.h")
    (tree / "ext.h").symlink_to(os.path.relpath(outside, tree))
    staging.stage(tree, build, patcher(recipe))
    mirror = build / "src"
    assert (mirror / "src/alias.h").readlink() == Path("util.h")
    assert (mirror / "ext.h").readlink() == outside
    assert (mirror / "ext.h").read_text() == "// outside\n"
    assert not staging.stage(tree, build, patcher(recipe)).sync.changed


def test_interrupted_patch_in_the_mirror_is_redone(tree: Path, build: Path,
                                                   recipe: Recipe) -> None:
    staging.stage(tree, build, patcher(recipe))
    mirror = build / "src"
    journal = jr.read_journal(mirror)
    assert journal is not None
    jr.write_journal(mirror, dataclasses.replace(journal, state="writing"))
    (mirror / "src/math.cpp").write_text("half written\n")
    done = staging.stage(tree, build, patcher(recipe))
    assert set(done.sync.reverted) == {"README.md", "src/math.cpp"}
    assert (mirror / "src/math.cpp").read_text().endswith("// sm_120\n")
    state = jr.read_journal(mirror)
    assert state is not None and state.state == "complete"


def test_a_tree_patched_in_place_is_refused(tree: Path, build: Path, recipe: Recipe) -> None:
    patch_tree(recipe, tree, WIN120)
    with pytest.raises(TreeError) as caught:
        staging.stage(tree, build, patcher(recipe))
    assert "--revert" in caught.value.fix and "--in-place" in caught.value.fix
    assert not (build / "src").exists()


def test_csrc_recipe_patches_only_the_mirror(tmp_path: Path) -> None:
    """The README's quick start (`flashbuild build --arch sm120`) on the bundled kernels: the
    csrc tree keeps every byte, inode and mtime; the mirror holds exactly what patching a copy
    in place would give."""
    from tests.conftest import ROOT

    ignore = shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", ".flashbuild")
    csrc = tmp_path / "csrc"
    shutil.copytree(ROOT / "csrc", csrc, ignore=ignore)
    reference = tmp_path / "reference"
    shutil.copytree(csrc, reference)
    recipe = load_recipe(ROOT / "recipes" / "csrc.toml")
    ctx = make_context(platform="windows", arch="sm120")
    before = snapshot(csrc)
    done = staging.stage(csrc, tmp_path / "build" / "csrc-120", patcher(recipe, ctx))
    expected = patch_tree(recipe, reference, ctx)
    assert done.patched.files_changed == expected.files_changed
    assert len(expected.files_changed) >= 8
    mirror = done.mirror
    for rel in expected.files_changed:
        assert (mirror / rel).read_bytes() == (reference / rel).read_bytes(), rel
    assert snapshot(csrc) == before
    assert not (csrc / ".flashbuild").exists()
