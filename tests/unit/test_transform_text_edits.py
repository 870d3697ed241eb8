"""`macro-edit`, `insert-block`, `replace-block`, `replace-file`, and `exclude-sources`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from flashbuild.errors import PatchError
from flashbuild.patching.transforms import registry
from flashbuild.patching.transforms.base import TransformContext, TransformResult
from flashbuild.recipes.transforms import (
    ExcludeSourcesParams,
    InsertBlockParams,
    MacroEditParams,
    ReplaceBlockParams,
    ReplaceFileParams,
)
from tests.unit.transform_tree import DictTree

if TYPE_CHECKING:
    from pathlib import Path

CTX = TransformContext(platform="linux", archs=("sm_120",))
GATE = ("#if __CUDA_ARCH__ == 1000\n#define IS_SM100 1\n#endif\n"
        "#define FK_SM100 (__CUDA_ARCH__ == 1000)\n"
        "// __CUDA_ARCH__ == 1000 in a comment\n"
        "int x = __CUDA_ARCH__ == 1000;\n"
        "#if __CUDA_ARCH__ == 900\n#elif __CUDA_ARCH__ == 1000\n#else\n#error unsupported\n"
        "#endif\n")


def _apply(name: str, tree: DictTree, params: object) -> TransformResult:
    return registry()[name].apply(tree, params, CTX)


def test_macro_edit_only_touches_preprocessor_conditions() -> None:
    params = MacroEditParams(files=("gate.h",), find="__CUDA_ARCH__ == 1000",
                             replace="(__CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1200)",
                             expect=3)
    tree = DictTree({"gate.h": GATE})
    result = _apply("macro-edit", tree, params)
    assert result.changes["gate.h"] == GATE.replace(
        "#if __CUDA_ARCH__ == 1000", "#if (__CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1200)"
    ).replace("(__CUDA_ARCH__ == 1000)\n", "((__CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1200))\n"
    ).replace("#elif __CUDA_ARCH__ == 1000",
              "#elif (__CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1200)")
    again = _apply("macro-edit", tree.apply(result.changes), params)
    assert again.changes == {} and {s.action for s in again.sites} == {"already"}


def test_macro_edit_expect_mismatch() -> None:
    params = MacroEditParams(files=("gate.h",), find="__CUDA_ARCH__ == 1000", replace="FK_ARCH_OK",
                             expect=2)
    with pytest.raises(PatchError, match=r"expected 2 preprocessor matches in gate\.h, found 3"):
        _apply("macro-edit", DictTree({"gate.h": GATE}), params)


def test_macro_edit_keeps_crlf() -> None:
    tree = DictTree({"g.h": GATE.replace("\n", "\r\n")})
    params = MacroEditParams(files=("g.h",), find="== 900", replace="== 900 || X", expect=1)
    out = _apply("macro-edit", tree, params).changes["g.h"]
    assert "#if __CUDA_ARCH__ == 900 || X\r\n" in out and out.count("\n") == out.count("\r\n")


TRAITS = "struct Sm90 {};\r\n// traits end\r\nint after;\r\n"


def test_insert_block_after_anchor_keeps_crlf_and_is_idempotent() -> None:
    params = InsertBlockParams(file="t.h", anchor="// traits end",
                               block="struct Sm120 {\n  static constexpr int smem = 101376;\n};")
    tree = DictTree({"t.h": TRAITS})
    out = _apply("insert-block", tree, params).changes["t.h"]
    assert out == ("struct Sm90 {};\r\n// traits end\r\nstruct Sm120 {\r\n"
                   "  static constexpr int smem = 101376;\r\n};\r\nint after;\r\n")
    again = _apply("insert-block", tree.apply({"t.h": out}), params)
    assert again.changes == {} and [s.action for s in again.sites] == ["already"]


def test_insert_block_regex_anchor_and_missing_anchor() -> None:
    tree = DictTree({"t.h": TRAITS})
    params = InsertBlockParams(file="t.h", anchor=r"struct Sm\d+ \{\};", anchor_regex=True,
                               where="before", block="// new")
    assert _apply("insert-block", tree, params).changes["t.h"].startswith("// new\r\nstruct")
    with pytest.raises(PatchError, match=r"expected 1 anchor lines in t\.h, found 0"):
        _apply("insert-block", tree, InsertBlockParams(file="t.h", anchor="nope", block="x"))


def test_replace_block_region(tmp_path: Path) -> None:
    block = tmp_path / "block.h"
    block.write_text("#error \"add your arch\"\n")
    text = "a\n#if X\nold\n#endif\nb\n"
    params = ReplaceBlockParams(file="f.h", anchor="#if X", end_anchor="#endif",
                                block_file=str(block))
    tree = DictTree({"f.h": text})
    out = _apply("replace-block", tree, params).changes["f.h"]
    assert out == "a\n#error \"add your arch\"\nb\n"
    again = _apply("replace-block", tree.apply({"f.h": out}), params)
    assert again.changes == {} and [s.action for s in again.sites] == ["already"]


def test_replace_file(tmp_path: Path) -> None:
    new = tmp_path / "new.cpp"
    new.write_bytes(b"int v = 2;\r\n")
    tree = DictTree({"v.cpp": "int v = 1;\n"})
    params = ReplaceFileParams(path="v.cpp", from_file=str(new))
    assert _apply("replace-file", tree, params).changes == {"v.cpp": "int v = 2;\r\n"}
    assert _apply("replace-file", tree.apply({"v.cpp": "int v = 2;\r\n"}), params).changes == {}


CMAKE = ("add_library(fk SHARED\n  kernels/norm.cu\n  ${CMAKE_CURRENT_SOURCE_DIR}/sm90/copy.cu\n"
         "  bindings.cpp)\n")
SETUP = ("from setuptools import setup\nsetup(\n    ext_modules=[Ext(\n        'fk',\n"
         "        sources=[\n            'kernels/norm.cu',\n            'sm90/copy.cu',\n"
         "        ],\n    )],\n)\n")


def test_exclude_sources_edits_lists_and_reports_excludes() -> None:
    tree = DictTree({"CMakeLists.txt": CMAKE, "setup.py": SETUP, "sm90/copy.cu": "",
                     "kernels/norm.cu": "", "bindings.cpp": ""})
    params = ExcludeSourcesParams(globs=("sm90/**",), cmake_lists=("CMakeLists.txt",),
                                  setup_py=("setup.py",), expect=1)
    result = _apply("exclude-sources", tree, params)
    assert result.build_excludes == ["sm90/copy.cu"]
    assert result.changes["CMakeLists.txt"] == CMAKE.replace(
        "  ${CMAKE", "  # flashbuild: excluded: ${CMAKE")
    assert result.changes["setup.py"] == SETUP.replace(
        "            'sm90", "            # flashbuild: excluded: 'sm90")
    again = _apply("exclude-sources", tree.apply(result.changes), params)
    assert again.changes == {} and again.build_excludes == ["sm90/copy.cu"]


def test_exclude_sources_refuses_shared_lines() -> None:
    tree = DictTree({"CMakeLists.txt": "add_library(fk sm90/copy.cu a.cu)\n", "sm90/copy.cu": ""})
    with pytest.raises(PatchError, match="cannot be commented out"):
        _apply("exclude-sources", tree, ExcludeSourcesParams(
            globs=("sm90/**",), cmake_lists=("CMakeLists.txt",)))
