"""`flashbuild build --contain` (issue 27 item 1, offered for the build itself): the configure
and compile run as introspection's do, with no network and nothing left running. A CMake
tree that downloads at build time (`file(DOWNLOAD)` from a listener on the host's
127.0.0.1) reaches the listener without --contain and does not with it, and fails with one
paragraph that says the build had no network; a plain tree builds the same under --contain."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import pytest

from tests.reliability.helpers import Outcome, judge_outcome

if TYPE_CHECKING:
    from collections.abc import Iterator

CUDA = Path("/usr/local/cuda-13.0")
pytestmark = pytest.mark.skipif(not (CUDA / "bin" / "nvcc").is_file(),
                                reason="needs the CUDA 13.0 toolkit")
FETCH = """file(DOWNLOAD "${URL}" "${OUT}" STATUS status)
list(GET status 0 code)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "download of ${URL} failed: ${status}")
endif()
"""


class _Listener(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        body = b"downloaded\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    hits: ClassVar[list[str]] = []
    handler = type("Handler", (_Listener,), {"hits": hits})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/payload", hits
    finally:
        server.shutdown()
        server.server_close()


def _tree(base: Path, url: str | None) -> Path:
    tree = base / "c"
    tree.mkdir()
    text = "cmake_minimum_required(VERSION 3.24)\nproject(c LANGUAGES CXX)\n"
    if url is None:
        text += "add_library(c SHARED a.cpp)\n"
    else:
        (tree / "fetch.cmake").write_text(FETCH)
        text += ("add_custom_command(OUTPUT got.txt COMMAND ${CMAKE_COMMAND} "
                 f"-DURL={url} -DOUT=got.txt -P ${{CMAKE_CURRENT_SOURCE_DIR}}/fetch.cmake)\n"
                 "add_library(c SHARED a.cpp got.txt)\n")
    (tree / "CMakeLists.txt").write_text(text)
    (tree / "a.cpp").write_text("int f() { return 1; }\n")
    (tree / "c.toml").write_text('[recipe]\nname = "c"\n[source]\npath = "."\n'
                                 '[build]\ntargets = ["c"]\n')
    return tree


def _build(tree: Path, *extra: str) -> Outcome:
    argv = [sys.executable, "-m", "flashbuild", "build", "--recipe", str(tree / "c.toml"),
            "--arch", "sm_90a", "--cuda", str(CUDA), "--install", "none", "-j", "1", *extra]
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "all_proxy")}
    done = subprocess.run(argv, env={**env, "PATH": path}, cwd=tree.parent,
                          capture_output=True, text=True, timeout=300, check=False)
    return Outcome(done.returncode, done.stdout + done.stderr, 0.0)


def test_a_plain_tree_builds_under_contain(tmp_path: Path) -> None:
    out = _build(_tree(tmp_path, None), "--contain")
    judge_outcome("build --contain of a plain CMake tree", out, code=0,
                  say="--contain: the configure and compile run with")


def test_a_build_time_download_reaches_nothing_under_contain(
        tmp_path: Path, listener: tuple[str, list[str]]) -> None:
    url, hits = listener
    (tmp_path / "open").mkdir()
    tree = _tree(tmp_path / "open", url)
    (tmp_path / "shut").mkdir()
    shut = _tree(tmp_path / "shut", url)
    # The control: without --contain the download reaches the listener (the case can fail).
    assert _build(tree).code == 0 and hits == ["/payload"]
    out = _build(shut, "--contain")
    judge_outcome("build --contain of a tree that downloads at build time", out, code=6,
                  say="built with --contain (no network): compiling failed")
    assert hits == ["/payload"], hits  # no second connection
    assert "put it into the tree" in out.output
