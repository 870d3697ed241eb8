"""Signals with children: SIGINT and SIGTERM sent to `flashbuild build` while a real CMake or
setuptools build runs a tree of processes (a sleeper standing in for nvcc, with a child of its
own standing in for cicc/ptxas), and at start-up while the CLI's modules load.

Each case: exit 130, one paragraph naming the signal and the log (which exists), no traceback,
the tree unchanged, and not one process of the build's tree left — the tree is every
descendant of flashbuild recorded just before the signal, plus every process that carries the
case's marker in its environment (which catches one that escaped the tree). Readiness is
polled (marker files the sleepers write), never timed; the waits are generous for a loaded
machine and no duration is asserted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.conftest import cuda_toolkit_root  # noqa: F401 - a fixture
from tests.reliability.helpers import Outcome, record, snapshot

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX signals")

#: Seconds to wait for the build to reach its sleeper (configure, torch's probe, pip start).
READY_S = 300.0
#: Seconds flashbuild may take to end its tree and exit after the signal (STOP_GRACE_S 5 s
#: plus the kill; generous for a loaded machine).
EXIT_S = 120.0

SLEEPER = """import os, subprocess, sys, time
marks, name = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:  # as nvcc runs cicc and ptxas: a child of its own
    subprocess.Popen([sys.executable, __file__, marks, name + "-child"])
open(os.path.join(marks, f"{name}.{os.getpid()}"), "w").close()
time.sleep(900)
"""

CMAKELISTS = """cmake_minimum_required(VERSION 3.24)
project(slow LANGUAGES NONE)
set(SLEEP "$ENV{FB_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/sleeper.py" "$ENV{FB_MARKS}")
if("$ENV{FB_SLEEP_AT}" STREQUAL "configure")
  execute_process(COMMAND ${SLEEP} configure child)
endif()
add_custom_target(slow ALL COMMAND ${SLEEP} compile child)
"""
CMAKE_RECIPE = """[recipe]
name = "slow"
[source]
path = "."
[build]
targets = ["slow"]
[[artifact]]
name = "slow"
kind = "plugin"
target = "slow"
"""

SETUP = """import os, subprocess, sys
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

SLEEP = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "sleeper.py"),
         os.environ["FB_MARKS"]]
if os.environ.get("FB_SLEEP_AT") == "setup":  # while pip asks setup.py for its metadata
    subprocess.run(SLEEP + ["setup", "child"])


class Slow(BuildExtension):
    def run(self):
        subprocess.run(SLEEP + ["build_ext", "child"])
        super().run()


setup(name="slowext", version="0.1", packages=["slowext"],
      ext_modules=[CUDAExtension("slowext._C", ["k.cu"])], cmdclass={"build_ext": Slow})
"""
SETUP_RECIPE = """[recipe]
name = "slowext"
[source]
path = "."
[build]
backend = "setuptools"
[install]
package = "slowext"
package_dir = "slowext"
"""
#: flashbuild as the console script runs it, with the CPU-only torch check skipped (this
#: machine's torch has no CUDA; the build is stopped long before it would link).
CPU_TORCH_MAIN = ("import sys; from flashbuild.building.backends import setuptools as st; "
                  "st.check_torch_cuda = lambda torch, request: None; "
                  "from flashbuild.__main__ import main; sys.argv[0] = 'flashbuild'; main()")

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}
SAID = {"SIGINT": "Ctrl-C (SIGINT)", "SIGTERM": "SIGTERM"}


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _marked(marks: Path) -> set[int]:
    """Live processes whose environment carries this case's marker folder."""
    found = set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("FB_MARKS") == str(marks) and _running(proc.pid):
                found.add(proc.pid)
    return found


