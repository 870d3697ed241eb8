"""Bad input of every class flashbuild reads before it works: recipes (regexes, paths, shapes,
encodings), command-line options (`--cuda`, `--arch`, `recipe init -o`), odd file names in a
tree a recipe is drafted from, a diff that cannot apply with a huge fuzz, and `__init__.py`
files the loader shim must be inserted into."""

from __future__ import annotations

import ast
import re
import tomllib
from typing import TYPE_CHECKING

import pytest

from flashbuild.installing import shim
from tests.reliability.helpers import LINUX90, WIN120, Outcome, Sandbox, judge, record, snapshot

if TYPE_CHECKING:
    from pathlib import Path

ROOT_RECIPE = '[recipe]\nname = "rel"\n[source]\npath = "../tree"\n'

BAD_RECIPES = {
    "regex-find": ROOT_RECIPE + '[[patch]]\nid = "m"\ntransform = "macro-edit"\n'
    'params = { files = ["src/math.cpp"], find = "(unclosed", replace = "x", regex = true, '
    'already = "x" }\n',
    "regex-already": ROOT_RECIPE + '[[patch]]\nid = "m"\ntransform = "macro-edit"\n'
    'params = { files = ["src/math.cpp"], find = "a", replace = "x", regex = true, '
    'already = "[z" }\n',
    "regex-anchor": ROOT_RECIPE + '[[patch]]\nid = "i"\ntransform = "insert-block"\n'
    'params = { file = "README.md", anchor = "*bad", anchor_regex = true, block = "x" }\n',
    "regex-end-anchor": ROOT_RECIPE + '[[patch]]\nid = "r"\ntransform = "replace-block"\n'
    'params = { file = "README.md", anchor = "a", end_anchor = "(?P<", anchor_regex = true, '
    'block = "x" }\n',
    "nul-in-diff-path": ROOT_RECIPE + '[[patch]]\nid = "d"\ndiff = "a\\u0000b.patch"\n',
    "nul-in-source-path": '[recipe]\nname = "rel"\n[source]\npath = "../t\\u0000ree"\n',
    "not-toml": ROOT_RECIPE + "[[patch]\n",
    "unknown-key": ROOT_RECIPE + '[[patch]]\nid = "d"\ndiff = "add_mul.patch"\nfuz = 1\n',
    "patch-not-array": ROOT_RECIPE + "patch = 5\n",
    "step-without-kind": ROOT_RECIPE + '[[patch]]\nid = "d"\n',
    "negative-fuzz": ROOT_RECIPE + '[[patch]]\nid = "d"\ndiff = "add_mul.patch"\nfuzz = -1\n',
    "bad-arch-pattern": ROOT_RECIPE + '[[patch]]\nid = "d"\ndiff = "add_mul.patch"\n'
    'when = { arch = [">=banana"] }\n',
    "duplicate-ids": ROOT_RECIPE + '[[patch]]\nid = "d"\ndiff = "add_mul.patch"\n'
    '[[patch]]\nid = "d"\ndiff = "add_mul.patch"\n',
    "long-diff-name": ROOT_RECIPE + f'[[patch]]\nid = "d"\ndiff = "{"x" * 5000}.patch"\n',
}


@pytest.mark.parametrize("command", ["check", "patch"])
@pytest.mark.parametrize("name", sorted(BAD_RECIPES))
def test_bad_recipe_is_exit_4_with_its_line(box: Sandbox, name: str, command: str) -> None:
    recipe = box.recipe_dir / "bad.toml"
    recipe.write_text(BAD_RECIPES[name])
    box._outside = box.outside()
    args = (["recipe", "check", str(recipe)] if command == "check" else
            ["patch", "--recipe", str(recipe), "--source", str(box.tree), *WIN120])
    out = box.cli(*args)
    judge(f"recipe: {name} ({command})", box, out, code=4, tree=box.pristine)
    if name.startswith("regex"):
        assert re.search(r"bad\.toml:\d+", out.output.replace("\n", "")), out.output


