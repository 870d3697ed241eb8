"""A tree's build scripts run contained during introspection (issue 27): planted trees whose
CMakeLists.txt / setup.py reach for the network through child processes and CMake's
file(DOWNLOAD), write into and delete from their source folder, and start a `setsid` daemon.
Introspected: no connection reaches a listener on the host's 127.0.0.1, the tree stays
byte-identical, and nothing they started is left running."""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import time
from pathlib import Path

import psutil
import pytest

from flashbuild import platforms, proc
from flashbuild.arch import parse_arch_spec
from flashbuild.pipeline.introspect import introspect
from flashbuild.platforms import contain
from flashbuild.recipes.load import parse_recipe
from tests.markers import needs_torch

pytestmark = [pytest.mark.integration]

_CMAKE = """cmake_minimum_required(VERSION 3.18)
project(planted LANGUAGES NONE)
file(WRITE ${{CMAKE_CURRENT_SOURCE_DIR}}/written.txt "planted")
file(REMOVE ${{CMAKE_CURRENT_SOURCE_DIR}}/victim.txt)
file(DOWNLOAD http://127.0.0.1:{port}/f ${{CMAKE_CURRENT_BINARY_DIR}}/f TIMEOUT 3)
execute_process(COMMAND {python} -I -c
  "import socket; socket.create_connection(('127.0.0.1', {port}), 3)")
execute_process(COMMAND bash -c "echo hi > /dev/tcp/127.0.0.1/{port}")
execute_process(COMMAND bash -c "setsid -f sleep {mark} >/dev/null 2>&1 </dev/null")
"""

_SETUP = """import os, subprocess, sys
subprocess.run([{python!r}, "-I", "-c",
                "import socket; socket.create_connection(('127.0.0.1', {port}), 3)"])
subprocess.run(["bash", "-c", "echo hi > /dev/tcp/127.0.0.1/{port}"])
subprocess.run(["bash", "-c", "setsid -f sleep {mark} >/dev/null 2>&1 </dev/null"])
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "written.txt"), "w") as f:
    f.write("planted")
os.remove(os.path.join(os.path.dirname(os.path.abspath(__file__)), "victim.txt"))
from setuptools import setup
setup(name="planted")
"""


def _snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _sleepers(mark: str) -> list[psutil.Process]:
    found = []
    for each in psutil.process_iter(["cmdline"]):
        if (each.info["cmdline"] or [])[-1:] == [mark]:
            found.append(each)
    return found


def _introspect_planted(tmp_path: Path, backend: str, name: str, text: str) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    # A number no other process sleeps for: how the daemon is found afterwards.
    mark = f"{4000 + os.getpid() % 1000}.{port}"
    tree = tmp_path / "work" / "planted"
    tree.mkdir(parents=True)
    (tree / name).write_text(text.format(port=port, python=sys.executable, mark=mark))
    (tree / "victim.txt").write_text("the user's file")
    before = _snapshot(tree)
    recipe = parse_recipe(f'[recipe]\nname = "t"\n[source]\npath = "planted"\n'
                          f'[build]\nbackend = "{backend}"\n', None)
    try:
        introspect(recipe, tree, parse_arch_spec("sm_90a"), timeout=60, cache=False,
                   bindings=False)
        time.sleep(0.2)  # a daemon's fork has happened by now
        left = _sleepers(mark)
        for each in left:
            each.kill()
        try:
            conn, _ = listener.accept()
            conn.close()
            connected = True
        except BlockingIOError:
            connected = False
    finally:
        listener.close()
    # All three checked before any assertion: each is a guarantee of its own. Without
    # namespaces (a kernel that refuses user namespaces) only the tree's is given: a child
    # `python -I` ignores proxies and a `setsid` daemon leaves the process group
    # (docs/introspection.md, "Contained").
    namespaces = platforms.current().containment().namespaces
    broken = [what for what, bad in (
        ("a build script reached the host's network", connected and namespaces),
        ("introspection changed the tree", _snapshot(tree) != before),
        ("a daemon the build script started is still running", bool(left) and namespaces))
        if bad]
    assert not broken


def test_a_planted_cmakelists_is_contained(tmp_path: Path, cuda_toolkit_root: Path) -> None:
    _introspect_planted(tmp_path, "cmake", "CMakeLists.txt", _CMAKE)


def test_without_namespaces_the_tree_is_still_left_alone(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback (user namespaces refused): the configure still runs on a copy."""
    monkeypatch.setattr(contain, "linux_containment",
                        lambda: contain.no_containment("refused (test)"))
    assert not platforms.current().containment().namespaces
    _introspect_planted(tmp_path, "cmake", "CMakeLists.txt", _CMAKE)


@needs_torch
def test_a_planted_setup_py_is_contained(tmp_path: Path, cuda_toolkit_root: Path) -> None:
    _introspect_planted(tmp_path, "setuptools", "setup.py", _SETUP)


def test_run_keeps_only_the_end_of_a_huge_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proc, "OUTPUT_LIMIT", 1 << 20, raising=False)
    script = ("import sys\nfor i in range(64): sys.stderr.write('x' * 65535 + '\\n')\n"
              "sys.stderr.write('the end\\n')")
    done = proc.ProcessRunner().run([sys.executable, "-c", script], timeout=30)
    # 4 MiB printed; 1 MiB (plus the chunk that crossed it) kept, the end included.
    assert len(done.stderr) < (1 << 20) + 70000
    assert done.stderr.rstrip().endswith("the end")
    assert "bytes of this output were dropped" in done.stderr
