"""Data and state, third pass (issue 27): nothing written through a link, a killed in-place
install recovered by the next run, a full disk a clear error with nothing partial left. Each
case calls the one mechanism directly (no compile), and records itself in the ledger."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from flashbuild import outputs
from flashbuild.errors import InstallError
from flashbuild.installing import install
from flashbuild.installing.install import recover_swaps, recover_tree, replace_all
from flashbuild.outputs import write_no_follow
from flashbuild.patching.journal import Lock, atomic_write, tmp_of
from tests.reliability.helpers import judge_outcome, record

if TYPE_CHECKING:
    from tests.reliability.helpers import Sandbox


def _ok(case: str, *, lost: bool = False, clear: bool | None = None) -> None:
    record(case, clear_error=clear, data_lost=lost, tree_changed=False, hang=False)


@pytest.mark.parametrize("dangling", [False, True])
def test_a_link_at_the_output_is_replaced_not_followed(tmp_path: Path, dangling: bool) -> None:
    build = tmp_path / "build"
    build.mkdir()
    victim = tmp_path / "user" / "notes.txt"
    victim.parent.mkdir()
    if not dangling:
        victim.write_bytes(b"the user's own words\n")
    draft = build / "pkg.draft.toml"
    draft.symlink_to(victim)
    write_no_follow(draft, b"[recipe]\n")
    kept = victim.read_bytes() == b"the user's own words\n" if not dangling \
        else not victim.exists()
    _ok(f"draft written through a {'dangling ' if dangling else ''}link", lost=not kept)
    assert kept
    assert not draft.is_symlink() and draft.read_bytes() == b"[recipe]\n"


def test_a_link_at_the_temp_file_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    target = tmp_path / "stamp.json"
    (tmp_path / ("stamp.json" + outputs.NO_FOLLOW_TMP)).symlink_to(victim)
    write_no_follow(target, b"{}")
    _ok("stamp temp file planted as a link", lost=victim.read_bytes() != b"keep")
    assert victim.read_bytes() == b"keep" and target.read_bytes() == b"{}"


_FDOPEN = os.fdopen


class _FullDisk:
    """A file object whose write fills the disk after a few bytes (ENOSPC)."""

    def __init__(self, fd: int, *_: object) -> None:
        self.fh = _FDOPEN(fd, "wb")

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *_: object) -> None:
        self.fh.close()

    def write(self, data: bytes) -> int:
        self.fh.write(data[:3])
        self.fh.flush()
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_drafting_leaves_the_old_file(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    draft = tmp_path / "pkg.draft.toml"
    draft.write_bytes(b"old")
    monkeypatch.setattr(outputs.os, "fdopen", _FullDisk)
    with pytest.raises(OSError, match="No space") as caught:
        write_no_follow(draft, b"new draft")
    assert caught.value.errno == errno.ENOSPC
    left = sorted(p.name for p in tmp_path.iterdir())
    _ok("full disk while drafting", lost=left != ["pkg.draft.toml"])
    assert left == ["pkg.draft.toml"] and draft.read_bytes() == b"old"


def test_a_full_disk_while_installing_is_a_clear_error(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_bytes(b"old init\n")
    (pkg / "_ext.so").write_bytes(b"old so")
    built = tmp_path / "built.so"
    built.write_bytes(b"new so" * 1000)

    def full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(install.shutil, "copyfileobj", full)
    with pytest.raises(InstallError) as caught:
        replace_all([(pkg / "__init__.py", b"new init\n"), (pkg / "_ext.so", built)])
    err = caught.value
    left = sorted(p.name for p in pkg.iterdir())
    _ok("full disk while installing", clear=err.exit_code == 7,
        lost=left != ["__init__.py", "_ext.so"])
    assert err.exit_code == 7 and "disk is full" in err.what and "free space" in err.fix
    assert left == ["__init__.py", "_ext.so"]
    assert (pkg / "__init__.py").read_bytes() == b"old init\n"
    assert (pkg / "_ext.so").read_bytes() == b"old so"


def _killed_mid_swap(pkg: Path) -> None:
    """What a SIGKILL between the two renames of `__init__.py` leaves: `_ext.so` already
    swapped (its old copy aside), `__init__.py` moved aside, its new copy still staged."""
    pkg.mkdir(parents=True)
    (pkg / "_ext.so").write_bytes(b"new so")
    (pkg / "_ext.so.flashbuild-old").write_bytes(b"old so")
    (pkg / "__init__.py.flashbuild-old").write_bytes(b"old init\n")
    (pkg / "__init__.py.flashbuild-tmp").write_bytes(b"new init\n")


def test_a_kill_between_the_renames_is_recovered_by_the_next_run(tmp_path: Path) -> None:
    pkg = tmp_path / "tree" / "pkg"
    _killed_mid_swap(pkg)
    restored = recover_tree(tmp_path / "tree")
    names = sorted(p.name for p in pkg.iterdir())
    ok = names == ["__init__.py", "_ext.so"] \
        and (pkg / "__init__.py").read_bytes() == b"old init\n" \
        and (pkg / "_ext.so").read_bytes() == b"old so"
    _ok("SIGKILL between the __init__.py renames", lost=not ok)
    assert ok, names
    assert sorted(p.name for p in restored) == ["__init__.py", "_ext.so"]
    assert recover_tree(tmp_path / "tree") == []  # idempotent: nothing left to do


def test_a_kill_after_every_swap_keeps_the_new_files(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for name in ("__init__.py", "_ext.so"):
        (pkg / name).write_bytes(b"new")
        (pkg / (name + ".flashbuild-old")).write_bytes(b"old")
    assert recover_swaps([pkg / "__init__.py", pkg / "_ext.so"]) == []
    assert sorted(p.name for p in pkg.iterdir()) == ["__init__.py", "_ext.so"]
    assert (pkg / "__init__.py").read_bytes() == b"new"


def test_build_restores_the_package_before_reading_the_tree(box: Sandbox) -> None:
    """The whole command: a tree left by the kill gets its __init__.py back at the next
    `build`, whatever that build then says about the tree."""
    pkg = box.tree / "killedpkg"
    _killed_mid_swap(pkg)
    out = box.cli("build", str(box.tree), "--install", "none", "--arch", "sm_90",
                  "--build-dir", str(box.base / "b"))
    assert (pkg / "__init__.py").read_bytes() == b"old init\n", out.output
    assert "restored" in out.output


def test_a_journal_temp_planted_as_a_link_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    target = tmp_path / "journal.json"
    tmp_of(target).symlink_to(victim)
    atomic_write(target, b"{}", fsync=False)
    _ok("journal temp file planted as a link", lost=victim.read_bytes() != b"keep")
    assert victim.read_bytes() == b"keep" and target.read_bytes() == b"{}"


def test_build_drafts_beside_a_planted_link_not_through_it(box: Sandbox) -> None:
    """The zero-config draft and its key, both links planted in the build folder (one to a
    user's file, one dangling): the user's file keeps its bytes, no file appears."""
    build = box.base / "b"
    build.mkdir()
    victim = box.sentinel / "precious.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_bytes(b"precious\n")
    (build / f"{box.tree.name}.draft.toml").symlink_to(victim)
    (build / f"{box.tree.name}.draft.toml.key").symlink_to(box.sentinel / "created")
    out = box.cli("build", str(box.tree), "--install", "none", "--arch", "sm_90",
                  "--build-dir", str(build))
    kept = victim.read_bytes() == b"precious\n" and not (box.sentinel / "created").exists()
    _ok("zero-config draft through planted links", lost=not kept)
    assert kept, out.output


@pytest.mark.parametrize("locale", ["C.UTF-8", "C"])
def test_a_file_name_that_is_not_utf8_does_not_crash_build(box: Sandbox, locale: str) -> None:
    """A tree holding `caf\\xe9.cu` (Latin-1 bytes): the draft key raised UnicodeEncodeError,
    exit 1, in any locale (issue 27). Whatever the build then says, it is not a crash."""
    if os.uname().sysname != "Linux":  # macOS refuses such names; Windows names are UTF-16
        pytest.skip("file names as raw bytes are a Linux case")
    (box.tree / "src").mkdir(exist_ok=True)
    fd = os.open(os.fsencode(box.tree / "src") + b"/caf\xe9.cu", os.O_WRONLY | os.O_CREAT)
    os.close(fd)
    out = box.proc("build", str(box.tree), "--install", "none", "--arch", "sm_90",
                   "--build-dir", str(box.base / "b"),
                   env={"LC_ALL": locale, "PYTHONIOENCODING": ""})
    crashed = out.code == 1 or out.traceback or out.internal
    record(f"non-UTF-8 file name in build ({locale})", clear_error=None, data_lost=False,
           tree_changed=False, hang=out.hang, internal=crashed)
    assert not crashed and not out.hang, out.output


def test_a_second_zero_config_build_waits_for_no_one_and_says_so(box: Sandbox) -> None:
    """A build folder another live run is drafting in (its lock held by this test's process):
    exit 9 naming the drafting run, not the exit 6 compiler error of the race (issue 27)."""
    build = box.base / "b"
    build.mkdir()
    lock = Lock(build)
    lock.acquire()
    try:
        out = box.proc("build", str(box.tree), "--install", "none", "--arch", "sm_90",
                       "--build-dir", str(build))
    finally:
        lock.release()
    judge_outcome("two zero-config builds of one tree", out, code=9,
                  say="is drafting a recipe")
