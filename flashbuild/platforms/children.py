"""The tree of processes a child leads, as one thing that can be stopped.

A build tool is never one process: `pip wheel` runs a PEP 517 hook process that runs setup.py,
whose BuildExtension runs ninja, which runs nvcc, which runs cicc and ptxas (cl on Windows).
Ending only the process flashbuild started (what `subprocess` does on a timeout, and what
happens when flashbuild itself dies) leaves the rest running, re-parented to init. So every
child is started as the leader of its own group and ended as a group:

- POSIX: a new session (`start_new_session=True`, so pid = process group id = session id);
  `stop()` sends SIGINT to the group (what a terminal's Ctrl-C does: ninja, pip and nvcc clean
  up after it), `kill()` SIGKILL. A process that starts its own session (a daemon) leaves the
  group and is not followed.
- Windows: a Job Object with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE holding the child (and so
  everything it starts), plus CREATE_NEW_PROCESS_GROUP so `stop()` can send CTRL_BREAK_EVENT
  to the group; `kill()` is TerminateJobObject, and when flashbuild itself is ended (a closed
  console, Task Manager) the system closes the job handle and the job's processes end with it.
  The child is assigned right after it starts: a grandchild it spawns in that instant is not
  in the job (CREATE_SUSPENDED would close the gap but needs the thread handle `subprocess`
  does not keep). Processes may break away (JOB_OBJECT_LIMIT_BREAKAWAY_OK) when they ask to,
  as a compiler-cache server does.

The ctypes code is the only part that cannot run on Linux: `JobObject` takes its Win32 calls
as an argument (`JobApi`), so its logic is tested with a fake, and the real calls are made only
by `Kernel32Jobs`, which the Windows platform constructs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable


class ChildTree(Protocol):
    """Every process a started child leads."""

    def stop(self) -> None:
        """Ask every process of the tree to stop, as Ctrl-C would."""
        ...

    def kill(self) -> None:
        """End every process of the tree now."""
        ...

    def alive(self) -> bool:
        """Whether a process of the tree still runs (a zombie does not count)."""
        ...

    def close(self) -> None:
        """Release what the tree holds (Windows: the job handle)."""
        ...


# --- POSIX -------------------------------------------------------------------------------------

class ProcessGroup:
    """The child's session / process group (started with `start_new_session=True`)."""

    def __init__(self, proc: subprocess.Popen[Any]) -> None:
        self._proc = proc
        self.pgid = proc.pid

    def _signal(self, sig: int) -> None:
        # Gone already (ProcessLookupError) or, on macOS, a group of zombies (EPERM).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def stop(self) -> None:
        self._signal(signal.SIGINT)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def alive(self) -> bool:
        self._proc.poll()  # reap the leader: an unreaped leader is still a group member
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # Orphans that exited stay zombies until init reaps them (and in a container whose
        # PID 1 never reaps, for ever): killpg still finds them, so look at their state.
        import psutil

        for proc in psutil.process_iter(["status"]):
            try:
                if (proc.info["status"] != psutil.STATUS_ZOMBIE
                        and os.getpgid(proc.pid) == self.pgid):
                    return True
            except (ProcessLookupError, psutil.Error):
                continue
        return False

    def close(self) -> None:
        pass


# --- Windows -----------------------------------------------------------------------------------

#: CREATE_NEW_PROCESS_GROUP (winbase.h); `subprocess` defines the name only on Windows.
CREATE_NEW_PROCESS_GROUP = 0x00000200
#: signal.CTRL_BREAK_EVENT (wincon.h), defined by `signal` only on Windows.
CTRL_BREAK_EVENT = 1
JOB_OBJECT_LIMIT_BREAKAWAY_OK = 0x00000800
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x00002000
#: JOBOBJECTINFOCLASS values.
JOB_BASIC_ACCOUNTING = 1
JOB_EXTENDED_LIMITS = 9
#: OpenProcess rights AssignProcessToJobObject needs.
PROCESS_SET_QUOTA = 0x0100
PROCESS_TERMINATE = 0x0001
#: The exit code TerminateJobObject gives the job's processes (STATUS_CONTROL_C_EXIT, so a
#: reader of their status sees an interruption, as proc.INTERRUPTED_CODES does).
INTERRUPTED_EXIT = 0xC000013A


