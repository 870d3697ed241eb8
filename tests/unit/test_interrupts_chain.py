"""A stop signal that Python's own machinery wrapped is still a stop (interrupts.caused_by_stop).

Seen under load: SIGINT landing while Rich's console module ran a dataclass field's
`__set_name__` reached the entry point as `RuntimeError: Error calling __set_name__ ...` and
printed a traceback instead of the one-line exit 130."""

from __future__ import annotations

import pytest

from flashbuild import interrupts
from flashbuild.interrupts import StopRequested, caused_by_stop


def _raise_in_set_name() -> None:
    class Stops:
        def __set_name__(self, owner: type, name: str) -> None:
            raise StopRequested

    type("Owner", (), {"field": Stops()})


def test_a_stop_wrapped_by_set_name_is_a_stop() -> None:
    with pytest.raises(RuntimeError) as info:
        _raise_in_set_name()
    assert caused_by_stop(info.value)


def test_other_errors_are_not_stops() -> None:
    try:
        try:
            raise ValueError("inner")
        except ValueError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as exc:
        assert not caused_by_stop(exc)


def test_the_entry_point_turns_a_wrapped_stop_into_exit_130(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import builtins

    from flashbuild import __main__ as entry

    real_import = builtins.__import__

    def importing(name: str, *args: object, **kwargs: object) -> object:
        if name == "flashbuild.cli":
            _raise_in_set_name()
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(interrupts, "install", lambda: None)
    monkeypatch.setattr(interrupts, "finished", lambda: None)
    monkeypatch.setattr(builtins, "__import__", importing)
    with pytest.raises(SystemExit) as info:
        entry.main()
    assert info.value.code == 130
    assert "Traceback" not in capsys.readouterr().err


def test_a_stop_before_typer_runs_is_exit_130_with_the_message(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Seen under load (tests/reliability/test_signals.py, SIGTERM 0.1 s after the handler was
    in place): exit 130 with nothing printed. The CLI's main() set its streams up (and
    installed the handler again) before its `try`, so a stop landing there left it through the
    entry point's last resort, which prints nothing; it must print the start-up paragraph."""
    from flashbuild import __main__ as entry
    from flashbuild import cli

    def stopped(*streams: object) -> None:
        raise StopRequested

    monkeypatch.setattr(interrupts, "install", lambda: None)
    monkeypatch.setattr(interrupts, "finished", lambda: None)
    monkeypatch.setattr(cli, "prepare_streams", stopped)
    with pytest.raises(SystemExit) as info:
        entry.main()
    assert info.value.code == 130
    err = capsys.readouterr().err
    assert "interrupted by" in err and "while starting" in err, err
    assert "Traceback" not in err


def test_a_stop_python_swallowed_while_the_cli_loaded_still_counts(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Seen under load: SIGINT inside a callback of the import machinery, where the handler's
    exception is printed as "Exception ignored" and dropped; the import then completes."""
    import builtins

    from flashbuild import __main__ as entry

    real_import = builtins.__import__

    def importing(name: str, *args: object, **kwargs: object) -> object:
        if name == "flashbuild.cli":
            interrupts._state.received.append("SIGINT")  # noted, the raise was swallowed
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(interrupts, "install", lambda: None)
    monkeypatch.setattr(interrupts, "finished", lambda: None)
    monkeypatch.setattr(interrupts._state, "received", [])
    monkeypatch.setattr(builtins, "__import__", importing)
    with pytest.raises(SystemExit) as info:
        entry.main()
    assert info.value.code == 130
    assert "interrupted by Ctrl-C (SIGINT) while starting" in capsys.readouterr().err


def test_a_stop_raised_where_python_cannot_raise_is_delivered_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A weakref callback is one of the places whose exceptions Python prints as "Exception
    ignored" and drops (the import lock's is another, seen under load): the stop must reach
    the main thread all the same."""
    import signal
    import sys
    import weakref

    class Thing:
        pass

    def stop(_ref: object) -> None:
        interrupts._state.received.append("SIGINT")  # what the handler notes before raising
        raise StopRequested

    monkeypatch.setattr(interrupts._state, "received", [])
    monkeypatch.setattr(interrupts._state, "done", False)
    monkeypatch.setattr(sys, "unraisablehook", interrupts._unraisable)
    old = signal.signal(signal.SIGINT, interrupts._handler)
    try:
        thing = Thing()
        ref = weakref.ref(thing, stop)
        import time

        with pytest.raises(KeyboardInterrupt):
            del thing  # the callback runs here, and its StopRequested is unraisable
            deadline = time.monotonic() + 30  # a bound for a broken hook, not a timing test
            while time.monotonic() < deadline:  # the stop lands at an instruction here
                pass
        assert ref() is None
        assert interrupts._state.received == ["SIGINT"]
    finally:
        signal.signal(signal.SIGINT, old)


def test_other_unraisable_errors_go_to_the_previous_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    seen: list[object] = []
    monkeypatch.setattr(interrupts._state, "previous_hook", seen.append)
    event = SimpleNamespace(exc_value=ValueError("x"))
    interrupts._unraisable(event)
    assert seen == [event]


@pytest.mark.parametrize(("began", "said"), [(False, "while starting"),
                                             (True, "as the command ended")])
def test_a_stop_typer_swallows_still_prints_its_paragraph(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], began: bool,
        said: str) -> None:
    """Seen under load (test_signals, SIGTERM 0.05 s after start-up): exit 130 with nothing
    printed. Typer turns a KeyboardInterrupt in its own parsing into a silent Exit(130); no
    command's edge ran, so the group prints the paragraph itself."""
    import typer.main

    from flashbuild import cli

    def stopped(*args: object, **kwargs: object) -> object:
        interrupts._state.received.append("SIGTERM")
        raise StopRequested

    monkeypatch.setattr(interrupts, "finished", lambda: None)
    monkeypatch.setattr(interrupts._state, "received", [])
    monkeypatch.setattr(interrupts._state, "began", began)
    monkeypatch.setattr(interrupts._state, "reported", False)
    monkeypatch.setattr(cli._Group, "make_context", stopped)
    with pytest.raises(SystemExit) as info:
        typer.main.get_command(cli.app).main(args=["recipe", "list"], prog_name="flashbuild")
    assert info.value.code == 130
    err = capsys.readouterr().err
    assert f"interrupted by SIGTERM {said}" in err, err
    assert "Traceback" not in err


def test_a_stop_the_command_reported_is_not_reported_twice(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from typer.testing import CliRunner

    from flashbuild import cli

    def stopped(*args: object, **kwargs: object) -> int:
        interrupts._state.received.append("SIGINT")
        raise StopRequested

    monkeypatch.setattr(interrupts, "finished", lambda: None)
    monkeypatch.setattr(interrupts._state, "received", [])
    # recipe_list imports it at call time: the stop lands inside the command's edge.
    monkeypatch.setattr("flashbuild.recipes.report.list_recipes", stopped)
    result = CliRunner().invoke(cli.app, ["recipe", "list"])
    assert result.exit_code == 130
    assert result.output.count("interrupted by") == 1, result.output
