"""The one process runner, against real processes."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from flashbuild.errors import ProcessError, ProcessTimeout, ToolchainError
from flashbuild.proc import Completed, ProcessRunner

pytestmark = pytest.mark.integration
PY = sys.executable


def test_output_and_echo() -> None:
    echoed: list[str] = []
    done = ProcessRunner(echo=echoed.append).run([PY, "-c", "print('hé'); import sys; "
                                                  "print('e', file=sys.stderr)"])
    assert done.stdout.strip() == "hé" and done.stderr.strip() == "e"
    assert echoed and PY in echoed[0]


def test_failure_carries_command_code_and_tail() -> None:
    with pytest.raises(ProcessError) as info:
        ProcessRunner().run([PY, "-c", "import sys; print('line\\n' * 50 + 'last'); sys.exit(7)"])
    assert info.value.details["returncode"] == 7
    assert "last" in info.value.evidence and info.value.evidence.count("line") <= 30


def test_timeout_is_a_clear_error() -> None:
    with pytest.raises(ProcessTimeout, match=r"did not finish within 0\.5 s"):
        ProcessRunner().run([PY, "-c", "import time; time.sleep(30)"], timeout=0.5)


def test_program_resolved_against_the_given_env_path(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match="was not found"):
        ProcessRunner().run(["python3"], env={"PATH": str(tmp_path)})
    tool = tmp_path / "mytool"
    tool.write_text(f"#!{PY}\nprint('mine')\n")
    tool.chmod(0o755)
    env = {**os.environ, "PATH": str(tmp_path)}
    assert ProcessRunner().run(["mytool"], env=env).stdout.strip() == "mine"


def test_stream_passes_lines_and_logs(tmp_path: Path) -> None:
    lines: list[str] = []
    log = tmp_path / "log.txt"
    with log.open("w") as fh:
        code = ProcessRunner().stream([PY, "-c", "print('[1/2] a'); print('[2/2] b')"],
                                      on_line=lines.append, log=fh)
    assert code == 0 and lines == ["[1/2] a", "[2/2] b"]
    assert log.read_text().splitlines() == lines


# --- Ctrl-C: a child stopped by SIGINT is an interruption, never a failed build -------------

# A pytest-xdist worker may hold SIGINT blocked, and children inherit the signal mask: each
# script below unblocks it and starts from Python's own handler, as a program in a terminal.
UNBLOCK = ("import signal; signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
           "signal.signal(signal.SIGINT, signal.default_int_handler); ")

# SIGHUP starts at its default too: under `nohup pytest` every child inherits it ignored, and
# flashbuild keeps an inherited ignore on purpose (that is what nohup asks for).
OUTER = UNBLOCK + """
import signal, sys
signal.signal(signal.SIGHUP, signal.SIG_DFL)
from flashbuild.errors import Interrupted
from flashbuild.proc import ProcessRunner
if sys.argv[1] == "late":
    # Python's KeyboardInterrupt arriving after the child's exit (the race a terminal's Ctrl-C
    # to the process group creates) is made certain here: the handler never raises.
    signal.signal(signal.SIGINT, lambda signum, frame: None)
try:
    code = ProcessRunner().stream(sys.argv[2:], on_line=lambda line: print(line, flush=True))
except Interrupted as exc:
    print("INTERRUPTED", exc.details["returncode"], flush=True)
    sys.exit(130)
except KeyboardInterrupt:
    print("KEYBOARD", flush=True)
    sys.exit(130)
print("RETURNED", code, flush=True)
sys.exit(3)
"""


def _ninja() -> str:
    ninja = Path(sys.executable).parent / "ninja"
    if not ninja.is_file():
        pytest.skip("the PyPI ninja is not installed beside this interpreter")
    return str(ninja)


@pytest.mark.parametrize("handler", ["late", "default"])
def test_sigint_to_the_group_during_ninja_is_an_interruption(tmp_path: Path,
                                                             handler: str) -> None:
    import signal
    import subprocess
    import time

    (tmp_path / "build.ninja").write_text(
        "rule slow\n  command = touch started && sleep 60\nbuild out: slow\n")
    outer = subprocess.Popen([PY, "-c", OUTER, handler, _ninja(), "-C", str(tmp_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (tmp_path / "started").exists(), "ninja never started its step"
        # ninja leads its own process group (proc.py): a terminal's Ctrl-C reaches the outer
        # process alone. Signal ninja's group too, as `kill -INT` of every process would: the
        # child then dies of SIGINT whatever the outer handler does.
        groups = {os.getpgid(p.pid) for p in psutil.Process(outer.pid).children()}
        os.killpg(outer.pid, signal.SIGINT)
        for group in groups:
            # The outer process may have ended ninja's group already on its own SIGINT (the
            # default handler's KeyboardInterrupt does): a group that is gone is not an error.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGINT)
        out, _ = outer.communicate(timeout=120)
    finally:
        if outer.poll() is None:
            os.killpg(outer.pid, signal.SIGKILL)
            outer.communicate()
    assert outer.returncode == 130, out
    assert "RETURNED" not in out
    if handler == "late":
        assert "INTERRUPTED" in out


@pytest.mark.parametrize("script", [
    UNBLOCK + "import os; os.kill(os.getpid(), signal.SIGINT)",  # dies of SIGINT: -2
    "import sys; sys.exit(130)",  # ninja's ExitInterrupted
], ids=["killed-by-sigint", "exit-130"])
def test_a_child_stopped_by_ctrl_c_raises_interrupted(script: str) -> None:
    from flashbuild.errors import Interrupted

    with pytest.raises(Interrupted) as info:
        ProcessRunner().stream([PY, "-c", script], on_line=lambda line: None)
    assert info.value.exit_code == 130
    assert info.value.details["returncode"] in (-2, 130)


def test_an_ordinary_failure_is_still_a_code() -> None:
    assert ProcessRunner().stream([PY, "-c", "import sys; sys.exit(1)"],
                                  on_line=lambda line: None) == 1


# --- lifetime: a timeout or a stop signal ends the whole tree, not only the child -----------

# A child that starts a grandchild (as ninja starts nvcc, which starts cicc), which writes its
# pid to argv[1] once it runs; the child then waits for ever.
TREE = """import os, signal, subprocess, sys, time
if len(sys.argv) > 2:
    if os.environ.get("STUBBORN"):  # a process that ignores every polite stop
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Written whole, then moved into place: the test reads it as soon as it exists, and an
    # open() that had created the file but not yet written it read as '' under load.
    with open(sys.argv[1] + ".tmp", "w") as out:
        out.write(str(os.getpid()))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(900)
