"""Toolchain facts live in `flashbuild/toolchain_facts.py` only: a CUDA/torch threshold, an
`_MSC_VER` bound, the DLL folders or the PyPI toolkit extras spelled again elsewhere in the
package is a second copy that drifts (issue 26: `/Zc:preprocessor` was CUDA >= 13.0 in one file
and >= 13.2 in two others). Read with `ast`, nothing imported."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest
from packaging.version import Version

from flashbuild import toolchain_facts as facts
from flashbuild.detect.compilers import cuda_accepting_msc, host_window
from flashbuild.platforms.windows import WindowsPlatform
from tests.pysource import parse

PACKAGE = Path(__file__).resolve().parents[2] / "flashbuild"
FACTS = PACKAGE / "toolchain_facts.py"
SHIM_TEMPLATE = PACKAGE / "installing" / "resources" / "loader_shim.py"

#: `1910`-style `_MSC_VER` bounds (tens from VS 2017's 1910 to 1990).
_MSC_BOUND = re.compile(r"^19[1-9]0$")
_TOOLSET = re.compile(r"^14\.4\d$")
_EXTRAS = re.compile(r"nvcc,cudart|cudart,cccl")
_DLL_LEAVES = frozenset({"x64", "x86_64"})


def _div_chain(node: ast.BinOp) -> list[str]:
    """The string parts of `root / "bin" / "x64"`, left to right."""
    parts: list[str] = []
    left: ast.expr = node
    while isinstance(left, ast.BinOp) and isinstance(left.op, ast.Div):
        if isinstance(left.right, ast.Constant) and isinstance(left.right.value, str):
            parts.insert(0, left.right.value)
        left = left.left
    return parts


def restated_facts(source: str) -> list[tuple[int, str]]:
    """(line, what) for each toolchain fact `source` spells itself."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(parse(source)):  # once per process: tests/pysource.py
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Tuple):
            values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if (len(node.elts) == 2 and len(values) == 2 and values[0] in (12, 13)
                    and isinstance(values[1], int) and 0 <= values[1] <= 9):
                found.append((line, f"CUDA release tuple {tuple(values)}"))
            pairs = set(itertools.pairwise(values))
            if "/bigobj" in values or {("bin", leaf) for leaf in _DLL_LEAVES} & pairs:
                found.append((line, f"toolchain tuple {tuple(values)}"))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            if _MSC_BOUND.match(str(node.value)):
                found.append((line, f"_MSC_VER bound {node.value}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _TOOLSET.match(node.value) or _EXTRAS.search(node.value):
                found.append((line, f"toolset or PyPI extras {node.value!r}"))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Version":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and first.value != "0":
                found.append((line, f"Version({first.value!r})"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = _div_chain(node)
            if {("bin", leaf) for leaf in _DLL_LEAVES} & set(itertools.pairwise(parts)):
                found.append((line, f"DLL folder {'/'.join(parts)}"))
    return sorted(set(found))


def test_no_module_restates_a_toolchain_fact() -> None:
    wrong = [f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
             for path in sorted(PACKAGE.rglob("*.py"))
             if path not in (FACTS, SHIM_TEMPLATE)
             for line, what in restated_facts(path.read_text(encoding="utf-8"))]
    assert wrong == [], ("read these from flashbuild/toolchain_facts.py instead:\n"
                         + "\n".join(wrong))


@pytest.mark.parametrize("source", [
    "HOST_TABLE = {(13, 0): (1920, 1950, 15)}",
    'if cuda >= Version("13.0"):\n    pass',
    'dirs = [root / "bin" / "x86_64", root / "bin"]',
    'SUBDIRS = (("bin", "x64"), ("bin",))',
    'MSVC_FLAGS = ("/Zc:preprocessor", "/Zc:__cplusplus", "/bigobj")',
    'fix = "pip install cuda-toolkit[nvcc,cudart,cccl,crt,nvvm]==13.0.2"',
    'TOOLSET = "14.44"',
])
def test_the_reader_sees_each_kind_of_restated_fact(source: str) -> None:
    assert restated_facts(source) != []


def test_the_reader_leaves_other_numbers_alone() -> None:
    assert restated_facts('PROBES = (Arch(12, 0), Arch(9, 0))\nMIN_PYTHON = (3, 11)\n'
                          'nvcc = root / "bin" / "nvcc"\nbest = Version("0")\n'
                          'for major in (13, 12):\n    pass\n'
                          'CL = ("bin", "HostX64", "x64", "cl.exe")\n') == []


def test_the_loader_shim_searches_the_same_toolkit_dll_folders() -> None:
    """The shim runs in the user's package without flashbuild, so it spells the list: equal."""
    tree = ast.parse(SHIM_TEMPLATE.read_text(encoding="utf-8"))
    spelled = next(ast.literal_eval(n.value) for n in ast.walk(tree)
                   if isinstance(n, ast.Assign)
                   and any(getattr(t, "id", "") == "_TOOLKIT_DLL_DIRS" for t in n.targets))
    assert spelled == facts.TOOLKIT_DLL_SUBDIRS


def test_the_windows_platform_and_doctor_read_the_facts() -> None:
    root = Path("C:/cuda")
    assert WindowsPlatform().toolkit_dll_dirs(root)[:2] == [root / "bin" / "x64",
                                                            root / "bin" / "x86_64"]
    window = host_window(None, Version("13.1.1"))
    assert (window.source, window.msc_end) == ("table", facts.HOST_COMPILERS[(13, 1)].msc_end)
    assert cuda_accepting_msc(1950) == "13.2"


@pytest.mark.parametrize(("cuda", "needs"), [
    (None, False), ("12.9", False), ("13.0.88", False), ("13.1", False), ("13.2.0", True),
    ("13.5", True),
])
def test_zc_preprocessor_from_the_first_cccl_that_checks(cuda: str | None, needs: bool) -> None:
    assert facts.msvc_needs_zc_preprocessor(Version(cuda) if cuda else None) is needs


@pytest.mark.parametrize(("torch", "needs"), [
    (None, False), ("2.6.0", False), ("2.7.0+cu128", True), ("2.11.0", True),
])
def test_use_cuda_from_the_first_torch_that_needs_it(torch: str | None, needs: bool) -> None:
    assert facts.msvc_needs_use_cuda(Version(torch) if torch else None) is needs


def test_pypi_requirement_names_the_nvvm_extra() -> None:
    assert facts.pypi_toolkit_requirement(("cublas",), "13.0.2") == (
        "cuda-toolkit[nvcc,cudart,cccl,crt,nvvm,cublas]==13.0.2")
