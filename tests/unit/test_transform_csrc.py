"""Transforms on the bundled csrc tree: the exact sites per file (a change upstream — here, in
csrc — must show up as a failing count, not as a silent no-op)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from flashbuild.patching.transforms import registry
from flashbuild.patching.transforms.base import TransformContext
from flashbuild.recipes.transforms import DynamicLoadingParams, ExplicitInstantiationsParams
from tests.unit.transform_tree import DictTree

CSRC = Path(__file__).resolve().parents[2] / "csrc"
pytestmark = pytest.mark.skipif(not (CSRC / "kernels").is_dir(), reason="csrc/ not present")

SITES = {
    "arch/softmax_tiled.cu": 3, "kernels/activation.cu": 12, "kernels/elementwise.cu": 10,
    "kernels/fusion.cu": 4, "kernels/norm.cu": 24, "kernels/quantize.cu": 6,
    "kernels/rope.cu": 3,
}


def _tree() -> tuple[DictTree, TransformContext]:
    tree = DictTree.from_dir(CSRC)
    sources = tuple(p for p in tree.files if p.endswith((".cu", ".cuh", ".cpp", ".h")))
    return tree, TransformContext(platform="windows", archs=("sm_120",), sources=sources)


def test_instantiation_sites_per_file() -> None:
    tree, ctx = _tree()
    params = ExplicitInstantiationsParams(files=("kernels/*.cu", "arch/*.cu"), expect=SITES)
    result = registry()["explicit-instantiations"].apply(tree, params, ctx)
    actions = Counter((s.kind, s.action) for s in result.sites)
    assert actions[("host-instantiation", "keep")] == 3      # launch_rms_norm, used by fusion.cu
    assert actions[("kernel-instantiation", "already")] == 3  # rope.cu is pre-guarded
    again = registry()["explicit-instantiations"].apply(tree.apply(result.changes), params, ctx)
    assert again.changes == {}


def test_dispatcher_and_plugin_sites() -> None:
    tree, ctx = _tree()
    params = DynamicLoadingParams(files=("attention/dispatcher.cpp",),
                                  plugin_files=("attention/plugin.cu",), expect=5)
    result = registry()["dynamic-loading"].apply(tree, params, ctx)
    assert "attention/fb_dlfcn_compat.h" in result.changes
