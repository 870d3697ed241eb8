"""The one process runner.

Every external program flashbuild starts goes through `ProcessRunner`: the program is resolved
against the PATH of the environment it is given (not the caller's), the quoted command is echoed
with `-v`, every call has a timeout, and a failure raises an error that carries the command, the
exit code and the tail of the output. Detection functions take a `Runner` argument so tests can
replay recorded output instead (see tests/fakes.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from flashbuild.errors import Interrupted, ProcessError, ProcessTimeout, ToolchainError

#: Lines of output an error keeps.
TAIL_LINES = 30

#: Exit statuses of a child that Ctrl-C stopped: killed by SIGINT (POSIX: -2), the shell /
#: ninja convention 128 + SIGINT (ninja's ExitInterrupted is 130), and Windows'
#: STATUS_CONTROL_C_EXIT 0xC000013A (unsigned, and as the signed value Python may report).
INTERRUPTED_CODES = frozenset({-2, 130, 0xC000013A, 0xC000013A - (1 << 32)})


@dataclass(frozen=True)
class Completed:
    """A finished process."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float = 0.0

    @property
    def output(self) -> str:
        """stdout and stderr together (tools disagree on where they print versions)."""
        return self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def quote(argv: Sequence[str]) -> str:
    """The command as a user could paste it into this OS's shell (the platform's quoting:
    cmd's on Windows, POSIX elsewhere)."""
    from flashbuild import platforms

    return platforms.current().quote_command([str(a) for a in argv])


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


class Runner(Protocol):
    """What detection and the stages need from a process runner."""

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 60.0,
        check: bool = True,
        input: str | None = None,
    ) -> Completed: ...

    def which(self, program: str, env: Mapping[str, str] | None = None) -> str | None: ...


Echo = Callable[[str], None]


class ProcessRunner:
    """Runs real processes. `echo` receives each quoted command (wired to `-v`)."""

    def __init__(self, echo: Echo | None = None) -> None:
        self._echo = echo

    def which(self, program: str, env: Mapping[str, str] | None = None) -> str | None:
        # The platform's lookup: PATH found case-insensitively on Windows (`Path=`), and never
        # the current directory (shutil.which on Windows searches it first).
        from flashbuild import platforms

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
        start = time.monotonic()
        try:
            proc = subprocess.run(
                args,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                input=None if input is None else input.encode("utf-8"),
                capture_output=True,
                timeout=timeout,
                check=False,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise ProcessTimeout(
                f"`{Path(args[0]).name}` did not finish within {timeout:g} s",
                evidence=f"command: {quote(args)}",
                fix="the tool may be hanging (a licence prompt, a network drive, a stuck "
                "driver); run the command by hand to see what it waits for",
                details={"argv": args, "timeout": timeout},
            ) from exc
        except OSError as exc:
            raise ProcessError(
                f"`{Path(args[0]).name}` could not be started",
                evidence=f"{exc.strerror or exc} for: {quote(args)}",
                fix="check that the file is an executable for this machine",
                details={"argv": args},
            ) from exc
        # Bytes decoded by the platform: cl, link and nvcc print in the OEM code page on
        # Windows; never crash on a bad byte.
        decode = _decoder()
        done = Completed(tuple(args), proc.returncode, _newlines(decode(proc.stdout or b"")),
                         _newlines(decode(proc.stderr or b"")), time.monotonic() - start)
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
        On KeyboardInterrupt the child is terminated before the interrupt propagates.

        Ctrl-C in a terminal sends SIGINT to the whole process group: the child (ninja) often
        exits first, and its non-zero code would reach the caller as a failed build before
        Python raises KeyboardInterrupt. So a child that died of SIGINT (INTERRUPTED_CODES),
        or a SIGINT that arrived while it ran, raises `Interrupted` (exit 130) here instead
        of returning a code."""
        args = self._resolve(argv, env)
        with _sigint_seen() as seen:
            code = self._stream(args, on_line=on_line, log=log, env=env, cwd=cwd,
                                timeout=timeout)
        if seen or code in INTERRUPTED_CODES:
            raise Interrupted(
                f"interrupted: `{Path(args[0]).name}` was stopped by Ctrl-C",
                evidence=f"it exited with code {code}"
                + (" after a SIGINT reached flashbuild" if seen else ""),
                fix="run the same command again: the build resumes where it stopped",
                details={"argv": args, "returncode": code})
        return code

    def _stream(self, args: list[str], *, on_line: Callable[[str], None],
                log: IO[str] | None, env: Mapping[str, str] | None, cwd: Path | None,
                timeout: float | None) -> int:
        proc = subprocess.Popen(
            args, env=dict(env) if env is not None else None, cwd=cwd,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        decode = _decoder()  # bytes per line, decoded as in `run`
        timer: threading.Timer | None = None
        if timeout is not None:
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                for line in _universal_lines(decode(raw)):
                    if log is not None:
                        log.write(line)
                    on_line(line.rstrip("\n"))
            return proc.wait()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
        finally:
            if timer is not None:
                timer.cancel()
            if proc.stdout is not None:
                proc.stdout.close()


def _decoder() -> Callable[[bytes], str]:
    from flashbuild import platforms

    return platforms.current().decode_output


def _newlines(text: str) -> str:
    """Text mode's universal newlines: `\r\n` and a lone `\r` become `\n`."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _universal_lines(text: str) -> list[str]:
    """One binary line as text mode would give it (`_newlines`), split after each `\n`."""
    parts = _newlines(text).split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


class _Seen:
    """Whether a SIGINT arrived (truthy once one did)."""

    def __init__(self) -> None:
        self.hit = False

    def __bool__(self) -> bool:
        return self.hit


@contextlib.contextmanager
def _sigint_seen() -> Iterator[_Seen]:
    """Note every SIGINT while the block runs, then hand it to the handler that was there
    (Python's own raises KeyboardInterrupt). Signal handlers can only be set from the main
    thread; elsewhere the child's exit code is the only evidence."""
    seen = _Seen()
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous in (signal.SIG_IGN, None):
        yield seen  # SIGINT is ignored here (and in the child, which inherits that)
        return

    def note(signum: int, frame: Any) -> None:
        seen.hit = True
        if callable(previous):
            previous(signum, frame)

    try:
        signal.signal(signal.SIGINT, note)
    except (ValueError, OSError):  # an embedded interpreter without signal support
        yield seen
        return
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, previous)


def failed(done: Completed) -> ProcessError:
    """The error for a command that exited non-zero."""
    return ProcessError(
        f"`{Path(done.argv[0]).name}` failed with exit code {done.returncode}",
        evidence=f"command: {quote(done.argv)}\n{tail(done.output)}",
        fix="read the output above; rerun with -v to see every command flashbuild runs",
        details={"argv": list(done.argv), "returncode": done.returncode},
    )
