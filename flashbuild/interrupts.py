"""How flashbuild is stopped: one model for Ctrl-C, SIGTERM and a closed terminal.

Every signal that asks a program to stop (SIGINT = Ctrl-C, SIGTERM = `kill` or a service
manager, SIGHUP = the terminal went away, SIGBREAK = Ctrl-Break on Windows) is turned into the
same thing: a `KeyboardInterrupt` (`StopRequested`) in the main thread, with the signal's name
noted here. The stages already treat a KeyboardInterrupt as "stop, keep things consistent" (the
patch journal, the build's log, the previous install), `proc.py` ends the whole tree of
processes it started (see `flashbuild.platforms.children`), and the CLI prints one paragraph
and exits 130.

Python's defaults do not do that: SIGTERM and SIGHUP kill the interpreter at once (exit -15, no
message, no `finally:`), so a `pip wheel` or `ninja` it started keeps running, re-parented to
init. And a Ctrl-C that lands while the CLI's modules load prints a traceback. So the entry
point (`flashbuild/__main__.py`) calls `install()` before it imports anything heavy.

This module imports nothing but the standard library's `signal` and `contextlib` (both loaded
by the interpreter's own start-up already): it runs in the first milliseconds of every command.
"""

from __future__ import annotations

import contextlib
import signal
import sys

# Not `from typing import TYPE_CHECKING`: importing typing costs ~8 ms of the start-up window
# this module exists to close (type checkers treat the name as true all the same).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

#: The signals that mean "stop", by name. Each OS has a subset (SIGHUP is POSIX-only, SIGBREAK
#: Windows-only): `getattr` decides which exist, so no platform test is needed here. A closed
#: Windows console sends no signal Python sees; the Job Object's KILL_ON_JOB_CLOSE ends the
#: children when flashbuild itself is ended (platforms/children.py).
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK")

#: Seconds after which a stop Python could not raise is delivered again (`_unraisable`).
REDELIVER_S = 0.02

#: How each signal is named to people.
_SAID = {"SIGINT": "Ctrl-C (SIGINT)", "SIGTERM": "SIGTERM",
         "SIGHUP": "SIGHUP (the terminal was closed)", "SIGBREAK": "Ctrl-Break (SIGBREAK)"}


class _State:
    def __init__(self) -> None:
        self.received: list[str] = []
        """Names of the stop signals that arrived, in order."""
        self.shield = 0
        """While > 0 a stop signal is noted but raises nothing (a child tree is being ended)."""
        self.done = False
        """The command has finished: a late signal changes nothing."""
        self.stopping = False
        """The command is being stopped: no new child may start (proc.end_all_children)."""
        self.began = False
        """A command started (the CLI's `_edge` called `begin()`)."""
        self.reported = False
        """The command's edge printed the stop's paragraph itself."""
        self.previous_hook: Callable[[Any], object] = sys.__unraisablehook__
        """The `sys.unraisablehook` `install()` found (`_unraisable` hands everything else
        to it)."""


_state = _State()


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class StopRequested(KeyboardInterrupt):
    """What a stop signal raises in the main thread: a KeyboardInterrupt to every `except`.

    A subclass on purpose: CPython 3.11 remembers a plain KeyboardInterrupt that passed
    through certain interpreter frames and, at exit, kills itself with SIGINT even when the
    exception was handled, so a run that printed its paragraph and called `sys.exit(130)`
    ended -2 instead (4 of 60 trials of a SIGINT while the CLI's modules loaded; 0 of 80 with
    this subclass, whose type is not the one CPython compares against)."""


def caused_by_stop(exc: BaseException) -> bool:
    """Whether a stop signal is behind `exc`: it is a `StopRequested`, or one is on its chain.

    Python wraps some exceptions raised inside its own machinery: a signal that lands while a
    class body runs a descriptor's `__set_name__` (Rich's console module has one) arrives as
    `RuntimeError: Error calling __set_name__ ...` with the `StopRequested` as its cause."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, StopRequested):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _handler(signum: int, frame: Any) -> None:
    """The one handler of every stop signal: note it, then stop the main thread."""
    _state.received.append(_name(signum))
    if _state.shield or _state.done:
        return
    raise StopRequested


def _main_thread() -> bool:
    import threading  # not at the top: this module is imported before anything else

    return threading.current_thread() is threading.main_thread()


def _available() -> list[signal.Signals]:
    return [getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name)]


def _unraisable(unraisable: Any) -> None:
    """`sys.unraisablehook` while flashbuild's handlers are in place.

    Where Python cannot raise (a weakref or import-lock callback: a signal that lands in one,
    seen under load while a module loaded lazily), the handler's `StopRequested` is printed as
    "Exception ignored" and dropped, and the command would go on as if never stopped. Instead
    the stop is delivered again to the main thread (`_thread.interrupt_main` calls the handler
    as for a real signal, at the next instruction that can raise); anything else goes to
    Python's own hook."""
    if isinstance(unraisable.exc_value, StopRequested) and not _state.done:
        import _thread
        import threading

        name = _state.received.pop() if _state.received else "SIGINT"
        signum = getattr(signal, name, signal.SIGINT)
        if signal.getsignal(signum) is _handler:
            # From another thread and a moment later: delivered now, the handler would run
            # inside this hook, where its exception is as unraisable as before.
            timer = threading.Timer(REDELIVER_S, _thread.interrupt_main, (signum,))
            timer.daemon = True
            timer.start()
            return
        _state.received.append(name)
    _state.previous_hook(unraisable)


