"""Internal errors and unclear messages of issue 22, each now one paragraph (what, evidence,
fix) with its documented exit code, or said in the report where the command goes on: a
setup.py nested deeper than Python's parser allows, with a syntax error, a FIFO or a link out
of the tree (scan said nothing, or crashed with RecursionError); a CMake add_subdirectory loop
(recipe init recursed forever)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.reliability.helpers import Outcome, judge, judge_outcome, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.reliability.helpers import Sandbox

TREE = 10
KERNEL = b"__global__ void k(float* x) { x[0] = 1; }\n"


def _deep(tree: Path) -> None:
    (tree / "setup.py").write_text("from setuptools import setup\nx = " + "1+" * 20000
                                   + "1\nsetup(name='x')\n")


def _unary(tree: Path) -> None:
    (tree / "setup.py").write_text("x = " + "-" * 5000 + "1\n")


def _syntax(tree: Path) -> None:
    (tree / "setup.py").write_text("from setuptools import setup\nsetup(name='x'\n")


def _fifo(tree: Path) -> None:
    os.mkfifo(tree / "setup.py")


def _link_out(tree: Path) -> None:
    outside = tree.parent / "sentinel" / "victim" / "x"
    (tree / "setup.py").symlink_to(outside)


SETUPS: dict[str, tuple[Callable[[Path], None], str]] = {
    "nested 20000 deep (binary operators)": (_deep, "nested too deeply for Python's parser"),
    "nested 5000 deep (unary minus)": (_unary, "nested too deeply for Python's parser"),
    "a syntax error": (_syntax, "not read as Python: '(' was never closed at line 2"),
    "a FIFO": (_fifo, "a FIFO (named pipe), not a regular file: not read"),
    "a link out of the tree": (_link_out, "outside the tree: not read"),
}


@pytest.mark.parametrize("name", list(SETUPS))
def test_scan_says_why_setup_py_was_not_read(box: Sandbox, name: str) -> None:
    make, say = SETUPS[name]
    (box.tree / "src" / "k.cu").write_bytes(KERNEL)
    make(box.tree)
    before = snapshot(box.tree)
    out = box.cli("scan", str(box.tree), "--arch", "sm120", "--jobs", "1")
    judge(f"scan: setup.py is {name}", box, out, code=0, tree=before, say=say)


@pytest.mark.parametrize("name", list(SETUPS))
def test_recipe_init_refuses_a_setup_py_it_cannot_read(box: Sandbox, name: str) -> None:
    make, say = SETUPS[name]
    (box.tree / "src" / "k.cu").write_bytes(KERNEL)
    make(box.tree)
    before = snapshot(box.tree)
    out = box.cli("recipe", "init", "--source", str(box.tree))
    judge(f"recipe init: setup.py is {name}", box, out, code=TREE, tree=before,
          say="recipe init cannot read the tree's setup.py")
    assert say in " ".join(out.output.split())


LOOPS = {
    "add_subdirectory(.)": {"CMakeLists.txt": "project(x)\nadd_subdirectory(.)\n"},
    "sub adds ..": {"CMakeLists.txt": "project(x)\nadd_subdirectory(sub)\n",
                    "sub/CMakeLists.txt": "add_subdirectory(..)\n"},
    "a adds b, b adds a": {"CMakeLists.txt": "project(x)\nadd_subdirectory(a)\n",
                           "a/CMakeLists.txt": "add_subdirectory(../b)\n",
                           "b/CMakeLists.txt": "add_subdirectory(../a)\n"},
}


@pytest.mark.parametrize("name", list(LOOPS))
def test_recipe_init_names_a_cmake_add_subdirectory_loop(box: Sandbox, name: str) -> None:
    for rel, text in LOOPS[name].items():
        (box.tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (box.tree / rel).write_text("cmake_minimum_required(VERSION 3.18)\n" + text
                                    if rel == "CMakeLists.txt" else text)
    before = snapshot(box.tree)
    out = box.cli("recipe", "init", "--source", str(box.tree))
    judge(f"recipe init: CMake loop {name}", box, out, code=TREE, tree=before,
          say="adds a folder that is already part of the build")


def test_recipe_init_reads_a_folder_two_branches_add_once(box: Sandbox) -> None:
    # A binding that adds a vendored library's subfolder itself, while the library adds it
    # under the opposite condition (llama-cpp-python 0.3.36 and llama.cpp's tools/mtmd): not
    # a loop, and recipe init stopped on it with exit 10.
    files = {
        "CMakeLists.txt": "cmake_minimum_required(VERSION 3.18)\nproject(x)\n"
                          "add_subdirectory(vendor/lib)\n"
                          "if(WITH_M)\n  add_subdirectory(vendor/lib/tools/m)\nendif()\n",
        "vendor/lib/CMakeLists.txt": "if(LIB_M AND NOT WITH_M)\n  add_subdirectory(tools/m)\n"
                                     "endif()\nadd_library(lib SHARED lib.cpp)\n",
        "vendor/lib/lib.cpp": "int lib() { return 1; }\n",
        "vendor/lib/tools/m/CMakeLists.txt": "add_library(m SHARED m.cpp)\n",
        "vendor/lib/tools/m/m.cpp": "int m() { return 2; }\n",
    }
    for rel, text in files.items():
        (box.tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (box.tree / rel).write_text(text)
    before = snapshot(box.tree)
    out = box.cli("recipe", "init", "--static", "--source", str(box.tree))
    judge("recipe init: one folder added by two branches", box, out, code=0, tree=before,
          say="[build]")


def test_recipe_init_turns_a_refused_site_into_a_todo(box: Sandbox) -> None:
    # An instantiation that shares its line with other code cannot be guarded safely: the
    # whole draft died with exit 5 ("fix the step") for a step the user never wrote.
    kernels = box.tree / "k"
    kernels.mkdir()
    (kernels / "a.cu").write_text("template <typename T>\n"
                                  "__global__ void k(T* __restrict__ x) { x[0] = 1; }"
                                  "\nint y = 0; template __global__ void k<float>(float*);\n")
    (kernels / "b.cu").write_text("template <typename T>\n"
                                  "__global__ void j(T* __restrict__ x) { x[0] = 1; }"
                                  "\ntemplate __global__ void j<float>(float*);\n")
    (box.tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(x LANGUAGES CXX CUDA)\n"
        "add_library(k SHARED k/a.cu k/b.cu)\n")
    before = snapshot(box.tree)
    out = box.cli("recipe", "init", "--source", str(box.tree), "--platform", "windows")
    judge("recipe init: a transform refuses one site", box, out, code=0, tree=before,
          say="# TODO: the drafted step `msvc-instantiations` could not make this edit")
    text = " ".join(out.output.replace("#", " ").split())  # the TODO wraps across comments
    assert 'files = ["k/b.cu"]' in text and "expect = { sites = 1 }" in text
    assert "k/a.cu:3 safely: it shares its line with other code" in text


def test_a_recipe_nested_thousands_deep_is_exit_4(box: Sandbox) -> None:
    """tomllib recursed until RecursionError: an internal error (issue 27)."""
    recipe = box.recipe_dir / "deep.toml"
    recipe.write_text('[recipe]\nname = "v"\nx = ' + "[" * 100_000 + "]" * 100_000 + "\n")
    box._outside = box.outside()
    out = box.cli("recipe", "check", str(recipe))
    judge("recipe nested 100000 deep", box, out, code=4, tree=box.pristine,
          say="nested too deeply")


def test_a_deleted_current_folder_is_a_usage_error(box: Sandbox) -> None:
    """`doctor` and `build` from a folder deleted under the shell: an internal error
    (FileNotFoundError from getcwd) before issue 27."""
    gone = box.base / "gone"
    gone.mkdir()
    done = subprocess.run(
        ["sh", "-c", 'cd "$1" && rmdir "$1" && exec "$2" -m flashbuild recipe list', "sh",
         str(gone), sys.executable], capture_output=True, text=True, timeout=60, check=False)
    out = Outcome(done.returncode, done.stdout + done.stderr, 0.0)
    judge_outcome("current folder deleted", out, code=2, say="no longer exists")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full is Linux")
def test_stdout_on_dev_full_is_one_paragraph(tmp_path: Path) -> None:
    """stdout on /dev/full: an internal error and a second traceback at exit (issue 27)."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "flashbuild", "recipe", "list"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=60,
                              check=False, cwd=tmp_path)
    out = Outcome(done.returncode, done.stderr, 0.0)
    judge_outcome("stdout on /dev/full", out, code=2, say="could not write its output")
    assert "Exception ignored" not in done.stderr


