"""`dynamic-loading`: portable (compat header + exports) and stub modes."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild.errors import PatchError
from flashbuild.patching.transforms import registry
from flashbuild.patching.transforms.base import TransformContext, TransformResult
from flashbuild.patching.transforms.dynload import compat_header_text
from flashbuild.recipes.transforms import DynamicLoadingParams
from tests.unit.transform_tree import DictTree

BASE = Path(__file__).resolve().parent.parent / "fixtures" / "transforms" / "dynload"
CTX = TransformContext(platform="windows", archs=("sm_120",))
ROOT = Path(__file__).resolve().parents[2]


def _run(tree: DictTree, **kw: object) -> TransformResult:
    params = DynamicLoadingParams(**kw)  # type: ignore[arg-type]
    return registry()["dynamic-loading"].apply(tree, params, CTX)


def _portable(tree: DictTree) -> TransformResult:
    return _run(tree, files=("attention/dispatch.cpp",), plugin_files=("attention/plugin.cpp",),
                expect=4)


def test_portable_golden() -> None:
    result = _portable(DictTree.from_dir(BASE / "input"))
    golden = {f"attention/{p.name}": p.read_text() for p in (BASE / "portable").iterdir()}
    assert {k: v for k, v in result.changes.items() if k != "attention/fb_dlfcn_compat.h"} \
        == golden
    assert result.changes["attention/fb_dlfcn_compat.h"] == compat_header_text()


def test_shipped_header_is_the_package_file() -> None:
    shipped = ROOT / "flashbuild" / "installing" / "resources" / "fb_dlfcn_compat.h"
    assert compat_header_text() == shipped.read_text()
    for needle in ("LoadLibraryExW", "LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR", "MultiByteToWideChar",
                   "FARPROC", "FormatMessageW", "FreeLibrary", "#include <dlfcn.h>"):
        assert needle in compat_header_text()


def test_portable_is_idempotent() -> None:
    tree = DictTree.from_dir(BASE / "input")
    again = _portable(tree.apply(_portable(tree).changes))
    assert again.changes == {}
    assert {s.action for s in again.sites} == {"already"}


def test_portable_expect_mismatch() -> None:
    with pytest.raises(PatchError, match="expected 9 dynamic-loading sites"):
        _run(DictTree.from_dir(BASE / "input"), files=("attention/dispatch.cpp",), expect=9)


def test_stub_golden_and_idempotent() -> None:
    tree = DictTree.from_dir(BASE / "input")
    result = _run(tree, mode="stub", header="attention/dispatch.h",
                  replace="attention/dispatch.cpp", expect=5)
    assert result.changes == {"attention/dispatch.cpp": (BASE / "stub.cpp").read_text()}
    again = _run(tree.apply(result.changes), mode="stub", header="attention/dispatch.h",
                 replace="attention/dispatch.cpp", expect=5)
    assert again.changes == {}


def test_stub_names_value_or_fails() -> None:
    tree = DictTree({"d.h": "enum class Status { ok, unavailable };\nStatus probe(int);\n",
                     "d.cpp": "// real\n"})
    with pytest.raises(PatchError, match="no \"not available\" value is known for probe"):
        _run(tree, mode="stub", header="d.h", replace="d.cpp")
    out = _run(tree, mode="stub", header="d.h", replace="d.cpp",
               returns={"probe": "Status::unavailable"}).changes["d.cpp"]
    assert out.endswith('#include "d.h"\n\nStatus probe(int) { return Status::unavailable; }\n')


def test_stub_refuses_functions_the_header_lacks() -> None:
    tree = DictTree({"d.h": "bool ready();\n", "d.cpp": ""})
    with pytest.raises(PatchError, match="no longer declares gone"):
        _run(tree, mode="stub", header="d.h", replace="d.cpp", functions=("ready", "gone"))
