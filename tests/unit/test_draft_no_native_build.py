"""A tree with no build flashbuild can drive (no CMake project(), no setup.py extension) is
told apart: kernels compiled at run time, binaries shipped, or nothing found. The build stops
on each with that paragraph instead of "add a CMakeLists.txt"."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild.pipeline.choose import Todo, blocks
from flashbuild.recipes.load import parse_recipe
from flashbuild.scanning.draft import cmake_switch_candidates, draft_build

SETUP = 'from setuptools import setup\nsetup(name="pkg", packages=["pkg"])\n'
JIT = ('from torch.utils.cpp_extension import load\n\n'
       'def kernels():\n'
       '    return load(name="k", sources=["pkg/k.cu"])\n')
NESTED = ('from setuptools import setup\n'
          'from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n'
          'setup(name="pkg_cuda", ext_modules=[CUDAExtension("pkg_cuda", ["k.cu"])],\n'
          '      cmdclass={"build_ext": BuildExtension})\n')
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
    # hqq 0.2.8.post1: setup.py runs `cd hqq/kernels; python setup_cuda.py install` from its
    # egg_info command; that script is the tree's CUDA build.
    ({"setup.py": 'import os\nfrom setuptools import setup\n'
                  'CMD = "cd pkg/kernels; python setup_cuda.py install"\n'
                  'setup(name="pkg", packages=["pkg"])\n',
      "pkg/__init__.py": "", "pkg/kernels/__init__.py": "",
      "pkg/kernels/setup_torch.py": NESTED.replace("CUDAExtension", "CppExtension"),
      "pkg/kernels/setup_cuda.py": NESTED, "pkg/kernels/k.cu": ""},
     "another script of the tree does (pkg/kernels/setup_cuda.py, CUDAExtension)",
     "setup.py names it at line 3 (it runs that script itself); also "
     "pkg/kernels/setup_torch.py"),
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


def test_cmake_switch_candidates_name_the_cuda_backend_first(tmp_path: Path) -> None:
    """llama.cpp's shape: GGML_CUDA (default OFF) is the backend; GGML_CUDA_F16 is a detail
    of it, DISABLE_CUDA a way out, USE_GPU already ON; a STRINGS cache variable that offers
    CUDA (atlas-engine's ATLAS_DEVICE_SYSTEM) comes first."""
    (tmp_path / "ggml").mkdir()
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(t LANGUAGES CXX)\n"
        'option(DISABLE_CUDA "no CUDA" OFF)\noption(USE_GPU "gpu" ON)\n'
        "add_subdirectory(ggml)\n"
        'set(DEV "TBB" CACHE STRING "TBB or CUDA")\n'
        "set_property(CACHE DEV PROPERTY STRINGS TBB CUDA)\n", encoding="utf-8")
    (tmp_path / "ggml" / "CMakeLists.txt").write_text(
        'option(GGML_CUDA_F16 "half" OFF)\noption(GGML_CUDA "CUDA backend" OFF)\n'
        'option(GGML_CPU "cpu" ON)\n', encoding="utf-8")
    assert cmake_switch_candidates(tmp_path, "CMakeLists.txt") == [
        ("DEV", "CUDA", "CMakeLists.txt:7"), ("GGML_CUDA", "ON", "ggml/CMakeLists.txt:2")]