def _without_dac() -> list[str] | None:
    """A prefix under which a mode-000 folder cannot be searched: nothing for a normal user;
    for root, setpriv dropping CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (root keeps its uid, so
    the interpreter under /root stays readable, as it would not be for `nobody`)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]


UNREADABLE_PATH = {
    "doctor": ["doctor", "--cuda", "/usr/local/cuda-13.0"],
    "build": ["build", "--recipe", "{base}/t.toml", "--source", "{base}/t", "--arch", "sm_90a",
              "--cuda", "/usr/local/cuda-13.0"],
}


@pytest.mark.skipif(not os.path.isfile("/usr/local/cuda-13.0/bin/nvcc"),
                    reason="needs the CUDA 13.0 toolkit")
@pytest.mark.parametrize("command", list(UNREADABLE_PATH))
def test_an_unreadable_path_entry_is_skipped(tmp_path: Path, command: str) -> None:
    """A PATH entry flashbuild may not search (mode 000) was exit 1, `PermissionError` on
    `<entry>/nvcc`, in build even with --cuda; doctor lost its toolkit, compiler and GPU
    findings (issue 27). Now the entry is skipped, and -v says so."""
    prefix = _without_dac()
    if prefix is None:
        pytest.skip("root without setpriv: permissions do not stop root's reads")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    tree = tmp_path / "t"
    tree.mkdir()
    # A configure that would stop at once: the build ends at its missing [install] (exit 2),
    # after the toolkit and compiler lookups this case is about.
    (tree / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.18)\n"
                                         "project(x LANGUAGES NONE)\n")
    (tmp_path / "t.toml").write_text('[recipe]\nname = "t"\n[source]\npath = "t"\n')
    args = [a.format(base=tmp_path) for a in UNREADABLE_PATH[command]]
    path = os.pathsep.join([str(locked), str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    try:
        done = subprocess.run([*prefix, sys.executable, "-m", "flashbuild", "-v", *args],
                              env={**os.environ, "PATH": path}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        locked.chmod(0o700)
    out = Outcome(done.returncode, done.stdout + done.stderr, 0.0)
    code = 0 if command == "doctor" else 2
    judge_outcome(f"unreadable PATH entry ({command})", out, code=code,
                  say=f"skipped the PATH entry {locked}: Permission denied")
    assert "PermissionError" not in out.output, out.output
