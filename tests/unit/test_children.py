"""The process-tree model on its own: the Windows Job Object logic against a fake Win32 API
(the ctypes calls run only on Windows), the structures' layout, and the stop-signal state."""

from __future__ import annotations

import ctypes
import signal
from dataclasses import dataclass, field

import pytest

from flashbuild import interrupts
from flashbuild.platforms import children, get


@dataclass
class FakeJobs:
    """A JobApi that records calls; `active` processes stay in the job until terminated."""

    calls: list[tuple[object, ...]] = field(default_factory=list)
    active: int = 2
    fail_assign: bool = False

    def create(self) -> int:
        self.calls.append(("create",))
        return 77

    def set_limits(self, job: int, flags: int) -> None:
        self.calls.append(("limits", job, flags))

    def assign(self, job: int, pid: int) -> None:
        self.calls.append(("assign", job, pid))
        if self.fail_assign:
            raise OSError(5, "access denied")

    def active_processes(self, job: int) -> int:
        return self.active

    def terminate(self, job: int, exit_code: int) -> None:
        self.calls.append(("terminate", job, exit_code))
        self.active = 0

    def close(self, job: int) -> None:
        self.calls.append(("close", job))


@dataclass
class FakeChild:
    pid: int = 4242
    returncode: int | None = None
    killed: bool = False

    def poll(self) -> int | None:
        return self.returncode

    def kill(self) -> None:
        self.killed = True
        self.returncode = 1


def test_the_child_goes_into_a_kill_on_close_job_and_is_ended_with_it() -> None:
    api, child, breaks = FakeJobs(), FakeChild(), []
    job = children.JobObject(child, api, send_break=breaks.append)  # type: ignore[arg-type]
    assert job.in_job
    flags = api.calls[1][2]
    assert isinstance(flags, int) and flags & children.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    assert api.calls[2] == ("assign", 77, 4242)
    job.stop()
    assert breaks == [4242], "Ctrl-Break goes to the child's process group"
    child.returncode = 0  # the child exited; its own children still run in the job
    assert job.alive()
    job.kill()
    assert ("terminate", 77, children.INTERRUPTED_EXIT) in api.calls
    assert not job.alive()
    job.close()
    assert api.calls[-2:] == [("terminate", 77, children.INTERRUPTED_EXIT), ("close", 77)]


def test_a_process_that_outlives_a_finished_command_is_spared_by_the_close() -> None:
    """A compiler-cache server left running after a successful build: the job's handle is
    closed without KILL_ON_JOB_CLOSE, as POSIX leaves it running too."""
    api, child = FakeJobs(), FakeChild(returncode=0)
    job = children.JobObject(child, api, send_break=lambda pid: None)  # type: ignore[arg-type]
    job.close()
    assert api.calls[-2:] == [("limits", 77, children.JOB_OBJECT_LIMIT_BREAKAWAY_OK),
                              ("close", 77)]


def test_a_job_the_child_cannot_join_falls_back_to_the_one_process() -> None:
    api, child = FakeJobs(fail_assign=True), FakeChild()
    job = children.JobObject(child, api, send_break=lambda pid: None)  # type: ignore[arg-type]
    assert not job.in_job and ("close", 77) in api.calls
    job.kill()
    assert child.killed and not any(c[0] == "terminate" for c in api.calls)


def test_job_structures_have_the_sdk_layout() -> None:
    limits, accounting = children.job_structures()
    if ctypes.sizeof(ctypes.c_void_p) == 8:
        assert (ctypes.sizeof(limits), ctypes.sizeof(accounting)) == (144, 48)


def test_each_platform_starts_children_as_the_leader_of_their_own_tree() -> None:
    assert get("linux").child_start_options() == {"start_new_session": True}
    assert get("windows").child_start_options() == {
        "creationflags": children.CREATE_NEW_PROCESS_GROUP}


def test_a_stop_signal_becomes_a_noted_keyboard_interrupt() -> None:
    mark = interrupts.count()
    with pytest.raises(KeyboardInterrupt) as raised:
        interrupts._handler(signal.SIGTERM, None)
    assert type(raised.value) is interrupts.StopRequested
    assert interrupts.since(mark) == "SIGTERM"
    assert interrupts.describe("SIGTERM") == "SIGTERM"
    with interrupts.shielded():
        interrupts._handler(signal.SIGINT, None)  # noted, not raised
    assert interrupts.count() == mark + 2


def test_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        interrupts.install()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT
                          else signal.SIG_DFL)
        signal.signal(signal.SIGHUP, previous)


def test_once_stopping_no_child_starts_until_the_next_command() -> None:
    """After a stop signal the CLI's edge ends every child; a doctor probe thread that goes on
    must get Interrupted instead of a new process that nobody would end."""
    import sys

    from flashbuild.errors import Interrupted
    from flashbuild.proc import ProcessRunner

    interrupts.stop_children()
    try:
        with pytest.raises(Interrupted, match="was not started"):
            ProcessRunner().run([sys.executable, "--version"])
    finally:
        interrupts.begin()
    assert not interrupts.stopping()
