"""The tree lock under real concurrency: many processes race for `.flashbuild/lock` at once
(released together by a start file), and exactly one may hold it -- on a free tree, over a
stale lock of a dead pid, over a lock whose pid now belongs to another process; none over a
live one. And a second `flashbuild patch` finding a lock still being written exits 9."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from flashbuild.proc import Completed, ProcessRunner

ROOT = Path(__file__).resolve().parents[2]
RACERS = 8

pytestmark = pytest.mark.integration

# Each racer: say it is ready, wait for the start file, try the lock once, record the outcome,
# then wait until every racer has an outcome before the winner releases -- so a winner cannot
# release early and let a late racer win legitimately (which would hide a double win).
RACER = """
import json, sys, time
from pathlib import Path
from flashbuild.errors import BusyError
from flashbuild.patching import journal as jr

root, marks, index, total = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
deadline = time.monotonic() + 90
(marks / f"ready-{index}").touch()
while not (marks / "go").exists():
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.001)
lock = jr.Lock(root)
try:
    lock.acquire()
except BusyError as exc:
    (marks / f"lost-{index}").write_text(exc.what)
    code = 9
else:
    (marks / f"won-{index}").write_text(json.dumps(lock.notes))
    code = 0
while len([*marks.glob("won-*"), *marks.glob("lost-*")]) < total:
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.005)
if code == 0:
    lock.release()
sys.exit(code)
"""


def race(root: Path, marks: Path) -> list[Completed]:
    marks.mkdir()

    def one(index: int) -> Completed:
        return ProcessRunner().run(
            [sys.executable, "-c", RACER, str(root), str(marks), str(index), str(RACERS)],
            cwd=ROOT, timeout=120, check=False)

    with ThreadPoolExecutor(RACERS) as pool:
        futures = [pool.submit(one, i) for i in range(RACERS)]
        deadline = time.monotonic() + 90
        while len(list(marks.glob("ready-*"))) < RACERS and time.monotonic() < deadline:
            time.sleep(0.01)
        (marks / "go").touch()
        done = [f.result() for f in futures]
    for result in done:
        assert result.returncode in (0, 9), result.output
    return done


def lock_text(pid: int, started: float) -> str:
    return json.dumps({"pid": pid, "started": started, "host": socket.gethostname()}) + "\n"


def dead_process() -> tuple[int, float]:
    """pid and start time of a process that has exited."""
    done = ProcessRunner().run(
        [sys.executable, "-c", "import os, psutil; "
         "print(os.getpid(), psutil.Process().create_time())"], timeout=60)
    pid, started = done.stdout.split()
    return int(pid), float(started)


def stale_dead() -> str:
    return lock_text(*dead_process())


def stale_dead_pid_only() -> str:
    return f"{dead_process()[0]}\n"  # the format of flashbuild before the start token


def stale_reused() -> str:
    # This test process is alive, but the lock says its pid started long ago: a reused pid.
    return lock_text(os.getpid(), psutil.Process().create_time() - 1000)


@pytest.mark.parametrize("stale", [None, stale_dead, stale_dead_pid_only, stale_reused])
def test_exactly_one_racer_takes_the_lock(tmp_path: Path, stale: object) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    if stale is not None:
        (root / ".flashbuild").mkdir()
        (root / ".flashbuild" / "lock").write_text(stale())  # type: ignore[operator]
    done = race(root, tmp_path / "marks")
    assert sorted(r.returncode for r in done) == [0] + [9] * (RACERS - 1)
    won = list((tmp_path / "marks").glob("won-*"))
    assert len(won) == 1
    notes = json.loads(won[0].read_text())
    assert all("took over a stale lock" in n for n in notes)
    for lost in (tmp_path / "marks").glob("lost-*"):
        assert "another flashbuild run" in lost.read_text()
    # The winner released; no temp or set-aside file of any racer was left behind.
    assert not (root / ".flashbuild").exists()


def test_no_racer_takes_a_live_lock(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / ".flashbuild").mkdir(parents=True)
    lock = root / ".flashbuild" / "lock"
    lock.write_text(lock_text(os.getpid(), psutil.Process().create_time()))
    before = lock.read_bytes()
    done = race(root, tmp_path / "marks")
    assert [r.returncode for r in done] == [9] * RACERS
    assert lock.read_bytes() == before
    assert sorted(p.name for p in lock.parent.iterdir()) == ["lock"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    if not (ROOT / "csrc" / "CMakeLists.txt").exists():
        pytest.skip("csrc/ is not in this checkout")
    copy = tmp_path / "csrc"
    shutil.copytree(ROOT / "csrc", copy, ignore=shutil.ignore_patterns(
        "build*", "__pycache__", "*.so", ".flashbuild"))
    return copy


def test_patch_finding_a_lock_being_written_is_busy(tree: Path) -> None:
    lock = tree / ".flashbuild" / "lock"
    lock.parent.mkdir()
    lock.write_text("")  # what the O_EXCL fallback shows before its owner writes the pid
    # Dated ahead, so the seconds this subprocess takes to start cannot age it past
    # LOCK_GRACE_S (a lock from the future counts as fresh: clock skew on a share).
    ahead = time.time() + 60
    os.utime(lock, (ahead, ahead))
    files = sorted(p for p in tree.rglob("*") if p.is_file())
    before = {p: p.read_bytes() for p in files}
    done = ProcessRunner().run(
        [sys.executable, "-m", "flashbuild", "patch", "--source", str(tree), "--platform",
         "windows", "--arch", "sm120", "--json"], timeout=120, check=False)
    assert done.returncode == 9, done.output
    doc, _ = json.JSONDecoder().raw_decode(done.stdout)
    assert doc["what"] == "another flashbuild run is taking the lock on this tree"
    assert "empty" in doc["evidence"] and str(lock) in doc["fix"]
    assert sorted(p for p in tree.rglob("*") if p.is_file()) == files
    assert {p: p.read_bytes() for p in files} == before