subprocess.Popen([sys.executable, __file__, sys.argv[1], "grandchild"])
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
print("ready", flush=True)
time.sleep(900)
"""


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _tree_script(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    return script, tmp_path / "grandchild.pid"


def _reap(pid_file: Path) -> None:
    if pid_file.exists() and _running(int(pid_file.read_text())):
        psutil.Process(int(pid_file.read_text())).kill()


#: The time limits a timeout test tries, shortest first. The test proves something only if the
#: tree had started (the child, then the grandchild: two Python start-ups) before the limit,
#: which a loaded machine may not manage in 5 s; a longer limit is tried only then, so a
#: quiet machine still waits 5 s.
LIMITS = (5.0, 60.0)


def test_a_timeout_of_run_ends_the_grandchildren_too(tmp_path: Path) -> None:
    script, pid_file = _tree_script(tmp_path)
    try:
        for limit in LIMITS:
            with pytest.raises(ProcessTimeout, match="ended with every process it started"):
                ProcessRunner().run([PY, str(script), str(pid_file)], timeout=limit)
            if pid_file.exists():
                break
        assert pid_file.exists(), "the grandchild never started within the time limit"
        assert not _running(int(pid_file.read_text())), "the grandchild outlived the timeout"
    finally:
        _reap(pid_file)


def test_a_timeout_of_stream_ends_the_grandchildren_too(tmp_path: Path) -> None:
    script, pid_file = _tree_script(tmp_path)
    lines: list[str] = []
    try:
        for limit in LIMITS:
            lines.clear()
            code = ProcessRunner().stream([PY, str(script), str(pid_file)],
                                          on_line=lines.append, timeout=limit)
            if "ready" in lines:
                break
        assert code != 0 and lines == ["ready"]
        assert not _running(int(pid_file.read_text())), "the grandchild outlived the timeout"
    finally:
        _reap(pid_file)


def test_a_timeout_of_stream_returns_only_once_the_tree_is_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer that ends the tree runs in a thread of its own, and the pipe closes as soon
    as the processes die, before the timer is done waiting for them to be gone: stream used
    to return then, and a grandchild could still be running (CI, under load)."""
    import time

    from flashbuild import proc as proc_module

    finished: list[float] = []
    real = proc_module._end_trees

    def slow_end(trees: list[object], *, polite: bool) -> None:
        real(trees, polite=polite)  # type: ignore[arg-type]
        time.sleep(1.0)  # as if the last process took a while to be gone
        finished.append(time.monotonic())

    monkeypatch.setattr(proc_module, "_end_trees", slow_end)
    script, pid_file = _tree_script(tmp_path)
    try:
        code = ProcessRunner().stream([PY, str(script), str(pid_file)],
                                      on_line=lambda line: None, timeout=3)
        returned = time.monotonic()
        assert code != 0
        assert finished and finished[0] <= returned
    finally:
        _reap(pid_file)


@pytest.mark.parametrize(("sig", "stubborn"), [("SIGTERM", False), ("SIGINT", False),
                                               ("SIGHUP", False), ("SIGTERM", True)])
