"""`flashbuild scan` asks the build (issue 18 item 2): with the real cmake, nvcc and torch's
cpp_extension, the configured build decides what is compiled; an unchanged tree reuses the
stored model; and every input introspection cannot handle (a configure error, an absent
package, a setup.py that raises, hangs or reaches for the network, no build files, another
platform, no toolkit, no torch) gives one line that says why, the exit code of the static scan,
a byte-identical tree, and nothing written outside the build root."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from tests.markers import needs_torch

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "introspect"
FELL_BACK = "static reading: introspection could not run ("
UMMA = '__global__ void {name}() {{\n  asm volatile("tcgen05.fence::before_thread_sync;");\n}}\n'
#: A CMake tree whose sm100 library exists only when a file is there: the text cannot say
#: whether this configuration builds it, the configure can.
LISTS = ("cmake_minimum_required(VERSION 3.24)\nproject(t LANGUAGES CXX CUDA)\n"
         "add_library(main SHARED src/main.cu)\n"
         'if(EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/with_sm100.txt")\n'
         "  add_library(sm100 SHARED src/umma_sm100.cu)\nendif()\n")


@pytest.fixture(autouse=True)
def _needs_toolkit(cuda_toolkit_root: Path) -> None:
    """Skip where no CUDA toolkit exists (the fixture skips)."""


def _snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _layout(base: Path, name: str, make: Callable[[Path], None]) -> Path:
    """`<base>/work/<name>` made by `make`, and a sentinel folder beside it."""
    tree = base / "work" / name
    tree.mkdir(parents=True)
    make(tree)
    sentinel = base / "work" / "sentinel"
    sentinel.mkdir()
    (sentinel / "keep.txt").write_text("untouched\n", encoding="utf-8")
    return tree


def _scan(tree: Path, *extra: str, arch: str = "sm120") -> tuple[int, str]:
    res = CliRunner().invoke(app, ["scan", str(tree), "--arch", arch, "-j", "1", *extra])
    return res.exit_code, res.output


def _checked_scan(tree: Path, *extra: str, arch: str = "sm120") -> tuple[int, str]:
    """A default scan that must leave the tree and the sentinel byte-identical and write
    only into the build root (`<work>/build`)."""
    work = tree.parent
    before, sentinel = _snapshot(tree), _snapshot(work / "sentinel")
    code, output = _scan(tree, *extra, arch=arch)
    assert _snapshot(tree) == before, "the scan changed the tree"
    assert _snapshot(work / "sentinel") == sentinel
    assert {p.name for p in work.iterdir()} <= {tree.name, "sentinel", "build"}
    return code, output


def _cmake_tree(tree: Path) -> None:
    (tree / "src").mkdir()
    (tree / "CMakeLists.txt").write_text(LISTS, encoding="utf-8")
    (tree / "src" / "main.cu").write_text('#include "common.cuh"\n', encoding="utf-8")
    (tree / "src" / "common.cuh").write_text(UMMA.format(name="common"), encoding="utf-8")
    (tree / "src" / "umma_sm100.cu").write_text(UMMA.format(name="umma"), encoding="utf-8")


def test_the_configured_build_decides_what_is_compiled(tmp_path: Path) -> None:
    tree = _layout(tmp_path, "gated", _cmake_tree)
    code, static = _scan(tree, "--static")
    assert code == 11 and "src/umma_sm100.cu:2" in static  # the text cannot tell
    code, out = _checked_scan(tree)
    assert code == 11, out
    assert out.count("introspection:") == 1 and FELL_BACK not in out
    assert "gates: build (CMake File API, 1 target)" in out
    assert "src/common.cuh:2:17: error FB160" in out
    # The real preprocessor ran main.cu with the configured build's flags (a CMake tree).
    assert "the sm_120 pass of src/main.cu keeps this line" in " ".join(out.split())
    assert "src/umma_sm100.cu" not in out  # not in this configuration: a note
    assert "src: 1 file: C/C++ not compiled by this configuration" in out
    # Unchanged: the stored model is reused; a file the CMake files test changes the key.
    code, again = _checked_scan(tree)
    # (the line wraps at 80 columns between words: compare the words)
    assert code == 11 and "(reused: the tree is unchanged)" in " ".join(again.split())
    (tree / "with_sm100.txt").write_text("on\n", encoding="utf-8")
    code, more = _checked_scan(tree)
    assert code == 11 and "reused" not in more
    assert "gates: build (CMake File API, 2 targets)" in more
    assert "src/umma_sm100.cu:2:17: error FB160" in more


# --- what introspection cannot handle ---------------------------------------------------------

def _fixture(name: str) -> Callable[[Path], None]:
    def make(tree: Path) -> None:
        shutil.copytree(FIXTURES / name, tree, dirs_exist_ok=True)
    return make


def _lists(text: str) -> Callable[[Path], None]:
    def make(tree: Path) -> None:
        (tree / "CMakeLists.txt").write_text(text, encoding="utf-8")
        (tree / "k.cu").write_text(UMMA.format(name="k"), encoding="utf-8")
    return make


def _bare(tree: Path) -> None:
    (tree / "k.cu").write_text(UMMA.format(name="k"), encoding="utf-8")


def _no_toolkit(monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.errors import ToolchainError
    from flashbuild.pipeline import command, introspect

    def none(*_args: object, **_kwargs: object) -> None:
        raise ToolchainError("no CUDA toolkit with nvcc was found",
                             evidence="searched CUDA_HOME, PATH and the standard folders")

    # Where it is looked up: introspection imports it by name.
    monkeypatch.setattr(command, "choose_toolkit", none)
    monkeypatch.setattr(introspect, "choose_toolkit", none)


def _no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.building.backends import setuptools
    from flashbuild.errors import ToolchainError

    def none(*_args: object, **_kwargs: object) -> None:
        raise ToolchainError("torch is not installed for the Python that builds this "
                             "setup.py project", evidence="python finds no torch package")

    monkeypatch.setattr(setuptools, "probe_torch", none)


def _short_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.pipeline import scan

    monkeypatch.setattr(scan, "TIMEOUT_S", 5.0)


CASES: dict[str, tuple[Callable[[Path], None], Callable[[pytest.MonkeyPatch], None] | None,
                       tuple[str, ...], str]] = {
    "a configure error": (_lists("cmake_minimum_required(VERSION 3.24)\nproject(t NONE)\n"
                                 'message(FATAL_ERROR "no way")\n'), None, (),
                          "the CMake configure failed (CMakeLists.txt:3 (message): no way)"),
    "an absent package": (_lists("cmake_minimum_required(VERSION 3.24)\nproject(t NONE)\n"
                                 "find_package(FlashbuildAbsentPackage REQUIRED)\n"), None, (),
                          "the CMake configure failed (CMakeLists.txt:3 (find_package)"),
    "a setup.py that raises": (_fixture("setup_allowlist"), None, (),
                               "setup.py raised RuntimeError: unsupported arch 12.0"),
    "a setup.py that hangs": (_fixture("setup_hang"), _short_timeout, (),
                              "did not finish within 5 s"),
    "a setup.py that reaches for the network": (
        _fixture("setup_network"), None, (),
        "setup.py reached for the network (getaddrinfo example.invalid"),
    "no build files": (_bare, None, (), "no build files: no CMakeLists.txt and no setup.py"),
    "another platform": (_lists("project(t NONE)\n"), None, ("--platform", "windows"),
                         "introspection configures for this machine (linux); the target is "
                         "windows"),
    "no toolkit": (_lists("project(t NONE)\n"), _no_toolkit, (),
                   "no CUDA toolkit with nvcc was found"),
    "no torch": (_fixture("setup_allowlist"), _no_torch, (), "torch is not installed"),
}


#: The cases whose tree is a setup.py: recorded through torch's BuildExtension.
_SETUP_PY = {"a setup.py that raises", "a setup.py that hangs",
             "a setup.py that reaches for the network"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=needs_torch) if c in _SETUP_PY else c
                                  for c in CASES])
def test_what_introspection_cannot_handle_falls_back_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    from flashbuild import platforms

    if platforms.current().name != "linux":
        pytest.skip("the fixtures' setup.py and the reasons are this Linux machine's")
    make, patch, extra, reason = CASES[case]
    tree = _layout(tmp_path, "tree", make)
    static_code, _static = _scan(tree, "--static", *extra)
    if patch is not None:
        patch(monkeypatch)
    code, out = _checked_scan(tree, *extra)
    assert code == static_code, out
    lines = [ln for ln in out.splitlines() if FELL_BACK in ln]
    assert len(lines) == 1, out
    assert reason in " ".join(out.split())
    assert "gates: static reading of the build files (introspection fell back:" in out