class JobApi(Protocol):
    """The Win32 calls a Job Object needs (handles are ints)."""

    def create(self) -> int: ...

    def set_limits(self, job: int, flags: int) -> None: ...

    def assign(self, job: int, pid: int) -> None: ...

    def active_processes(self, job: int) -> int: ...

    def terminate(self, job: int, exit_code: int) -> None: ...

    def close(self, job: int) -> None: ...


class JobObject:
    """A child in its own Job Object (and process group, for CTRL_BREAK)."""

    def __init__(self, proc: subprocess.Popen[Any], api: JobApi,
                 send_break: Callable[[int], None] | None = None) -> None:
        self._proc = proc
        self._api = api
        self._send_break = send_break or (lambda pid: os.kill(pid, CTRL_BREAK_EVENT))
        self._job: int | None = None
        try:
            job = api.create()
        except OSError:
            return  # no job: the one process below is all that can be ended
        try:
            api.set_limits(job, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
                           | JOB_OBJECT_LIMIT_BREAKAWAY_OK)
            api.assign(job, proc.pid)
        except OSError:
            # The child exited already, or a job it cannot join (Windows before 8 has no
            # nested jobs): fall back to the one process.
            api.close(job)
            return
        self._job = job

    @property
    def in_job(self) -> bool:
        return self._job is not None

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._send_break(self._proc.pid)

    def kill(self) -> None:
        if self._job is not None:
            with contextlib.suppress(OSError):
                self._api.terminate(self._job, INTERRUPTED_EXIT)
        with contextlib.suppress(OSError):
            self._proc.kill()

    def alive(self) -> bool:
        if self._proc.poll() is None:
            return True
        if self._job is None:
            return False
        try:
            return self._api.active_processes(self._job) > 0
        except OSError:
            return False

    def close(self) -> None:
        # Closing the last handle of a KILL_ON_JOB_CLOSE job ends what is still in it. After
        # a command that ended normally, a process that outlives it on purpose (a compiler-
        # cache server) is left alone, as on POSIX: the limit is dropped before the close.
        # (On an interrupt the tree was killed before this, so nothing is left to spare.)
        if self._job is None:
            return
        if self.alive():
            with contextlib.suppress(OSError):
                self._api.set_limits(self._job, JOB_OBJECT_LIMIT_BREAKAWAY_OK)
        self._api.close(self._job)
        self._job = None


def _kernel32() -> Any:
    import ctypes

    return ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]