def test_a_stop_signal_to_the_runner_ends_its_tree(tmp_path: Path, sig: str,
                                                   stubborn: bool) -> None:
    """Sent to the outer process only (as `kill` does): before, SIGTERM killed it at once and
    the child and grandchild ran on, re-parented to init. A grandchild that ignores SIGINT
    and SIGTERM is killed after the grace period."""
    import signal
    import subprocess
    import time

    script, pid_file = _tree_script(tmp_path)
    env = {**os.environ, **({"STUBBORN": "1"} if stubborn else {})}
    outer = subprocess.Popen([PY, "-c", OUTER, "default", PY, str(script), str(pid_file)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True, env=env)
    family: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pid_file.exists(), "the grandchild never started"
        family += [p.pid for p in psutil.Process(outer.pid).children(recursive=True)]
        outer.send_signal(getattr(signal, sig))
        out, _ = outer.communicate(timeout=120)
    finally:
        if outer.poll() is None:
            os.killpg(outer.pid, signal.SIGKILL)
            outer.communicate()
        # The runner starts its child in a group of its own: a failed run kills it here, or
        # it would sleep on for 15 minutes after the test.
        for pid in family:
            if _running(pid):
                psutil.Process(pid).kill()
        _reap(pid_file)
    assert outer.returncode == 130, out
    assert "Traceback" not in out
    # A SIGKILLed process takes a moment to die on a loaded machine (seen at load 4: the
    # check ran before the kernel had ended the stubborn grandchild): give it 10 s.
    _, alive = psutil.wait_procs([p for p in map(_process, family) if p is not None],
                                 timeout=10)
    assert not [p.pid for p in alive if _running(p.pid)], f"{family} outlived the signal"


# --- a process outside the tree holding the output: the runner stops waiting ---------------

# A child that starts a sleeper in a session of its own (as a daemon does: the tree's kill
# does not reach it) which inherits its stdout and stderr, writes the sleeper's pid to argv[1]
# and then waits for ever (argv[2] == "hang") or exits at once.
DETACH = """import os, subprocess, sys, time
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)"],
                           start_new_session=True)
open(sys.argv[1], "w").write(str(sleeper.pid))
print("ready", flush=True)
if sys.argv[2] == "hang":
    time.sleep(900)
"""

#: Seconds a call may take before the test calls it a hang: far above the runner's own bound
#: (its timeout plus PIPE_GRACE_S), far below a sleeper's 900 s. The old runner waited for the
#: pipe's end, which the sleeper holds until the test ends it.
HANG_S = 120.0


def _within_bound(call: Callable[[], object]) -> object:
    """`call()` in a thread; its result or its error, or a failure (not a hung test) when it is
    still running after HANG_S."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_S)
    assert not thread.is_alive(), "the runner still waits for a pipe a detached process holds"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]


def _detach_script(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "detach.py"
    script.write_text(DETACH)
    return script, tmp_path / "sleeper.pid"


@pytest.mark.parametrize("mode", ["run", "stream"])
def test_a_child_that_exits_leaving_a_detached_holder_of_its_output_returns(
        tmp_path: Path, mode: str) -> None:
    """The child exits; its sleeper (own session) keeps stdout open. Before, `run` waited for
    the pipe until its timeout and then called a finished command hung, and `stream` (no
    timeout) waited for ever. Now: a bounded wait, the output read so far, and a note that
    names the holder."""
    script, pid_file = _detach_script(tmp_path)
    lines: list[str] = []
    argv = [PY, str(script), str(pid_file), "exit"]
    try:
        if mode == "run":
            done = _within_bound(lambda: ProcessRunner().run(argv, timeout=600))
            assert isinstance(done, Completed)
            assert done.returncode == 0 and done.stdout == "ready\n"
            note = done.note
        else:
            code = _within_bound(lambda: ProcessRunner().stream(argv, on_line=lines.append))
            assert code == 0 and lines[0] == "ready"
            assert len(lines) == 2 and lines[1].startswith("flashbuild: ")
            note = lines[1]
        pid = int(pid_file.read_text())
        assert f"pid {pid} (" in note and "still held its output" in note
        assert _running(pid), "a process outside the tree is not flashbuild's to end"
    finally:
        _reap(pid_file)


def test_a_timeout_of_run_names_a_detached_holder_of_the_output(tmp_path: Path) -> None:
    script, pid_file = _detach_script(tmp_path)
    try:
        for limit in LIMITS:
            with pytest.raises(ProcessTimeout) as info:
                _within_bound(lambda limit=limit: ProcessRunner().run(
                    [PY, str(script), str(pid_file), "hang"], timeout=limit))
            if pid_file.exists():
                break
        assert f"pid {int(pid_file.read_text())} (" in info.value.evidence
        assert "outside the process tree" in info.value.evidence
    finally:
        _reap(pid_file)


def test_a_timeout_of_stream_is_a_bound_though_a_detached_process_holds_the_output(
        tmp_path: Path) -> None:
    """Before, the tree was killed at the timeout and the loop then read the sleeper's pipe
    for ever."""
    script, pid_file = _detach_script(tmp_path)
    lines: list[str] = []
    try:
        for limit in LIMITS:
            lines.clear()
            code = _within_bound(lambda limit=limit: ProcessRunner().stream(
                [PY, str(script), str(pid_file), "hang"], on_line=lines.append, timeout=limit))
            if lines and lines[0] == "ready":
                break
        assert code != 0 and lines[0] == "ready"
        assert f"pid {int(pid_file.read_text())} (" in lines[-1]
    finally:
        _reap(pid_file)
