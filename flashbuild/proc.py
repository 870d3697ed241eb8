"""The one process runner.

Every external program flashbuild starts goes through `ProcessRunner`: the program is resolved
against the PATH of the environment it is given (not the caller's), the quoted command is echoed
with `-v`, every call has a timeout, and a failure raises an error that carries the command, the
exit code and the tail of the output. Detection functions take a `Runner` argument so tests can
replay recorded output instead (see tests/fakes.py).

Lifetime: every child leads its own tree of processes (platforms/children.py: a process group
on POSIX, a Job Object on Windows). A timeout kills the whole tree; a stop signal (Ctrl-C,
SIGTERM, SIGHUP; see interrupts.py) stops it, waits STOP_GRACE_S, kills what is left, and waits
until it is gone before the interrupt goes on — so nothing flashbuild started keeps running
after it exits (a nvcc under ninja under pip included).
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from flashbuild import interrupts, platforms
from flashbuild.errors import Interrupted, ProcessError, ProcessTimeout, ToolchainError
from flashbuild.runner import Completed, Runner

if TYPE_CHECKING:
    from flashbuild.platforms.children import ChildTree

# Completed and Runner live below proc and platforms (whose helpers take a Runner, while proc
# asks platforms how to start and end a child tree); callers import them from here.
__all__ = ["INTERRUPTED_CODES", "KILL_WAIT_S", "PIPE_GRACE_S", "STOP_GRACE_S", "TAIL_LINES",
           "Completed", "Echo", "ProcessRunner", "Runner", "end_all_children", "failed",
           "quote", "tail"]

#: Lines of output an error keeps.
TAIL_LINES = 30

#: Exit statuses of a child that Ctrl-C stopped: killed by SIGINT (POSIX: -2), the shell /
#: ninja convention 128 + SIGINT (ninja's ExitInterrupted is 130), and Windows'
#: STATUS_CONTROL_C_EXIT 0xC000013A (unsigned, and as the signed value Python may report).
INTERRUPTED_CODES = frozenset({-2, 130, 0xC000013A, 0xC000013A - (1 << 32)})

#: Seconds a stopped child tree gets to end by itself (ninja waits for the nvcc it runs, pip
#: removes its temp folders) before every process of it is killed.
STOP_GRACE_S = 5.0
#: Seconds to wait for a killed tree to be gone (a process in uninterruptible I/O outlives
#: SIGKILL until the I/O returns); past it flashbuild goes on and says nothing more.
KILL_WAIT_S = 10.0


def quote(argv: Sequence[str]) -> str:
    """The command as a user could paste it into this OS's shell (the platform's quoting:
    cmd's on Windows, POSIX elsewhere)."""
    return platforms.current().quote_command([str(a) for a in argv])


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


Echo = Callable[[str], None]


