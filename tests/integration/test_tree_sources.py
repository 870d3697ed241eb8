"""The harness's `git:` tree sources (bench/tree_tests.py make_source) with real git: the
archive holds the GitHub submodules at their pinned commits, from their own clones (what
`git clone --recursive` checks out; diff-gaussian-rasterization's third_party/glm was empty
without), and a `subdir` tree is archived alone with only the submodules under it (a mirror
may lack large blobs elsewhere in the repository: llm-awq's, s4's)."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchload import BENCH, load, trees_module

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture(scope="module")
def harness() -> Iterator[tuple[ModuleType, ModuleType]]:
    with trees_module() as trees:
        yield trees, load("tree_tests_sources_under_test", BENCH / "tree_tests.py")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always",
         *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def _repo(path: Path, files: dict[str, str]) -> str:
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text, encoding="utf-8")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "c")
    return _git(path, "rev-parse", "HEAD")


def _mirrors(tmp_path: Path) -> tuple[Path, str]:
    """mirrors/o+top (with a submodule at ops/third_party/glm and one at other/lib) and
    mirrors/g-truc+glm; the top commit."""
    mirrors = tmp_path / "mirrors"
    glm = mirrors / "g-truc+glm" / "repo"
    _repo(glm, {"glm/glm.hpp": "// glm\n"})
    lib = mirrors / "o+lib" / "repo"
    _repo(lib, {"lib.h": "// lib\n"})
    top = mirrors / "o+top" / "repo"
    _repo(top, {"ops/setup.py": "# setup\n", "other/big.bin": "x\n"})
    _git(top, "submodule", "add", "-q", str(glm), "ops/third_party/glm")
    _git(top, "submodule", "add", "-q", str(lib), "other/lib")
    gitmodules = (top / ".gitmodules").read_text(encoding="utf-8")
    (top / ".gitmodules").write_text(
        gitmodules.replace(str(glm), "https://github.com/g-truc/glm.git")
        .replace(str(lib), "git@github.com:o/lib.git"), encoding="utf-8")
    _git(top, "add", "-A")
    _git(top, "commit", "-q", "-m", "submodules")
    return mirrors, _git(top, "rev-parse", "HEAD")


def _names(archive: Path) -> set[str]:
    with tarfile.open(archive) as tf:
        return {m.name.split("/", 1)[1] for m in tf if m.isfile()}


def test_the_archive_holds_the_submodules_at_their_commits(
        harness: tuple[ModuleType, ModuleType], tmp_path: Path) -> None:
    trees, tree_tests = harness
    mirrors, commit = _mirrors(tmp_path)
    tree = trees.Tree(name="top", source=f"git:o/top@{commit}", module="top", shape="s")
    out = tmp_path / "out"
    assert tree_tests.make_source(tree, mirrors=mirrors, out=out) == ""
    names = _names(out / f"top-{commit[:12]}.tar.gz")
    assert {"ops/setup.py", "ops/third_party/glm/glm/glm.hpp", "other/lib/lib.h",
            "other/big.bin"} <= names


def test_a_subdir_tree_is_archived_alone_with_its_own_submodules(
        harness: tuple[ModuleType, ModuleType], tmp_path: Path) -> None:
    trees, tree_tests = harness
    mirrors, commit = _mirrors(tmp_path)
    tree = trees.Tree(name="ops", source=f"git:o/top@{commit}", module="ops", shape="s",
                      subdir="ops")
    out = tmp_path / "out"
    assert tree_tests.make_source(tree, mirrors=mirrors, out=out) == ""
    # The folder is in the archive's name: two trees of one commit are two archives.
    assert _names(out / f"top-{commit[:12]}-ops.tar.gz") == {"ops/setup.py",
                                                             "ops/third_party/glm/glm/glm.hpp"}
    other = trees.Tree(name="ops2", source=f"git:o/top@{commit}", module="ops", shape="s",
                       subdir="ops/third_party/glm")
    assert tree_tests.make_source(other, mirrors=mirrors, out=out) == ""
    assert _names(out / f"top-{commit[:12]}-ops.tar.gz") == {"ops/setup.py",
                                                             "ops/third_party/glm/glm/glm.hpp"}
    # A submodule whose clone is missing is named, not left out.
    shutil.rmtree(mirrors / "g-truc+glm")
    why = tree_tests.make_source(tree, mirrors=mirrors, out=out)
    assert "g-truc/glm" in why and "ops/third_party/glm" in why