def install() -> None:
    """Make every stop signal a KeyboardInterrupt (noted here) for the rest of the process.

    A signal the parent set to be ignored stays ignored (`nohup`, or a shell's background
    job, which ignores SIGINT on purpose). Only the main thread may set handlers; elsewhere
    this does nothing."""
    for sig in _available():
        # ValueError: not the main thread (only it may set handlers); nothing is changed.
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, _handler)
    if sys.unraisablehook is not _unraisable:
        _state.previous_hook = sys.unraisablehook
        sys.unraisablehook = _unraisable


def finished() -> None:
    """The command is done (its exit code is decided): a stop signal from now on is ignored.
    Python's shutdown puts SIG_DFL back in place of every Python-level handler, so a signal
    in the last milliseconds would otherwise kill the finished run (-2, -15) instead of
    letting it exit with its code; an ignored signal is left ignored."""
    _state.done = True
    for sig in _available():
        with contextlib.suppress(ValueError, OSError):  # ValueError: not the main thread
            signal.signal(sig, signal.SIG_IGN)


def begin() -> None:
    """A command starts (the CLI's edge): children may be started again. Matters only where
    one process runs several commands (tests, flashbuild as a library)."""
    _state.stopping = False
    _state.began = True
    _state.reported = False


def mark_reported() -> None:
    """The command's edge printed the paragraph for the stop."""
    _state.reported = True


def unreported_message() -> str | None:
    """The paragraph for a stop that ended the run where no edge printed one (Typer turns a
    KeyboardInterrupt in its own parsing into a silent exit 130): before any command ran, the
    start-up paragraph; after a command ended, one that says its output stands. None when the
    edge already reported it."""
    if _state.reported:
        return None
    if not _state.began:
        return startup_message()
    return (f"error: flashbuild was interrupted by {describe()} as the command ended.\n"
            "What it printed above is complete; its exit code is 130 because of the stop.\n"
            "fix: run the same command again if you need its exit code.\n")


def stop_children() -> None:
    """From now on flashbuild starts no child (proc.py refuses with Interrupted)."""
    _state.stopping = True


def stopping() -> bool:
    return _state.stopping


def received() -> str | None:
    """The first stop signal that arrived (its name, e.g. `SIGTERM`), or None."""
    return _state.received[0] if _state.received else None


def count() -> int:
    """How many stop signals have arrived so far (a mark for `since`)."""
    return len(_state.received)


def since(mark: int) -> str | None:
    """The first stop signal that arrived after `count()` returned `mark`, or None."""
    return _state.received[mark] if len(_state.received) > mark else None


def describe(name: str | None = None) -> str:
    """A signal's name for people: `Ctrl-C (SIGINT)`, `SIGTERM`, … (default: the first one
    that arrived; `Ctrl-C` when none was noted, as a KeyboardInterrupt raised by Python's own
    handler means)."""
    name = name or received()
    return _SAID.get(name, name) if name else "Ctrl-C"


def startup_message() -> str:
    """The paragraph for a stop signal that arrived before any command ran (while the CLI's
    modules loaded or Typer parsed the command line): plain text, Rich is not loaded yet."""
    return (f"error: flashbuild was interrupted by {describe()} while starting.\n"
            "Nothing was run or changed.\n"
            "fix: run the same command again.\n")


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """While the block runs, a stop signal is noted but raises nothing: ending a child tree
    (a polite signal, a grace period, a kill) must not itself be cut short by an impatient
    second Ctrl-C, or the tree is left running. The block must be bounded in time. Only the
    main thread is shielded (signals are delivered there); elsewhere this does nothing."""
    if not _main_thread():
        yield
        return
    _state.shield += 1
    try:
        yield
    finally:
        _state.shield -= 1


@contextlib.contextmanager
def watching() -> Iterator[None]:
    """Note every stop signal while the block runs, for callers that did not `install()`
    (flashbuild used as a library, the test suite): a signal whose handler is the default
    (SIGTERM's kills the interpreter and orphans the children) gets flashbuild's handler for
    the block's duration; a custom handler is kept and called after the signal is noted
    (Python's own SIGINT handler raises KeyboardInterrupt, as flashbuild's does). Ignored
    signals stay ignored. Outside the main thread nothing can be set: the child's exit code is
    then the only evidence."""
    if not _main_thread():
        yield
        return
    previous: dict[signal.Signals, Any] = {}
    for sig in _available():
        try:
            old = signal.getsignal(sig)
            if old is _handler or (not callable(old) and old is not signal.SIG_DFL):
                continue  # flashbuild's own already, or ignored (SIG_IGN), or not Python's
            signal.signal(sig, _noting(old) if callable(old) else _handler)
            previous[sig] = old
        except (ValueError, OSError):  # an embedded interpreter without signal support
            continue
    try:
        yield
    finally:
        for sig, old in previous.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, old)


def _noting(previous: Callable[[int, Any], Any]) -> Callable[[int, Any], Any]:
    def note(signum: int, frame: Any) -> Any:
        _state.received.append(_name(signum))
        if _state.shield:
            return None
        return previous(signum, frame)

    return note
