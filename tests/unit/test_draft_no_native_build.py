"""A tree with no build flashbuild can drive (no CMake project(), no setup.py extension) is
told apart: kernels compiled at run time, binaries shipped, or nothing found. The build stops
on each with that paragraph instead of "add a CMakeLists.txt"."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild.pipeline.choose import Todo, blocks
from flashbuild.recipes.load import parse_recipe
from flashbuild.scanning.draft import draft_build

SETUP = 'from setuptools import setup\nsetup(name="pkg", packages=["pkg"])\n'
JIT = ('from torch.utils.cpp_extension import load\n\n'
       'def kernels():\n'
       '    return load(name="k", sources=["pkg/k.cu"])\n')
RECIPE = '[recipe]\nname = "t"\n[source]\npath = "."\n[build]\nbackend = "cmake"\n'


def _tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize(("files", "what", "evidence"), [
    ({"setup.py": SETUP, "pkg/__init__.py": "", "pkg/jit.py": JIT, "pkg/k.cu": ""},
     "compiles its kernels at run time", "pkg/jit.py:4"),
    ({"setup.py": SETUP, "pkg/__init__.py": "", "pkg/lib/libpkg.so": b"\x7fELF"},
     "ships binaries built elsewhere", "pkg/lib/libpkg.so"),
    ({"setup.py": SETUP, "pkg/__init__.py": ""},
     "builds no native code flashbuild can find", "0 CMake file(s)"),
])
def test_a_tree_without_a_native_build_says_what_it_is(
        tmp_path: Path, files: dict[str, str | bytes], what: str, evidence: str) -> None:
    b = draft_build(_tree(tmp_path, files))
    (todo,) = [t for t in b.todos if t.table == "build"]
    assert what in todo.what
    assert evidence in todo.evidence
    recipe = parse_recipe(RECIPE, None)
    assert blocks(Todo(todo.table, todo.what, todo.evidence, todo.fix), recipe,
                  installing=True)
