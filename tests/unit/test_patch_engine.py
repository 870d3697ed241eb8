"""The patch transaction: plan, write, re-apply, switch plans, revert, repair, lock, errors —
through the engine API and through `flashbuild patch` (exit codes)."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import socket
import stat
import time
from typing import TYPE_CHECKING, Any

import psutil
import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.errors import BusyError, PatchError, TreeError
from flashbuild.patching import journal as jr
from flashbuild.patching.engine import applied_state, patch_tree, revert_tree
from flashbuild.recipes.load import load_recipe, parse_recipe
from flashbuild.recipes.when import make_context
from tests.unit.patching_fakes import FIXTURES, fake_transform

if TYPE_CHECKING:
    from pathlib import Path

    from flashbuild.recipes.model import Recipe

__all__ = ["fake_transform"]


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and mtime (ns) of every file, including flashbuild's state."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def contents(root: Path) -> dict[str, bytes]:
    return {k: v[0] for k, v in snapshot(root).items()}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(FIXTURES / "tree", root)
    return root


@pytest.fixture
def recipe(fake_transform: object) -> Recipe:
    return load_recipe(FIXTURES / "demo.toml")


WIN120 = {"platform": "windows", "arch": "sm120"}
LINUX90 = {"platform": "linux", "arch": "sm_90a"}


def test_apply_reapply_revert(tree: Path, recipe: Recipe) -> None:
    before = contents(tree)
    report = patch_tree(recipe, tree, make_context(**WIN120))
    assert [s.matched for s in report.steps] == [True, True, True]
    assert set(report.files_written) == {"src/math.cpp", "README.md"}
    assert report.build_excludes == ("src/excluded.cpp",)
    math = (tree / "src/math.cpp").read_text()
    assert "int mul(int a, int b)" in math and math.endswith("// sm_120\n")
    state = applied_state(tree)
    assert state is not None and state.recipe == "demo"
    assert [p[0] for p in state.patches] == ["add-mul", "win-note", "sm120-note"]
    assert state.build_excludes == ("src/excluded.cpp",)
    assert not (tree / ".flashbuild" / "lock").exists()

    snap = snapshot(tree)
    again = patch_tree(recipe, tree, make_context(**WIN120))
    assert again.files_written == ()
    assert snapshot(tree) == snap  # no file rewritten, journal included: mtimes untouched

    reverted = revert_tree(tree)
    assert set(reverted.files_restored) == {"src/math.cpp", "README.md"}
    assert contents(tree) == before
    assert not (tree / ".flashbuild").exists()
    assert applied_state(tree) is None


def test_other_plan_reverts_first(tree: Path, recipe: Recipe) -> None:
    before = contents(tree)
    patch_tree(recipe, tree, make_context(**WIN120))
    report = patch_tree(recipe, tree, make_context(**LINUX90))
    assert [s.matched for s in report.steps] == [True, False, False]
    assert "README.md" in report.files_written  # back to its original
    assert (tree / "README.md").read_bytes() == before["README.md"]
    assert not (tree / "src/math.cpp").read_text().endswith("// sm_120\n")
    state = applied_state(tree)
    assert state is not None and state.files == ("src/math.cpp",)
    revert_tree(tree)
    assert contents(tree) == before


def test_dry_run_writes_nothing(tree: Path, recipe: Recipe) -> None:
    snap = snapshot(tree)
    report = patch_tree(recipe, tree, make_context(**WIN120), dry_run=True)
    assert set(report.files_written) == {"src/math.cpp", "README.md"}
    assert any("int mul" in (d.after or "") for d in report.pending)
    assert snapshot(tree) == snap


def test_crlf_tree_stays_crlf(tree: Path, recipe: Recipe) -> None:
    for name in ("src/math.cpp", "README.md"):
        path = tree / name
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    before = contents(tree)
    patch_tree(recipe, tree, make_context(**WIN120))
    math = (tree / "src/math.cpp").read_bytes()
    assert b"int mul(int a, int b) {\r\n" in math
    assert math.count(b"\n") == math.count(b"\r\n")
    revert_tree(tree)
    assert contents(tree) == before


def test_failing_step_changes_nothing(tree: Path, recipe: Recipe, tmp_path: Path) -> None:
    (tree / "src/math.cpp").write_text("int sub(int a, int b) {\n    return b - a;\n}\n")
    before = snapshot(tree)
    with pytest.raises(PatchError) as info:
        patch_tree(recipe, tree, make_context(**WIN120))
    assert info.value.what.startswith("step `add-mul`: hunk")
    assert snapshot(tree) == before


def test_expected_count_mismatch(tree: Path, fake_transform: object) -> None:
    text = (FIXTURES / "demo.toml").read_text().replace("expect = { sites = 1 }",
                                                        "expect = { sites = 6 }")
    recipe = parse_recipe(text, FIXTURES / "demo.toml")
    before = snapshot(tree)
    with pytest.raises(PatchError, match="upstream changed: expected 6 sites, found 1"):
        patch_tree(recipe, tree, make_context(**WIN120))
    assert snapshot(tree) == before


def test_read_only_file_is_refused_before_any_write(tree: Path, recipe: Recipe) -> None:
    target = tree / "src/math.cpp"
    target.chmod(stat.S_IRUSR | stat.S_IRGRP)
    before = contents(tree)
    try:
        with pytest.raises(PatchError, match="read-only"):
            patch_tree(recipe, tree, make_context(**WIN120))
        assert contents(tree) == before
        assert not (tree / ".flashbuild").exists()
    finally:
        target.chmod(0o644)


def test_live_lock_is_busy_and_stale_lock_is_taken_over(tree: Path, recipe: Recipe) -> None:
    (tree / ".flashbuild").mkdir()
    lock = tree / ".flashbuild" / "lock"
    lock.write_text(f"{os.getppid()}\n")  # a live process that is not us
    before = contents(tree)
    with pytest.raises(BusyError) as info:
        patch_tree(recipe, tree, make_context(**WIN120))
    assert info.value.exit_code == 9
    assert contents(tree) == before
    lock.write_text("999999999\n")  # no such pid
    report = patch_tree(recipe, tree, make_context(**WIN120))
    assert any("stale lock" in n for n in report.notes)
    assert not lock.exists()


def test_incomplete_journal_is_repaired(tree: Path, recipe: Recipe,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    before = contents(tree)
    patch_tree(recipe, tree, make_context(**WIN120))
    # Simulate a run that died after its first write: journal still `writing`.
    journal = jr.read_journal(tree)
    assert journal is not None
    jr.write_journal(tree, dataclasses.replace(journal, state="writing"))
    (tree / "README.md").write_text("bytes flashbuild never wrote\n")
    assert applied_state(tree) is None
    # Bytes that are neither the original nor what flashbuild wrote are someone's edit:
    # the repair stops, names the file and changes nothing...
    edited = contents(tree)
    with pytest.raises(TreeError) as info:
        patch_tree(recipe, tree, make_context(**LINUX90))
    assert info.value.details["files"] == ["README.md"]
    assert "--discard-edits" in info.value.fix
    assert contents(tree) == edited
    # ...until the user says to discard it.
    report = patch_tree(recipe, tree, make_context(**LINUX90), discard_edits=True)
    assert report.repaired
    assert (tree / "README.md").read_bytes() == before["README.md"]
    revert_tree(tree)
    assert contents(tree) == before


def test_stray_original_from_a_killed_run_is_not_trusted(tree: Path, recipe: Recipe) -> None:
    # A run killed after its `complete` journal but before it pruned originals/ (or after
    # saving originals but before its journal) leaves files there that no journal lists.
    # The next run that touches that file must save the file's current bytes, not keep those.
    before = contents(tree)
    patch_tree(recipe, tree, make_context(**LINUX90))  # touches src/math.cpp only
    stray = jr.state_dir(tree) / "originals" / jr.original_key("README.md")
    stray.write_bytes(b"stale bytes from an older tree\n")
    patch_tree(recipe, tree, make_context(**WIN120))  # now README.md too
    revert_tree(tree)
    assert contents(tree) == before


def test_revert_of_an_interrupted_run(tree: Path, recipe: Recipe) -> None:
    before = contents(tree)
    patch_tree(recipe, tree, make_context(**WIN120))
    journal = jr.read_journal(tree)
    assert journal is not None
    jr.write_journal(tree, dataclasses.replace(journal, state="writing"))
    report = revert_tree(tree)
    assert not report.was_complete
    assert contents(tree) == before


def test_new_file_and_its_folder_are_removed_on_revert(tree: Path, tmp_path: Path) -> None:
    patch = tmp_path / "new.patch"
    patch.write_text("--- /dev/null\n+++ b/gen/deep/new.h\n@@ -0,0 +1 @@\n+#pragma once\n")
    recipe = parse_recipe('[recipe]\nname = "n"\n[[patch]]\nid = "new"\ndiff = "new.patch"\n',
                          tmp_path / "r.toml")
    before = contents(tree)
    patch_tree(recipe, tree, make_context(**LINUX90))
    assert (tree / "gen/deep/new.h").read_text() == "#pragma once\n"
    revert_tree(tree)
    assert contents(tree) == before
    assert not (tree / "gen").exists()


# --- the command line ---------------------------------------------------------------------


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_cli_patch_json_explain_revert(tree: Path, fake_transform: object) -> None:
    recipe = str(FIXTURES / "demo.toml")
    code, out = run("patch", "--recipe", recipe, "--source", str(tree), "--platform", "linux",
                    "--arch", "sm_90a", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert [s["matched"] for s in doc["steps"]] == [True, False, False]
    assert "platform linux is not in windows" in doc["steps"][1]["reason"]
    code, out = run("patch", "--recipe", recipe, "--source", str(tree), "--platform", "windows",
                    "--arch", "sm120", "--explain")
    assert code == 0, out
    assert "win-note" in out and "why" in out
    code, out = run("patch", "--recipe", recipe, "--source", str(tree), "--revert")
    assert code == 0 and "restored" in out


def test_cli_dry_run_prints_diff(tree: Path, fake_transform: object) -> None:
    before = snapshot(tree)
    code, out = run("patch", "--recipe", str(FIXTURES / "demo.toml"), "--source", str(tree),
                    "--platform", "windows", "--arch", "sm120", "--dry-run")
    assert code == 0, out
    assert "+int mul(int a, int b) {" in out and "+windows only" in out
    assert snapshot(tree) == before


@pytest.mark.parametrize(("mutate", "code"), [
    (lambda t: t.replace('[build]', '[build'), 4),                # malformed TOML
    (lambda t: t.replace('expect = { hunks = 1 }', 'expcet = { hunks = 1 }'), 4),
    (lambda t: t.replace('expect = { hunks = 1 }', 'fuzz = "x"'), 4),  # wrong type
    (lambda t: t.replace('"add_mul.patch"', '"not_a_diff.patch"'), 5),
    (lambda t: t.replace('"add_mul.patch"', '"escape.patch"'), 10),
    (lambda t: t.replace('expect = { sites = 1 }', 'expect = { sites = 2 }'), 5),
])
def test_cli_bad_input_exit_codes(tree: Path, tmp_path: Path, fake_transform: object,
                                  mutate: object, code: int) -> None:
    folder = tmp_path / "recipe"
    shutil.copytree(FIXTURES, folder, ignore=shutil.ignore_patterns("tree"))
    (folder / "not_a_diff.patch").write_text("Just some notes about the change.\n")
    (folder / "escape.patch").write_text("--- a/../../etc/x\n+++ b/../../etc/x\n"
                                         "@@ -1 +1 @@\n-a\n+b\n")
    text = (folder / "demo.toml").read_text()
    (folder / "demo.toml").write_text(mutate(text))  # type: ignore[operator]
    before = snapshot(tree)
    got, out = run("patch", "--recipe", str(folder / "demo.toml"), "--source", str(tree),
                   "--platform", "windows", "--arch", "sm120")
    assert got == code, out
    assert snapshot(tree) == before


def test_cli_recipe_check(tmp_path: Path, fake_transform: object) -> None:
    code, out = run("recipe", "check", str(FIXTURES / "demo.toml"))
    assert code == 0 and "is valid" in out
    bad = tmp_path / "bad.toml"
    bad.write_text('[recipe]\nname = "b"\ndescripton = "typo"\n')
    code, out = run("recipe", "check", str(bad))
    assert code == 4 and "descripton" in out and "bad.toml:3" in out


# --- a write that fails half-way (disk full, a permission check_writable cannot see) --------


def fail_tree_write(monkeypatch: pytest.MonkeyPatch, nth: int, *, then: bool = False,
                    code: int = errno.ENOSPC) -> list[str]:
    """Make the `nth` write of a tree file (not of .flashbuild/) raise OSError(`code`); with
    `then`, every later one too. Returns the tree files written meanwhile."""
    real = jr.atomic_write
    seen: list[str] = []

    def write(target: Path, data: bytes, **kwargs: Any) -> None:
        if jr.STATE_DIR not in target.parts:
            seen.append(target.name)
            if len(seen) == nth or (then and len(seen) > nth):
                raise OSError(code, os.strerror(code), str(target))
        real(target, data, **kwargs)

    monkeypatch.setattr(jr, "atomic_write", write)
    return seen


@pytest.mark.parametrize("nth", [1, 2])
def test_failed_write_puts_a_fresh_tree_back(tree: Path, recipe: Recipe, nth: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    before = contents(tree)
    writes = fail_tree_write(monkeypatch, nth)
    with pytest.raises(PatchError) as info:
        patch_tree(recipe, tree, make_context(**WIN120))
    assert info.value.exit_code == 5
    assert "No space left on device" in info.value.what
    assert "put back as it was" in info.value.what
    assert info.value.fix.startswith("free disk space")
    # nth - 1 written, one failed, and the nth - 1 written put back by the rollback
    assert len(writes) == 2 * nth - 1
    assert contents(tree) == before  # byte-identical, no temp files, no .flashbuild/
    assert not (tree / ".flashbuild").exists()


def test_failed_write_keeps_the_previous_plan(tree: Path, recipe: Recipe,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    patch_tree(recipe, tree, make_context(**WIN120))
    patched = contents(tree)  # journal and originals included
    fail_tree_write(monkeypatch, 2, code=errno.EACCES)
    with pytest.raises(PatchError, match="Permission denied") as info:
        patch_tree(recipe, tree, make_context(**LINUX90))
    assert "writable" in info.value.fix
    assert contents(tree) == patched
    state = applied_state(tree)
    assert state is not None and state.context == make_context(**WIN120).describe()
    monkeypatch.undo()
    revert_tree(tree)
    patch_tree(recipe, tree, make_context(**LINUX90))  # and the tree still works as before


def test_failed_write_removes_new_files_and_folders(tree: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "new.patch").write_text(
        "--- /dev/null\n+++ b/gen/deep/new.h\n@@ -0,0 +1 @@\n+#pragma once\n")
    (tmp_path / "readme.patch").write_text(
        "--- a/zzz.txt\n+++ b/zzz.txt\n@@ -1 +1 @@\n-old\n+new\n")
    (tree / "zzz.txt").write_text("old\n")
    recipe = parse_recipe('[recipe]\nname = "n"\n[[patch]]\nid = "new"\ndiff = "new.patch"\n'
                          '[[patch]]\nid = "z"\ndiff = "readme.patch"\n', tmp_path / "r.toml")
    before = contents(tree)
    fail_tree_write(monkeypatch, 2)  # gen/deep/new.h is written, then zzz.txt fails
    with pytest.raises(PatchError, match=r"zzz\.txt"):
        patch_tree(recipe, tree, make_context(**LINUX90))
    assert contents(tree) == before
    assert not (tree / "gen").exists()


def test_failed_rollback_leaves_a_repairable_tree(tree: Path, recipe: Recipe,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    before = contents(tree)
    fail_tree_write(monkeypatch, 2, then=True)  # the disk stays full
    with pytest.raises(PatchError, match="nor put the tree back") as info:
        patch_tree(recipe, tree, make_context(**WIN120))
    assert "--revert" in info.value.fix
    journal = jr.read_journal(tree)
    assert journal is not None and journal.state == "writing"
    monkeypatch.undo()  # space freed
    assert patch_tree(recipe, tree, make_context(**WIN120)).repaired
    revert_tree(tree)
    assert contents(tree) == before


def test_cli_write_failure_exit_code(tree: Path, fake_transform: object,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    before = contents(tree)
    fail_tree_write(monkeypatch, 2)
    code, out = run("patch", "--recipe", str(FIXTURES / "demo.toml"), "--source", str(tree),
                    "--platform", "windows", "--arch", "sm120", "--json")
    assert code == 5, out
    doc, _ = json.JSONDecoder().raw_decode(out)  # the JSON document, then the message
    assert "could not write" in doc["what"] and doc["fix"]
    assert contents(tree) == before


# --- the lock ---------------------------------------------------------------------------------


def write_lock(tree: Path, text: str, *, age_s: float = 0.0) -> Path:
    lock = tree / ".flashbuild" / "lock"
    lock.parent.mkdir(exist_ok=True)
    lock.write_text(text)
    when = time.time() - age_s
    os.utime(lock, (when, when))
    return lock


def lock_text(pid: int, started: float, host: str | None = None) -> str:
    return json.dumps({"pid": pid, "started": started,
                       "host": host or socket.gethostname()}) + "\n"


@pytest.mark.parametrize("text", ["", "12", '{"pid": 1'])
def test_fresh_empty_or_half_written_lock_is_busy(tree: Path, text: str) -> None:
    write_lock(tree, text)
    with pytest.raises(BusyError, match="taking the lock") as info:
        jr.Lock(tree).acquire()
    assert "still writing it" in info.value.evidence


def test_old_half_written_lock_is_taken_over(tree: Path) -> None:
    lock = write_lock(tree, "12", age_s=jr.LOCK_GRACE_S + 60)
    taken = jr.Lock(tree)
    taken.acquire()
    assert taken.notes == ["took over a stale lock (half-written for 70 s)"]
    assert json.loads(lock.read_text())["pid"] == os.getpid()
    taken.release()
    assert not (tree / ".flashbuild").exists()


def test_lock_of_a_reused_pid_is_stale(tree: Path) -> None:
    parent = psutil.Process(os.getppid())
    write_lock(tree, lock_text(parent.pid, parent.create_time()))
    with pytest.raises(BusyError, match=f"pid {parent.pid}"):
        jr.Lock(tree).acquire()
    write_lock(tree, lock_text(parent.pid, parent.create_time() - 1000))
    taken = jr.Lock(tree)
    taken.acquire()
    assert "now belongs to another process" in taken.notes[0]
    taken.release()


def test_lock_of_another_host_is_busy(tree: Path) -> None:
    write_lock(tree, lock_text(999999999, 1.0, host="elsewhere"))
    with pytest.raises(BusyError, match="on host elsewhere"):
        jr.Lock(tree).acquire()


def test_release_leaves_a_lock_it_does_not_own(tree: Path) -> None:
    taken = jr.Lock(tree)
    taken.acquire()
    other = write_lock(tree, lock_text(os.getppid(), psutil.Process(os.getppid()).create_time()))
    taken.release()
    assert other.exists()


def test_stray_lock_files_of_killed_runs_are_swept(tree: Path) -> None:
    stray = write_lock(tree, "").with_name("lock.123-abc.tmp")
    (tree / ".flashbuild" / "lock").unlink()
    stray.write_text(lock_text(123, 1.0))
    old = time.time() - jr.LOCK_GRACE_S - 60
    os.utime(stray, (old, old))
    with jr.locked(tree):
        assert not stray.exists()
    assert not (tree / ".flashbuild").exists()


def test_stale_lock_claimed_by_another_run(tree: Path) -> None:
    lock = write_lock(tree, "999999999\n")
    seen = jr.Lock(tree)._look()
    assert seen is not None
    claim = jr.Lock(tree)._claim(seen)  # another run is taking it over right now
    with pytest.raises(BusyError, match="taking over a stale lock"):
        jr.Lock(tree).acquire()
    assert lock.read_text() == "999999999\n"
    old = time.time() - jr.LOCK_GRACE_S - 60  # ... or was killed doing so, long ago
    os.utime(claim, (old, old))
    taken = jr.Lock(tree)
    taken.acquire()
    assert taken.notes == ["took over a stale lock (pid 999999999 is no longer running)"]
    assert not claim.exists()  # swept
    taken.release()
    assert not (tree / ".flashbuild").exists()
