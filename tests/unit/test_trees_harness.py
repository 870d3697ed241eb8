"""The tree harness's tests from upstream (bench/trees.py, bench/tree_tests.py): `tests_from`
read from the list, the archive unpacked into the tree before the tests stage, a missing one
refused, and the clones tree_tests.py archives from. No process runs: the stages' commands are
answered by a fake `_run`."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.benchload import BENCH, load, trees_module

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def trees() -> Iterator[ModuleType]:
    with trees_module() as module:
        yield module


@pytest.fixture(scope="module")
def tree_tests(trees: ModuleType) -> ModuleType:
    return load("tree_tests_under_test", BENCH / "tree_tests.py")


def _tarball(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _list(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "trees.toml"
    path.write_text(body, encoding="utf-8")
    return path


# ---- tests_from in the list ----------------------------------------------------------------


def test_tests_from_names_a_repository_a_full_commit_and_paths(trees: ModuleType) -> None:
    spec = trees.parse_tests_from(f"Dao-AILab/flash-attention@{COMMIT}:tests/a.py, lib/b.py")
    assert (spec.repo, spec.commit, spec.paths) == (
        "Dao-AILab/flash-attention", COMMIT, ("tests/a.py", "lib/b.py"))


@pytest.mark.parametrize("text", [
    f"owner/name@{COMMIT[:7]}:tests",     # a short id may name another commit later
    f"owner/name@{COMMIT}",               # no path
    f"name@{COMMIT}:tests",               # no owner
    f"owner/name@{COMMIT}:../tests",      # would unpack outside the tree
    f"owner/name@{COMMIT}:/tests",
    f"owner/name@{COMMIT}:tests,,more",
])
def test_a_malformed_tests_from_is_refused(trees: ModuleType, text: str) -> None:
    with pytest.raises(ValueError, match=r"OWNER/NAME|not a path"):
        trees.parse_tests_from(text)


def test_the_list_refuses_a_bad_tests_from_naming_the_tree(trees: ModuleType,
                                                          tmp_path: Path) -> None:
    path = _list(tmp_path, '[[tree]]\nname = "t"\nsource = "dir:t"\nmodule = "t"\n'
                           'tests = "pytest"\ntests_from = "owner/name@abc:tests"\n')
    with pytest.raises(SystemExit, match="tree t: tests_from"):
        trees.load_list(path)


def test_tests_from_without_a_command_is_refused(trees: ModuleType, tmp_path: Path) -> None:
    path = _list(tmp_path, f'[[tree]]\nname = "t"\nsource = "dir:t"\nmodule = "t"\n'
                           f'tests_from = "owner/name@{COMMIT}:tests"\n')
    with pytest.raises(SystemExit, match="without a tests command"):
        trees.load_list(path)


def test_a_misspelt_key_is_refused_not_ignored(trees: ModuleType, tmp_path: Path) -> None:
    path = _list(tmp_path, f'[[tree]]\nname = "t"\nsource = "dir:t"\nmodule = "t"\n'
                           f'tests = "pytest"\ntest_from = "owner/name@{COMMIT}:tests"\n')
    with pytest.raises(SystemExit, match="unknown keys test_from"):
        trees.load_list(path)


def test_the_practice_lists_tests_from_all_parse(trees: ModuleType) -> None:
    listed = trees.load_list(BENCH / "trees.toml")
    with_archive = [t for t in listed if t.tests_from]
    assert with_archive, "the practice list names no tests_from"
    for tree in with_archive:
        assert trees.parse_tests_from(tree.tests_from).paths


# ---- the tests stage -------------------------------------------------------------------------


class FakeRun:
    """Answers the harness's commands: every stage passes; the tests command records which
    files the tree held when it ran."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tests_saw: list[str] | None = None

    def __call__(self, argv: list[str], *, cwd: Path, log: Path, timeout: float,
                 env: dict[str, str] | None = None) -> tuple[int, float, str]:
        log.write_text("fake\n", encoding="utf-8")
        if "--draft" in argv:
            Path(argv[argv.index("-o") + 1]).write_text("[build]\n", encoding="utf-8")
        if argv[:2] == ["bash", "-c"]:
            assert cwd == self.root
            self.tests_saw = sorted(str(p.relative_to(self.root))
                                    for p in self.root.rglob("*") if p.is_file())
        stdout = json.dumps({"ok": True, "install": {}}) if "build" in argv else ""
        return 0, 0.0, stdout