class Kernel32Jobs:
    """JobApi through ctypes. Constructed only on Windows (the Windows platform does)."""

    def __init__(self) -> None:
        import ctypes

        k32 = _kernel32()
        handle, dword, boolean = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int
        # HANDLE is pointer-sized: without restype ctypes would cut it to a C int.
        k32.CreateJobObjectW.restype = handle
        k32.CreateJobObjectW.argtypes = [ctypes.c_void_p, ctypes.c_wchar_p]
        k32.OpenProcess.restype = handle
        k32.OpenProcess.argtypes = [dword, boolean, dword]
        k32.SetInformationJobObject.argtypes = [handle, ctypes.c_int, ctypes.c_void_p, dword]
        k32.QueryInformationJobObject.argtypes = [handle, ctypes.c_int, ctypes.c_void_p,
                                                  dword, ctypes.c_void_p]
        k32.AssignProcessToJobObject.argtypes = [handle, handle]
        k32.TerminateJobObject.argtypes = [handle, ctypes.c_uint32]
        k32.CloseHandle.argtypes = [handle]
        self._k32 = k32

    @staticmethod
    def _fail(what: str) -> OSError:
        import ctypes

        code = ctypes.get_last_error()  # type: ignore[attr-defined]
        return OSError(code, f"{what} failed (Windows error {code})")

    def create(self) -> int:
        handle = self._k32.CreateJobObjectW(None, None)
        if not handle:
            raise self._fail("CreateJobObjectW")
        return int(handle)

    def set_limits(self, job: int, flags: int) -> None:
        import ctypes

        info = job_structures()[0]()
        info.BasicLimitInformation.LimitFlags = flags
        if not self._k32.SetInformationJobObject(
                _handle(job), JOB_EXTENDED_LIMITS, ctypes.byref(info), ctypes.sizeof(info)):
            raise self._fail("SetInformationJobObject")

    def assign(self, job: int, pid: int) -> None:
        process = self._k32.OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, False, pid)
        if not process:
            raise self._fail("OpenProcess")
        try:
            if not self._k32.AssignProcessToJobObject(_handle(job), process):
                raise self._fail("AssignProcessToJobObject")
        finally:
            self._k32.CloseHandle(process)

    def active_processes(self, job: int) -> int:
        import ctypes

        info = job_structures()[1]()
        if not self._k32.QueryInformationJobObject(
                _handle(job), JOB_BASIC_ACCOUNTING, ctypes.byref(info), ctypes.sizeof(info),
                None):
            raise self._fail("QueryInformationJobObject")
        return int(info.ActiveProcesses)

    def terminate(self, job: int, exit_code: int) -> None:
        if not self._k32.TerminateJobObject(_handle(job), exit_code):
            raise self._fail("TerminateJobObject")

    def close(self, job: int) -> None:
        self._k32.CloseHandle(_handle(job))


def _handle(value: int) -> Any:
    import ctypes

    return ctypes.c_void_p(value)


@functools.cache
def job_structures() -> tuple[type[Any], type[Any]]:
    """JOBOBJECT_EXTENDED_LIMIT_INFORMATION and JOBOBJECT_BASIC_ACCOUNTING_INFORMATION
    (winnt.h), in plain ctypes so their layout is checked on any OS (tests compare the 64-bit
    sizes with the SDK's: 144 and 48 bytes). Built on first use: ctypes stays out of start-up."""
    import ctypes

    large = ctypes.c_int64
    dword = ctypes.c_uint32
    size_t = ctypes.c_size_t
    ulonglong = ctypes.c_uint64

    class BasicLimits(ctypes.Structure):
        _fields_ = [("PerProcessUserTimeLimit", large), ("PerJobUserTimeLimit", large),
                    ("LimitFlags", dword), ("MinimumWorkingSetSize", size_t),
                    ("MaximumWorkingSetSize", size_t), ("ActiveProcessLimit", dword),
                    ("Affinity", size_t), ("PriorityClass", dword),
                    ("SchedulingClass", dword)]

    class IoCounters(ctypes.Structure):
        _fields_ = [(name, ulonglong) for name in (
            "ReadOperationCount", "WriteOperationCount", "OtherOperationCount",
            "ReadTransferCount", "WriteTransferCount", "OtherTransferCount")]

    class ExtendedLimits(ctypes.Structure):
        _fields_ = [("BasicLimitInformation", BasicLimits), ("IoInfo", IoCounters),
                    ("ProcessMemoryLimit", size_t), ("JobMemoryLimit", size_t),
                    ("PeakProcessMemoryUsed", size_t), ("PeakJobMemoryUsed", size_t)]

    class BasicAccounting(ctypes.Structure):
        _fields_ = [("TotalUserTime", large), ("TotalKernelTime", large),
                    ("ThisPeriodTotalUserTime", large), ("ThisPeriodTotalKernelTime", large),
                    ("TotalPageFaultCount", dword), ("TotalProcesses", dword),
                    ("ActiveProcesses", dword), ("TotalTerminatedProcesses", dword)]

    return ExtendedLimits, BasicAccounting
