"""Kills at every write point of a patch run and of a revert, zombie and live lock owners, and
concurrent runs: the next run repairs or reverts, the tree comes back byte for byte, and
nothing outside the tree is touched."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from flashbuild.patching import journal as jr
from tests.reliability.helpers import WIN120, Sandbox, judge, snapshot

#: Write points of a first WIN120 run on the sandbox tree: the `writing` journal (temp
#: written, renamed), 3 originals and 3 tree files (2 points each), the `complete` journal.
PATCH_POINTS = 16


@pytest.mark.parametrize("point", range(1, PATCH_POINTS + 1))
def test_kill_at_every_write_point_of_a_patch(box: Sandbox, point: int) -> None:
    killed = box.proc(*box.patch_args(*WIN120), env={jr.KILL_AT_HOOK: str(point)})
    assert killed.code == 137, f"write point {point} was never reached:\n{killed.output}"
    # Half the points are followed by a plain patch (repair), half by a revert.
    if point % 2:
        out = box.cli(*box.patch_args(*WIN120))
        judge(f"kill: patch at write point {point}, then patch", box, out, code=0)
    out = box.cli(*box.patch_args("--revert"))
    judge(f"kill: patch at write point {point}, then revert", box, out, code=0,
          tree=box.pristine)
    assert not (box.tree / ".flashbuild").exists()


def test_the_patch_run_has_no_more_write_points(box: Sandbox) -> None:
    out = box.proc(*box.patch_args(*WIN120), env={jr.KILL_AT_HOOK: str(PATCH_POINTS + 1)})
    judge("kill: past the last write point", box, out, code=0)


@pytest.mark.parametrize("point", range(1, 7))
def test_kill_at_every_write_point_of_a_revert(box: Sandbox, point: int) -> None:
    assert box.cli(*box.patch_args(*WIN120)).code == 0
    killed = box.proc(*box.patch_args("--revert"), env={jr.KILL_AT_HOOK: str(point)})
    assert killed.code == 137, killed.output
    out = box.cli(*box.patch_args("--revert"))
    judge(f"kill: revert at write point {point}, then revert", box, out, code=0,
          tree=box.pristine)


def test_lock_of_a_zombie_is_taken_over(box: Sandbox) -> None:
    # A child that exited and is not reaped yet: a zombie, as a killed run can be. psutil
    # still reads its start time, so it used to look alive and hold the lock for ever.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        zombie = psutil.Process(child.pid)
        deadline = time.monotonic() + 30
        while zombie.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.02)
        assert zombie.status() == psutil.STATUS_ZOMBIE
        (box.tree / ".flashbuild").mkdir()
        (box.tree / ".flashbuild" / "lock").write_text(json.dumps(
            {"pid": zombie.pid, "started": zombie.create_time(),
             "host": socket.gethostname()}) + "\n")
        out = box.cli(*box.patch_args(*WIN120))
        judge("concurrency: lock held by a zombie", box, out, code=0)
        assert "stale lock" in out.output
    finally:
        child.wait()


def test_lock_of_a_live_run_is_busy(box: Sandbox) -> None:
    (box.tree / ".flashbuild").mkdir()
    me = psutil.Process()
    (box.tree / ".flashbuild" / "lock").write_text(json.dumps(
        {"pid": me.pid, "started": me.create_time(), "host": socket.gethostname()}) + "\n")
    before = snapshot(box.tree)
    out = box.cli(*box.patch_args(*WIN120))
    judge("concurrency: lock held by a live run", box, out, code=9, tree=before)


def test_concurrent_runs_leave_one_consistent_tree(box: Sandbox) -> None:
    env = {**os.environ}
    runs = [subprocess.Popen([sys.executable, "-m", "flashbuild", *box.patch_args(*WIN120)],
                             env=env, cwd=box.base, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for _ in range(3)]
    codes = [r.wait(timeout=120) for r in runs]
    outputs = [r.stdout.read() if r.stdout else "" for r in runs]
    for r in runs:
        if r.stdout:
            r.stdout.close()
    assert set(codes) <= {0, 9} and 0 in codes, outputs
    for code, output in zip(codes, outputs, strict=True):
        if code == 9:
            assert "Traceback" not in output and "fix:" in output
    out = box.cli(*box.patch_args("--revert"))
    judge("concurrency: three runs at once, then revert", box, out, code=0, tree=box.pristine)