@pytest.mark.parametrize("data", [b"\xff\xfe[recipe]\n", b"[recipe]\nname = \"\xe9\"\n"])
def test_recipe_that_is_not_utf8(box: Sandbox, data: bytes) -> None:
    recipe = box.recipe_dir / "latin.toml"
    recipe.write_bytes(data)
    box._outside = box.outside()
    for args in (["recipe", "check", str(recipe)],
                 ["patch", "--recipe", str(recipe), "--source", str(box.tree)]):
        judge("recipe: not UTF-8", box, box.cli(*args), code=4, tree=box.pristine)


def test_recipe_check_of_a_folder(box: Sandbox) -> None:
    judge("recipe: check a folder", box, box.cli("recipe", "check", str(box.recipe_dir)),
          code=4, tree=box.pristine)


def test_huge_fuzz_on_a_hunk_that_does_not_apply_fails_fast(box: Sandbox) -> None:
    (box.recipe_dir / "r.toml").write_text(
        ROOT_RECIPE + '[[patch]]\nid = "d"\ndiff = "add_mul.patch"\nfuzz = 1000000000\n')
    # Nothing of the hunk's context is in the file: even with every context line dropped no
    # line is left to anchor it, so it must fail (fast) rather than land anywhere.
    (box.tree / "src" / "math.cpp").write_bytes(b"int other();\n" * 2000)
    box._outside = box.outside()
    before = snapshot(box.tree)
    out = box.cli(*box.patch_args(*LINUX90), timeout=30)
    judge("recipe: fuzz 1e9 on a failing hunk", box, out, code=5, tree=before)
    assert out.seconds < 30


@pytest.mark.parametrize("kind", ["missing", "file", "empty-folder"])
@pytest.mark.parametrize("command", ["doctor", "build"])
def test_cuda_that_is_not_a_toolkit(box: Sandbox, tmp_path: Path, kind: str,
                                    command: str) -> None:
    target = tmp_path / "not-cuda"
    if kind == "file":
        target.write_text("#!/bin/sh\nexit 1\n")
        target.chmod(0o755)
    elif kind == "empty-folder":
        target.mkdir()
    args = (["doctor", "--cuda", str(target), "--arch", "sm_90a"] if command == "doctor" else
            ["build", "--cuda", str(target), "--arch", "sm_90a", "--recipe", str(box.recipe),
             "--source", str(box.tree), "--install", "none"])
    out = box.proc(*args, timeout=120)
    judge(f"cli: {command} --cuda {kind}", box, out, code=2, tree=box.pristine,
          say="is not a CUDA toolkit")


@pytest.mark.parametrize("arch", ["banana", "sm_", "sm_99999", "sm_90a;banana", ""])
def test_bad_arch(box: Sandbox, arch: str) -> None:
    out = box.cli(*box.patch_args("--platform", "linux", "--arch", arch))
    judge(f"cli: patch --arch {arch!r}", box, out, code=2, tree=box.pristine)


def test_missing_source_tree(box: Sandbox, tmp_path: Path) -> None:
    out = box.cli("patch", "--recipe", str(box.recipe), "--source", str(tmp_path / "nope"),
                  *WIN120)
    judge("cli: patch --source missing", box, out, code=10, tree=box.pristine)


@pytest.mark.parametrize("where", ["folder", "missing-parent"])
def test_recipe_init_output_that_cannot_be_written(box: Sandbox, tmp_path: Path,
                                                   where: str) -> None:
    output = tmp_path if where == "folder" else tmp_path / "no" / "such" / "r.toml"
    before = snapshot(tmp_path / "sentinel")
    out = box.cli("recipe", "init", "--source", str(box.tree), "-o", str(output))
    judge(f"cli: recipe init -o {where}", box, out, code=2, tree=box.pristine)
    assert snapshot(tmp_path / "sentinel") == before


ODD_NAMES = ["we\rird.cu", "new\nline.cu", 'quote"s.cu', "[recipe].cu", "tab\tname.cu",
             "del\x7f.cu", "uni\u2028code.cu"]