class ProcessRunner:
    """Runs real processes. `echo` receives each quoted command (wired to `-v`)."""

    def __init__(self, echo: Echo | None = None) -> None:
        self._echo = echo

    def which(self, program: str, env: Mapping[str, str] | None = None) -> str | None:
        # The platform's lookup: PATH found case-insensitively on Windows (`Path=`), and never
        # the current directory (shutil.which on Windows searches it first).
        return platforms.current().which(program, os.environ if env is None else env)

    def _resolve(self, argv: Sequence[str | os.PathLike[str]],
                 env: Mapping[str, str] | None) -> list[str]:
        args = [os.fspath(a) for a in argv]
        exe = self.which(args[0], env)
        if exe is None:
            raise ToolchainError(
                f"`{args[0]}` was not found",
                evidence=f"searched the PATH of the environment flashbuild uses for: {quote(args)}",
                fix=f"install {args[0]} or put its folder on PATH (`flashbuild doctor` lists "
                "what is missing)",
            )
        args[0] = exe
        if self._echo is not None:
            self._echo(quote(args))
        return args

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 60.0,
        check: bool = True,
        input: str | None = None,
    ) -> Completed:
        args = self._resolve(argv, env)
        _check_not_stopping(args)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                args,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                **_tree_options(),
            )
        except OSError as exc:
            raise ProcessError(
                f"`{Path(args[0]).name}` could not be started",
                evidence=f"{exc.strerror or exc} for: {quote(args)}",
                fix="check that the file is an executable for this machine",
                details={"argv": args},
            ) from exc
        tree = _adopt(proc)
        # Each pipe is read in a thread of its own, so waiting for its end can stop: the pipe
        # ends when every process holding it has closed it, and a process outside the tree
        # (a daemon with a session of its own) may hold it for ever after the child is gone.
        drains = [_Drain(_take(proc, "stdout")), _Drain(_take(proc, "stderr"))]
        if input is not None:
            _feed(_take(proc, "stdin"), input.encode("utf-8"))
        try:
            with interrupts.watching():
                proc.wait(timeout=timeout)
                note = _finish(drains, args)
        except subprocess.TimeoutExpired as exc:
            _end(tree, proc, polite=False)
            note = _finish(drains, args)
            raise ProcessTimeout(
                f"`{Path(args[0]).name}` did not finish within {timeout:g} s",
                # The note first: the scan's fallback line keeps only the start.
                evidence=(f"{note}; command: {quote(args)}; its process tree was ended" if note
                          else f"command: {quote(args)}; it was ended with every process it "
                          "started"),
                fix="the tool may be hanging (a licence prompt, a network drive, a stuck "
                "driver); run the command by hand to see what it waits for"
                + ("; end the process named above" if note else ""),
                details={"argv": args, "timeout": timeout},
            ) from exc
        except BaseException:
            _end(tree, proc, polite=True)
            raise
        finally:
            _release(tree, proc)
        # Bytes decoded by the platform: cl, link and nvcc print in the OEM code page on
        # Windows; never crash on a bad byte.
        decode = _decoder()
        done = Completed(tuple(args), proc.returncode, _newlines(decode(drains[0].data())),
                         _newlines(decode(drains[1].data())), time.monotonic() - start,
                         note=note, stdout_dropped=drains[0].dropped)
        if check and not done.ok:
            raise failed(done)
        return done

    def stream(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        on_line: Callable[[str], None],
        log: IO[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float | None = None,
    ) -> int:
        """Run a long command, passing each output line (stdout and stderr merged) to
        `on_line` and to `log`. Returns the exit code; the caller decides what failure means.

        The child leads its own process tree (a new session / a Job Object), so a Ctrl-C in
        the terminal reaches flashbuild alone; flashbuild stops the whole tree, waits until
        it is gone, and raises `Interrupted` (exit 130). SIGTERM and SIGHUP do the same
        (interrupts.py); they used to kill flashbuild at once and leave the tree running.
        A child that died of SIGINT (INTERRUPTED_CODES: someone signalled it directly, or
        ninja's own exit 130) is an interruption too, never a failed build."""
        args = self._resolve(argv, env)
        mark = interrupts.count()
        with interrupts.watching():
            code = self._stream(args, on_line=on_line, log=log, env=env, cwd=cwd,
                                timeout=timeout)
        signal_name = interrupts.since(mark)
        if signal_name is not None or code in INTERRUPTED_CODES:
            said = interrupts.describe(signal_name) if signal_name else "Ctrl-C"
            raise Interrupted(
                f"interrupted: `{Path(args[0]).name}` was stopped by {said}",
                evidence=f"it exited with code {code}"
                + (f" after {signal_name} reached flashbuild" if signal_name else "")
                + "; every process it started was ended",
                fix="run the same command again: the build resumes where it stopped",
                details={"argv": args, "returncode": code, "signal": signal_name})
        return code

    def _stream(self, args: list[str], *, on_line: Callable[[str], None],
                log: IO[str] | None, env: Mapping[str, str] | None, cwd: Path | None,
                timeout: float | None) -> int:
        _check_not_stopping(args)
        proc = subprocess.Popen(
            args, env=dict(env) if env is not None else None, cwd=cwd,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            **_tree_options(),
        )
        tree = _adopt(proc)
        decode = _decoder()  # bytes per line, decoded as in `run`
        lines = _Drain(_take(proc, "stdout"), lines=True)
        timer: threading.Timer | None = None
        if timeout is not None:
            # The whole tree, not only the child: killing ninja alone leaves its nvcc running.
            timer = threading.Timer(timeout, _end, (tree, proc), {"polite": False})
            timer.daemon = True
            timer.start()

        def emit(raw: bytes) -> None:
            for line in _universal_lines(decode(raw)):
                if log is not None:
                    log.write(line)
                on_line(line.rstrip("\n"))

        try:
            # Lines as they come while the child runs; once it is gone (exited, or its tree
            # killed by the timer), PIPE_GRACE_S more for what is left in the pipe.
            ended: float | None = None
            while True:
                if ended is None and proc.poll() is not None:
                    ended = time.monotonic()
                wait = 0.1 if ended is None else ended + PIPE_GRACE_S - time.monotonic()
                raw = lines.next(max(wait, 0.0))
                if raw is None:
                    break
                if raw:
                    emit(raw)
                elif ended is not None and time.monotonic() >= ended + PIPE_GRACE_S:
                    note = _held_note(lines, args=args)
                    emit(f"flashbuild: {note}\n".encode())
                    break
            return proc.wait()
        except BaseException:
            _end(tree, proc, polite=True)
            raise
        finally:
            if timer is not None:
                # A timer that fired is still ending the tree (killing it and waiting until it
                # is gone) when the pipe closes: wait for that, or the caller goes on while a
                # grandchild is still dying (the pipe closes before the process is gone).
                timer.cancel()
                timer.join()
            _release(tree, proc)


# --- reading a child's output -----------------------------------------------------------------

#: Seconds flashbuild goes on reading a child's output after the child is gone (it exited, or
#: a timeout ended its tree) before it stops reading: a process outside the tree (a daemon
#: that started a session of its own, so the tree's kill does not reach it) can hold the pipe
#: open for ever, and waiting for the pipe's end made a timeout no bound at all.
PIPE_GRACE_S = 2.0
#: Bytes of one output stream `run` keeps (its end): a bound on memory whatever a child prints.
OUTPUT_LIMIT = 32 * 1024 * 1024


class _Drain:
    """One output pipe read to its end by a daemon thread. The thread owns the stream and
    closes it at the end: closing a buffered stream that another thread reads blocks, so a
    pipe that is given up on stays with its thread until its last holder closes it."""

    def __init__(self, stream: IO[bytes], *, lines: bool = False) -> None:
        self.pipe_id = os.fstat(stream.fileno()).st_ino
        self._chunks: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        # `run` keeps what it reads until the child is gone: past OUTPUT_LIMIT the start is
        # dropped (the tail is what an error shows), so a build script that prints 400 MB
        # does not make flashbuild hold 400 MB (or three times that, decoded).
        self._kept: collections.deque[bytes] = collections.deque()
        self._held = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._stream = stream
        self._thread = threading.Thread(target=self._read, args=(lines,), daemon=True,
                                        name="flashbuild-pipe")
        self._thread.start()

    def _read(self, lines: bool) -> None:
        read: Callable[[], bytes] = (self._stream.readline if lines
                                     else lambda: self._stream.read1(65536))  # type: ignore[attr-defined]
        try:
            while chunk := read():
                if lines:
                    self._chunks.put(chunk)
                else:
                    self._keep(chunk)
        except (OSError, ValueError):
            pass
        finally:
            self._chunks.put(None)
            with contextlib.suppress(OSError):
                self._stream.close()

    def _keep(self, chunk: bytes) -> None:
        with self._lock:
            self._kept.append(chunk)
            self._held += len(chunk)
            while self._held > OUTPUT_LIMIT and len(self._kept) > 1:
                old = self._kept.popleft()
                self._held -= len(old)
                self.dropped += len(old)

    def next(self, timeout: float) -> bytes | None:
        """The next chunk; b"" when none came within `timeout`; None at the pipe's end."""
        try:
            return self._chunks.get(timeout=timeout)
        except queue.Empty:
            return b""

    def wait(self, deadline: float) -> bool:
        """Whether the pipe ended by `deadline` (time.monotonic())."""
        self._thread.join(max(deadline - time.monotonic(), 0.0))
        return not self._thread.is_alive()

    def data(self) -> bytes:
        """Everything read so far (for `run`, once it stopped waiting); past OUTPUT_LIMIT
        only the last OUTPUT_LIMIT bytes, after a line saying how much was dropped."""
        with self._lock:
            kept = b"".join(self._kept)
            if self.dropped:
                kept = (f"[flashbuild: the first {self.dropped} bytes of this output were "
                        "dropped]\n").encode() + kept
        out = [kept]
        while True:
            try:
                chunk = self._chunks.get_nowait()
            except queue.Empty:
                break
            if chunk is None:
                self._chunks.put(None)  # the end stays the end
                break
            out.append(chunk)
        return b"".join(out)


def _take(proc: subprocess.Popen[Any], name: str) -> IO[bytes]:
    """The child's stream `name`, taken from `proc` so nothing else closes it (a reader or
    writer thread owns it from now on)."""
    stream = getattr(proc, name)
    assert stream is not None
    setattr(proc, name, None)
    return cast("IO[bytes]", stream)


def _feed(stream: IO[bytes], data: bytes) -> None:
    """Write `data` to the child's stdin from a daemon thread (the child may read it only
    after writing more than a pipe holds), then close it."""
    def write() -> None:
        with contextlib.suppress(OSError, ValueError):
            stream.write(data)
        with contextlib.suppress(OSError, ValueError):
            stream.close()

    threading.Thread(target=write, daemon=True, name="flashbuild-stdin").start()


def _finish(drains: Sequence[_Drain], args: Sequence[str]) -> str:
    """Wait up to PIPE_GRACE_S for the pipes of a child that is gone; "" when they ended,
    else the note that says who still holds them (then flashbuild stops reading)."""
    deadline = time.monotonic() + PIPE_GRACE_S
    open_ = [d for d in drains if not d.wait(deadline)]
    return _held_note(*open_, args=args) if open_ else ""


def _held_note(*drains: _Drain, args: Sequence[str]) -> str:
    holders = sorted({h for d in drains for h in platforms.current().output_holders(d.pipe_id)})
    who = ", ".join(holders) if holders else "a process"
    return (f"{who} outside the process tree of `{Path(args[0]).name}` still held its output "
            f"{PIPE_GRACE_S:g} s after it ended (a process that started a session of its own "
            "is not ended with the tree), so flashbuild stopped reading it")


def _decoder() -> Callable[[bytes], str]:
    return platforms.current().decode_output


def _newlines(text: str) -> str:
    """Text mode's universal newlines: `\r\n` and a lone `\r` become `\n`."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _universal_lines(text: str) -> list[str]:
    """One binary line as text mode would give it (`_newlines`), split after each `\n`."""
    parts = _newlines(text).split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


# --- the trees of running children -----------------------------------------------------------

class _Children:
    """The trees of children running now, from every thread."""

    def __init__(self) -> None:
        self.live: set[ChildTree] = set()
        self.lock = threading.Lock()


_children = _Children()


def _tree_options() -> dict[str, Any]:
    return platforms.current().child_start_options()


def _adopt(proc: subprocess.Popen[str]) -> ChildTree:
    tree = platforms.current().child_tree(proc)
    with _children.lock:
        stopping = interrupts.stopping()
        if not stopping:
            _children.live.add(tree)
    if stopping:  # started in the instant end_all_children ran: end it here
        _end(tree, proc, polite=False)
        _release(tree, proc)
        raise _refusal(proc.args)
    return tree


def _refusal(argv: object) -> Interrupted:
    args = [str(a) for a in argv] if isinstance(argv, list | tuple) else [str(argv)]
    return Interrupted(
        f"interrupted by {interrupts.describe()}: `{Path(args[0]).name}` was not started",
        evidence="flashbuild is stopping and ends every process it started",
        fix="run the same command again", details={"argv": args})


def _check_not_stopping(args: list[str]) -> None:
    if interrupts.stopping():
        raise _refusal(args)


def _release(tree: ChildTree, proc: subprocess.Popen[str]) -> None:
    with _children.lock:
        _children.live.discard(tree)
    tree.close()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _wait_gone(trees: Sequence[ChildTree], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(t.alive() for t in trees):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _end_trees(trees: Sequence[ChildTree], *, polite: bool) -> None:
    """Stop (polite: SIGINT / CTRL_BREAK, then STOP_GRACE_S) and kill every process of
    `trees`, and wait until they are gone. A second stop signal meanwhile is noted, not
    raised: cutting this short is what leaves a tree running."""
    with interrupts.shielded():
        if polite:
            for tree in trees:
                tree.stop()
            if _wait_gone(trees, STOP_GRACE_S):
                return
        for tree in trees:
            tree.kill()
        _wait_gone(trees, KILL_WAIT_S)


def _end(tree: ChildTree, proc: subprocess.Popen[str], *, polite: bool) -> None:
    _end_trees([tree], polite=polite)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=1)


def end_all_children() -> int:
    """End every child tree still running, whichever thread started it (doctor's probes run
    in worker threads: an interrupt in the main thread must not wait for their timeouts),
    and start no process from now on (a worker that goes on gets Interrupted instead).
    For the CLI's edge, once the run is over. Returns how many trees there were."""
    with _children.lock:
        # A worker thread that goes on probing must not start what nobody will end (Python's
        # exit waits for its threads); interrupts.begin() allows children again.
        interrupts.stop_children()
        trees = list(_children.live)
    if trees:
        _end_trees(trees, polite=True)
    return len(trees)


def failed(done: Completed) -> ProcessError:
    """The error for a command that exited non-zero."""
    return ProcessError(
        f"`{Path(done.argv[0]).name}` failed with exit code {done.returncode}",
        evidence=f"command: {quote(done.argv)}\n{tail(done.output)}",
        fix="read the output above; rerun with -v to see every command flashbuild runs",
        details={"argv": list(done.argv), "returncode": done.returncode},
    )