def _interrupt_build(argv: list[str], *, base: Path, point: str,
                     sig: str) -> tuple[Outcome, list[int]]:
    """Start `argv`, wait for the sleeper at `point` and its child, send `sig` to flashbuild
    alone (as `kill` or a service manager does; a terminal's Ctrl-C reaches only flashbuild
    too, since its children lead their own process group). Returns the outcome and the pids
    of the build's tree still running afterwards."""
    marks = base / "marks"
    marks.mkdir()
    env = {**os.environ, "FB_MARKS": str(marks), "FB_SLEEP_AT": point,
           "FB_PYTHON": sys.executable, "COLUMNS": "200", "NO_COLOR": "1"}
    outer = subprocess.Popen(argv, cwd=base, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    family: set[int] = set()
    try:
        deadline = time.monotonic() + READY_S
        while not (list(marks.glob(f"{point}.*")) and list(marks.glob(f"{point}-child.*"))):
            if outer.poll() is not None or time.monotonic() > deadline:
                out = outer.communicate(timeout=EXIT_S)[0] if outer.poll() is not None else ""
                pytest.fail(f"the build never reached its {point} step (exit "
                            f"{outer.returncode}):\n{out}")
            time.sleep(0.1)
        family = {p.pid for p in psutil.Process(outer.pid).children(recursive=True)}
        family |= {int(m.name.rsplit(".", 1)[1]) for m in marks.iterdir()}
        start = time.monotonic()
        os.kill(outer.pid, SIGNALS[sig])
        try:
            out = outer.communicate(timeout=EXIT_S)[0]
            hang = False
        except subprocess.TimeoutExpired:
            out, hang = "", True
        seconds = time.monotonic() - start
        left = sorted(pid for pid in family | _marked(marks) if _running(pid))
        return Outcome(outer.returncode if not hang else -1, out, seconds, hang=hang), left
    finally:  # hygiene for a failed case: nothing of it may outlive the test
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(outer.pid, signal.SIGKILL)
        for pid in family | _marked(marks):
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        if outer.poll() is None:
            outer.kill()
            outer.communicate()


def _judge(case: str, out: Outcome, left: list[int], *, sig: str, tree: Path,
           before: dict[str, tuple[str, bytes]]) -> None:
    changed = snapshot(tree) != before
    record(case, clear_error=out.clear_error(), data_lost=False, tree_changed=changed,
           hang=out.hang, left_running=bool(left))
    text = " ".join(out.output.split())
    assert not out.hang, f"{case}: flashbuild did not exit within {EXIT_S:g} s"
    assert not left, f"{case}: processes of the build still run: {left}\n{out.output}"
    assert out.code == 130, f"{case}: exit {out.code}\n{out.output}"
    assert out.clear_error(), out.output
    assert f"interrupted by {SAID[sig]}" in text, out.output
    assert "every process it started was ended" in text, out.output
    logs = [word.rstrip(".,;") for word in text.split() if word.endswith(".log")]
    assert logs and all(Path(log).is_file() for log in logs), f"log not kept:\n{out.output}"
    assert not changed, f"{case}: the tree changed"


@pytest.mark.integration
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("point", ["configure", "compile"])
def test_a_signal_ends_a_cmake_build_and_its_whole_tree(
        tmp_path: Path, cuda_toolkit_root: Path, point: str, sig: str) -> None:  # noqa: F811
    tree = tmp_path / "slow"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text(CMAKELISTS)
    (tree / "sleeper.py").write_text(SLEEPER)
    (tree / "slow.toml").write_text(CMAKE_RECIPE)
    before = snapshot(tree)
    argv = [sys.executable, "-m", "flashbuild", "build", "--recipe", str(tree / "slow.toml"),
            "--arch", "sm_90a", "--cuda", str(cuda_toolkit_root), "--jobs", "1",
            "--launcher", "none", "--install", "none", "--build-dir", str(tmp_path / "b")]
    out, left = _interrupt_build(argv, base=tmp_path, point=point, sig=sig)
    _judge(f"signals: {sig} during a CMake {point}", out, left, sig=sig, tree=tree,
           before=before)


@pytest.mark.integration
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("point", ["setup", "build_ext"])
def test_a_signal_ends_a_setuptools_build_and_its_whole_tree(
        tmp_path: Path, cuda_toolkit_root: Path, point: str, sig: str) -> None:  # noqa: F811
    pytest.importorskip("torch")
    tree = tmp_path / "slowext"
    (tree / "slowext").mkdir(parents=True)
    (tree / "slowext" / "__init__.py").write_text("")
    (tree / "setup.py").write_text(SETUP)
    (tree / "k.cu").write_text("__global__ void k(float* x) { x[0] = 1.f; }\n")
    (tree / "sleeper.py").write_text(SLEEPER)
    (tree / "slow.toml").write_text(SETUP_RECIPE)
    before = snapshot(tree)
    argv = [sys.executable, "-c", CPU_TORCH_MAIN, "build", "--recipe", str(tree / "slow.toml"),
            "--arch", "sm_90a", "--cuda", str(cuda_toolkit_root), "--jobs", "1",
            "--launcher", "none", "--build-dir", str(tmp_path / "b")]
    out, left = _interrupt_build(argv, base=tmp_path, point=point, sig=sig)
    _judge(f"signals: {sig} during a setuptools build ({point})", out, left, sig=sig,
           tree=tree, before=before)


# --- the start-up window -----------------------------------------------------------------------

def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (/proc's SigCgt mask): Python installs
    none of its own, so this is flashbuild's handler, installed by the entry point."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((line.split()[1] for line in status.splitlines()
                 if line.startswith("SigCgt:")), "0")
    return bool(int(mask, 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="needs /proc")
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05, 0.1])
def test_a_signal_while_the_cli_loads_is_exit_130_without_a_traceback(
        tmp_path: Path, sig: str, delay: float) -> None:
    """From the moment the entry point's handler is in place (polled, not timed) every stop
    signal ends the run with one line and exit 130, wherever the import of the CLI is."""
    argv = [sys.executable, "-m", "flashbuild", "recipe", "list"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _catches_sigterm(proc.pid):
            assert proc.poll() is None, "the entry point never installed its handler"
            assert time.monotonic() < deadline, "the entry point never installed its handler"
            time.sleep(0.001)
        time.sleep(delay)
        finished = proc.poll() is not None
        if not finished:
            os.kill(proc.pid, SIGNALS[sig])
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    outcome = Outcome(proc.returncode, out, 0.0)
    stopped = not finished and proc.returncode != 0
    record(f"signals: {sig} {delay:g} s after the handler was installed",
           clear_error=outcome.clear_error() if stopped else None, data_lost=False,
           tree_changed=False, hang=False)
    assert not outcome.traceback and not outcome.internal, out
    if not stopped:  # the whole command ran before the signal
        assert proc.returncode == 0, out
        return
    assert proc.returncode == 130, out
    assert f"interrupted by {SAID[sig]}" in out and outcome.clear_error(), out


def test_sigterm_at_spawn_never_prints_a_traceback(tmp_path: Path) -> None:
    """Before the entry point runs, the interpreter's own start-up owns the signal (SIGTERM's
    default kills it, -15, with nothing printed); from then on it is exit 130. (SIGINT has no
    such case: during the interpreter's own `site` import Python prints its traceback, before
    any flashbuild code can run; docs/reliability.md says so.)"""
    proc = subprocess.Popen([sys.executable, "-m", "flashbuild", "recipe", "list"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    os.kill(proc.pid, signal.SIGTERM)
    out = proc.communicate(timeout=60)[0]
    outcome = Outcome(proc.returncode, out, 0.0)
    record("signals: SIGTERM at spawn",
           clear_error=outcome.clear_error() if proc.returncode == 130 else None,
           data_lost=False, tree_changed=False, hang=False)
    assert "Traceback" not in out, out
    assert proc.returncode in (130, -signal.SIGTERM, 0), out
    if proc.returncode == 130:
        assert outcome.clear_error(), out


# --- a child of a worker thread: doctor's probes --------------------------------------------

FAKE_NVCC = """#!{python}
import os, subprocess, sys, time
marks = os.environ["FB_MARKS"]
name = "nvcc-child" if sys.argv[1:2] == ["child"] else "nvcc"
if name == "nvcc":  # hangs, as a licence prompt or a stuck network drive would
    subprocess.Popen([sys.executable, __file__, "child"])
open(os.path.join(marks, f"{{name}}.{{os.getpid()}}"), "w").close()
time.sleep(900)
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_during_doctors_probes_ends_the_probes_of_every_thread(
        tmp_path: Path, sig: str) -> None:
    """doctor probes in worker threads; a signal reaches the main thread only. Before, the
    run waited for the hung probe's own timeout and left its processes running."""
    toolkit = tmp_path / "toolkit"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "include").mkdir()
    nvcc = toolkit / "bin" / "nvcc"
    nvcc.write_text(FAKE_NVCC.format(python=sys.executable))
    nvcc.chmod(0o755)
    argv = [sys.executable, "-m", "flashbuild", "doctor", "--cuda", str(toolkit), "--no-cache"]
    out, left = _interrupt_build(argv, base=tmp_path, point="nvcc", sig=sig)
    record(f"signals: {sig} during doctor's probes", clear_error=out.clear_error(),
           data_lost=False, tree_changed=False, hang=out.hang, left_running=bool(left))
    assert not out.hang, f"doctor did not exit within {EXIT_S:g} s"
    assert not left, f"processes of the probe still run: {left}\n{out.output}"
    assert out.code == 130 and out.clear_error(), out.output
    assert f"interrupted by {SAID[sig]}" in out.output and "Traceback" not in out.output