def test_recipe_init_on_odd_file_names_writes_valid_toml(box: Sandbox,
                                                         tmp_path: Path) -> None:
    # Findings for each odd name: a kernel with explicit instantiations (MSVC) and dlopen.
    body = (b"#include <dlfcn.h>\ntemplate <typename T> __global__ void k(T* __restrict__ x) {}\n"
            b"template __global__ void k<float>(float*);\n"
            b"void* load() { return dlopen(\"x.so\", RTLD_NOW); }\n")
    for name in ODD_NAMES:
        (box.tree / "src" / name).write_bytes(body)
    (box.tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(odd LANGUAGES CXX CUDA)\n"
        "file(GLOB SRC src/*.cu)\nadd_library(odd SHARED ${SRC})\n")
    before = snapshot(box.tree)
    output = tmp_path / "drafted.toml"
    out = box.cli("recipe", "init", "--source", str(box.tree), "--platform", "windows",
                  "--arch", "sm120", "-o", str(output))
    judge("cli: recipe init with odd file names", box, out, code=0, tree=before)
    text = output.read_text(encoding="utf-8")
    document = tomllib.loads(text)  # valid TOML, and no name smuggled a table in
    assert set(document) <= {"recipe", "source", "patch", "build", "artifact", "install",
                             "verify"}
    check = box.cli("recipe", "check", str(output))
    judge("cli: recipe check of the drafted odd-name recipe", box, check, code=0, tree=before)


INITS = {
    "bom-docstring": '\ufeff"""Package."""\nimport os\n',
    "bom-only-code": "\ufeffimport os\n",
    "u2028-in-docstring": '"""A docstring with a\u2028line separator."""\nimport os\n',
    "formfeed-and-future": '"""Doc\x0c."""\r\nfrom __future__ import annotations\r\nx = 1\r\n',
    "no-final-newline": '"""Doc."""',
    "nel-in-string": 'X = "a\x85b"\n',
    "empty": "",
    # Issue 22: the shim's markers quoted inside a string are text, not a block: refused
    # ("no end marker") or, with both quoted, the string was cut.
    "begin-marker-in-a-string": f'X = """\n{shim.BEGIN}\nquoted\n"""\nY = 1\n',
    "both-markers-in-a-string": f'"""Doc.\n{shim.BEGIN}\nquoted\n{shim.END}\n"""\nY = 1\n',
}


@pytest.mark.parametrize("name", sorted(INITS))
def test_shim_insertion_whatever_the_init(tmp_path: Path, name: str) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    init = package / "__init__.py"
    original = INITS[name].encode("utf-8")
    init.write_bytes(original)
    problems = []
    try:
        shim.install_shim(package, ["/opt/cuda/bin"], package="pkg")
        text = init.read_bytes().decode("utf-8")
        tree = ast.parse(text.removeprefix("\ufeff"))
        imports = [n for n in tree.body if isinstance(n, ast.ImportFrom)
                   and n.names[0].name == shim.SHIM_MODULE]
        if len(imports) != 1:
            problems.append("the shim import is not a top-level statement")
        if original.startswith(b"\xef\xbb\xbf") and not text.startswith("\ufeff"):
            problems.append("the BOM moved")
        again = init.read_bytes()
        shim.install_shim(package, ["/opt/cuda/bin"], package="pkg")
        if init.read_bytes() != again:
            problems.append("not idempotent")
        shim.uninstall_shim(package)
        # A file ending right after its docstring keeps the newline the block needed.
        if init.read_bytes() not in (original, original + b"\n"):
            problems.append("not removable byte for byte")
    except Exception as exc:
        problems.append(f"{type(exc).__name__}: {exc}")
    record(f"shim: __init__.py {name}", clear_error=None, data_lost=bool(problems),
           tree_changed=bool(problems), hang=False)
    assert not problems, problems


def test_shim_into_an_init_that_does_not_parse(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_bytes(b"def broken(:\n")
    from flashbuild.errors import InstallError

    with pytest.raises(InstallError) as info:
        shim.install_shim(package, [], package="pkg")
    error = info.value
    out = Outcome(error.exit_code, f"error: {error.what}\n{error.evidence}\nfix: {error.fix}",
                  0.0)
    record("shim: __init__.py that does not parse", clear_error=out.clear_error(),
           data_lost=(package / "__init__.py").read_bytes() != b"def broken(:\n",
           tree_changed=False, hang=False)
    assert out.clear_error()
    assert (package / "__init__.py").read_bytes() == b"def broken(:\n"
