"""One sccache server through a whole build (building/launcher.py, `build_server`): sccache's
default 600 s idle timeout dropped a CUDA unit that compiled for longer (mozilla/sccache#204;
causal-conv1d's first build here), so flashbuild starts the server with no idle timeout when
none runs, stops it afterwards, and leaves a user's running server alone."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from flashbuild.building import launcher as launcher_module
from flashbuild.building.launcher import (
    Launcher,
    build_server,
    sccache_server_running,
    serving,
)
from flashbuild.runner import Completed

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

SCCACHE = Launcher("sccache", Path("/opt/bin/sccache"), cuda=True)


class _Runner:
    def __init__(self, ok: bool = True, err: str = "") -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []
        self.ok = ok
        self.err = err

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            **_kwargs: object) -> Completed:
        self.calls.append(([str(a) for a in argv], dict(env or {})))
        return Completed(tuple(str(a) for a in argv), 0 if self.ok else 2, "", self.err)

    def which(self, program: str, env: Mapping[str, str] | None = None) -> str | None:
        return None


def test_with_no_server_one_without_idle_timeout_lives_through_the_build(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher_module, "sccache_server_running", lambda env: False)
    runner = _Runner()
    with build_server(SCCACHE, runner, {"SCCACHE_DIR": "/c"}) as note:  # type: ignore[arg-type]
        assert note == ""
        assert [c[0][1] for c in runner.calls] == ["--start-server"]
        assert runner.calls[0][1]["SCCACHE_IDLE_TIMEOUT"] == "0"
        assert runner.calls[0][1]["SCCACHE_DIR"] == "/c"
    assert [c[0][1] for c in runner.calls] == ["--start-server", "--stop-server"]


def test_the_server_is_stopped_when_the_build_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher_module, "sccache_server_running", lambda env: False)
    runner = _Runner()
    with pytest.raises(RuntimeError), build_server(SCCACHE, runner, {}):  # type: ignore[arg-type]
        raise RuntimeError("ninja failed")
    assert [c[0][1] for c in runner.calls] == ["--start-server", "--stop-server"]


def test_an_idle_timeout_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher_module, "sccache_server_running", lambda env: False)
    runner = _Runner()
    with build_server(SCCACHE, runner, {"SCCACHE_IDLE_TIMEOUT": "7200"}):  # type: ignore[arg-type]
        pass
    assert runner.calls[0][1]["SCCACHE_IDLE_TIMEOUT"] == "7200"


def test_a_running_server_is_the_users_and_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher_module, "sccache_server_running", lambda env: True)
    runner = _Runner()
    with build_server(SCCACHE, runner, {}) as note:  # type: ignore[arg-type]
        assert "already running" in note and "SCCACHE_IDLE_TIMEOUT=0" in note
    assert runner.calls == []


def test_a_start_that_fails_is_said_and_nothing_is_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher_module, "sccache_server_running", lambda env: False)
    runner = _Runner(ok=False)
    with build_server(SCCACHE, runner, {}) as note:  # type: ignore[arg-type]
        assert "--start-server` failed" in note
    assert [c[0][1] for c in runner.calls] == ["--start-server"]


@pytest.mark.parametrize("launcher", [None, Launcher("ccache", Path("/opt/bin/ccache"), False)])
def test_other_launchers_need_no_server(launcher: Launcher | None) -> None:
    runner = _Runner()
    with build_server(launcher, runner, {}) as note:  # type: ignore[arg-type]
        assert note == ""
    assert runner.calls == []


def test_a_listener_on_the_port_is_a_running_server() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert sccache_server_running({"SCCACHE_SERVER_PORT": str(port)})
    assert not sccache_server_running({"SCCACHE_SERVER_PORT": str(port)})
    assert not sccache_server_running({"SCCACHE_SERVER_PORT": "not-a-port"})


def test_sccache_whose_server_cannot_start_is_dropped_with_a_note(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The GPU machine, 2026-11-28: `--start-server` failed, then torch's first compile
    # through the launcher (`cxx --version`) failed the whole build.
    monkeypatch.setattr(launcher_module, "sccache_server_running", lambda env: False)
    runner = _Runner(ok=False, err="sccache: error: Timed out waiting for server startup\n")
    notes: list[str] = []
    assert serving(SCCACHE, runner, {}, notes) is None  # type: ignore[arg-type]
    assert len(notes) == 1 and "compiles without a launcher" in notes[0]
    assert "Timed out waiting for server startup" in notes[0]


def test_sccache_that_serves_is_kept_and_its_probe_server_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher_module, "sccache_server_running", lambda env: False)
    runner = _Runner()
    notes: list[str] = []
    assert serving(SCCACHE, runner, {}, notes) is SCCACHE  # type: ignore[arg-type]
    assert [c[0][1] for c in runner.calls] == ["--start-server", "--stop-server"]
    assert notes == []
    monkeypatch.setattr(launcher_module, "sccache_server_running", lambda env: True)
    running = _Runner()
    assert serving(SCCACHE, running, {}, notes) is SCCACHE  # type: ignore[arg-type]
    assert running.calls == [] and notes == []
    ccache = Launcher("ccache", Path("/opt/bin/ccache"), False)
    assert serving(ccache, running, {}, notes) is ccache  # type: ignore[arg-type]