def _tree_with_tests(trees: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                     ) -> tuple[Any, FakeRun]:
    source = tmp_path / "pkg-1.0"
    source.mkdir()
    (source / "setup.py").write_text("", encoding="utf-8")
    tree = trees.Tree(name="pkg", source=f"dir:{source}", module="pkg", tests="pytest tests",
                      tests_from=f"owner/pkg@{COMMIT}:tests")
    fake = FakeRun(tmp_path / "work" / "src" / "pkg" / "pkg-1.0")
    monkeypatch.setattr(trees, "_run", fake)
    return tree, fake


def _run_tree(trees: ModuleType, tree: Any, tmp_path: Path, archives: Path) -> Any:
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    return trees.run_tree(tree, base=tmp_path, work=tmp_path / "work", logs=logs,
                          arch="sm_90a", until="build", tests=True, timeout=10,
                          archives=archives)


def test_the_archive_is_in_the_tree_when_its_tests_run(trees: ModuleType, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    tree, fake = _tree_with_tests(trees, tmp_path, monkeypatch)
    archives = tmp_path / "archives"
    archives.mkdir()
    _tarball(archives / "pkg.tar.gz", {"tests/test_pkg.py": "def test_x(): pass\n"})
    row = _run_tree(trees, tree, tmp_path, archives)
    assert row.reached == "tests", row.error
    assert fake.tests_saw == ["setup.py", "tests/test_pkg.py"]


def test_a_missing_archive_fails_the_tests_stage_without_running_them(
        trees: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree, fake = _tree_with_tests(trees, tmp_path, monkeypatch)
    row = _run_tree(trees, tree, tmp_path, tmp_path / "no-archives")
    assert (row.reached, row.stages[-1].name, row.stages[-1].code) == ("import", "tests", 1)
    assert "pkg.tar.gz" in row.error and "bench/tree_tests.py" in row.error
    assert fake.tests_saw is None


def test_an_archive_reaching_outside_the_tree_is_not_unpacked(trees: ModuleType,
                                                              tmp_path: Path) -> None:
    archive = _tarball(tmp_path / "evil.tar.gz", {"../outside.py": "x = 1\n"})
    root = tmp_path / "tree"
    root.mkdir()
    with pytest.raises(tarfile.TarError):
        trees.unpack_tests(archive, root)
    assert not (tmp_path / "outside.py").exists()


def test_tests_are_refused_before_any_build_while_an_archive_is_missing(
        trees: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _list(tmp_path, f'[[tree]]\nname = "a"\nsource = "dir:a"\nmodule = "a"\n'
                           f'tests = "pytest"\ntests_from = "owner/a@{COMMIT}:tests"\n'
                           f'[[tree]]\nname = "b"\nsource = "dir:b"\nmodule = "b"\n'
                           f'tests = "pytest"\n')

    def no_stage(*args: object, **kwargs: object) -> None:
        raise AssertionError("a stage ran")

    monkeypatch.setattr(trees, "run_tree", no_stage)
    archives = tmp_path / "archives"
    monkeypatch.setattr(sys, "argv", ["trees.py", "--list", str(path), "--work",
                                      str(tmp_path / "w"), "--tests",
                                      "--tests-archives", str(archives)])
    with pytest.raises(SystemExit, match=r"a\.tar\.gz.*tree_tests\.py") as refused:
        trees.main()
    assert "b.tar.gz" not in str(refused.value)
    assert trees.missing_archives(trees.load_list(path), archives) == [archives / "a.tar.gz"]


# ---- bench/tree_tests.py ---------------------------------------------------------------------


def _gitdir(path: Path) -> Path:
    (path / "objects").mkdir(parents=True)
    (path / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("layout", ["owner+name/repo", "owner+name/repo/.git",
                                    "owner+name/.git", "owner+name"])
def test_a_clone_is_found_in_each_layout(tree_tests: ModuleType, tmp_path: Path,
                                         layout: str) -> None:
    gitdir = _gitdir(tmp_path / layout)
    assert tree_tests.mirror_gitdir(tmp_path, "owner/name") == gitdir
    assert tree_tests.mirror_gitdir(tmp_path, "owner/other") is None


def test_the_archive_command_takes_the_paths_at_the_commit(trees: ModuleType,
                                                           tree_tests: ModuleType) -> None:
    spec = trees.parse_tests_from(f"owner/name@{COMMIT}:tests,flash/x.py")
    argv = tree_tests.archive_argv(Path("/m/owner+name/repo"), spec, Path("/o/t.tar.gz"))
    assert argv == ["git", "--git-dir", "/m/owner+name/repo", "archive", "--format=tar.gz",
                    "-o", "/o/t.tar.gz", COMMIT, "--", "tests", "flash/x.py"]


def test_without_a_clone_the_reason_says_how_to_get_one(trees: ModuleType,
                                                         tree_tests: ModuleType,
                                                         tmp_path: Path) -> None:
    tree = trees.Tree(name="t", source="dir:t", module="t", tests="pytest",
                      tests_from=f"owner/name@{COMMIT}:tests")
    why = tree_tests.make_archive(tree, mirrors=tmp_path, out=tmp_path / "out")
    assert "git clone --bare https://github.com/owner/name" in why
    assert not (tmp_path / "out" / "t.tar.gz").exists()


def test_a_failed_verify_names_its_failed_checks(trees: ModuleType, tmp_path: Path) -> None:
    # verify's JSON report has checks, not one paragraph: the row named nothing before (the
    # H200 run of 2026-11-28 showed four verify failures with an empty error).
    report = {"ok": False, "checks": [
        {"area": "images", "subject": "_basis_cpu.so", "status": "fail",
         "summary": "no kernel image", "evidence": "a host-only library", "fix": "say so"},
        {"area": "import", "subject": "pkg", "status": "ok", "summary": "imports",
         "evidence": "", "fix": ""}]}
    log = tmp_path / "verify.txt"
    log.write_text("x\n")
    error = trees._paragraph(json.dumps(report), log)
    assert error == "_basis_cpu.so: no kernel image. a host-only library Fix: say so"
    assert trees._paragraph(json.dumps({"ok": False}), log)


def test_a_second_run_finds_the_tree_beside_the_build_root(trees: ModuleType,
                                                            tmp_path: Path) -> None:
    # The harness's second run over one work folder took `src/NAME` itself for the tree
    # (recipe init then found no build files): the first run's build root sits beside the
    # unpacked folder, `src/NAME/build`.
    dest = tmp_path / "work" / "src" / "demo"
    (dest / "demo-0.1").mkdir(parents=True)
    (dest / "build" / "flashbuild").mkdir(parents=True)
    tree = trees.Tree(name="demo", source="pypi:demo==0.1", module="demo")
    stage, root = trees.fetch(tree, tmp_path, tmp_path / "work", tmp_path)
    assert (stage.code, stage.log) == (0, "reused")
    assert root == dest / "demo-0.1"


# ---- a trimmed copy for the GPU machine (carry_drop) ----------------------------------------


def test_a_trimmed_copy_leaves_out_only_the_dropped_paths(trees: ModuleType,
                                                          tree_tests: ModuleType,
                                                          tmp_path: Path) -> None:
    # An sdist over what a device call carries goes without paths its build never reads; the
    # glob matches the path and everything below it, nothing that merely shares a prefix.
    dl = tmp_path / "dl"
    dl.mkdir()
    _tarball(dl / "demo-0.1.tar.gz", {
        "demo-0.1/setup.py": "", "demo-0.1/.git/objects/pack": "x",
        "demo-0.1/.github/ci.yml": "", "demo-0.1/vendor/models/a.gguf": "x",
        "demo-0.1/vendor/models/keep.txt": "", "demo-0.1/docs2/index.md": ""})
    tree = trees.Tree(name="demo", source="pypi:demo==0.1", module="demo",
                      carry_drop=(".git", "vendor/models/*.gguf"))
    target = tree_tests.make_trimmed(tree, dl=dl, out=tmp_path / "carry")
    assert target.name == "demo-0.1-carry.tar.gz"
    with tarfile.open(target) as tf:
        assert sorted(tf.getnames()) == ["demo-0.1/.github/ci.yml", "demo-0.1/docs2/index.md",
                                         "demo-0.1/setup.py", "demo-0.1/vendor/models/keep.txt"]
    # Beside the pristine sdist, the pristine one is taken; alone, the trimmed one, and the
    # fetch stage says so.
    (target.parent / target.name).rename(dl / target.name)
    assert trees.sdist("demo==0.1", dl).name == "demo-0.1.tar.gz"
    (dl / "demo-0.1.tar.gz").unlink()
    stage, root = trees.fetch(tree, tmp_path, tmp_path, tmp_path)
    assert stage.code == 0 and "carried copy, without .git" in stage.log
    assert (root / "setup.py").is_file() and not (root / ".git").exists()
