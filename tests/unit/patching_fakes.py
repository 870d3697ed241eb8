"""A tiny transform for the patch-engine tests: appends text to one file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from flashbuild.patching.transforms import REGISTRY, register, registry
from flashbuild.patching.transforms.base import (
    Site,
    TransformContext,
    TransformDef,
    TransformResult,
    TreeView,
)
from flashbuild.recipes.transforms import SPECS

if TYPE_CHECKING:
    from collections.abc import Iterator

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "patching"


@dataclass(frozen=True, kw_only=True)
class AppendParams:
    path: str
    """File to append to."""
    text: str
    """Text appended (once: a file that already ends with it is `already`)."""


def _apply(tree: TreeView, params: AppendParams, ctx: TransformContext) -> TransformResult:
    text = tree.read(params.path)
    # The contract: changes come back in the file's own line-ending style.
    add = params.text.replace("\n", "\r\n") if "\r\n" in text else params.text
    if text.endswith(add):
        return TransformResult(sites=[Site(params.path, 1, "append", "already")])
    return TransformResult(changes={params.path: text + add},
                           sites=[Site(params.path, text.count("\n") + 1, "append", "edit")],
                           build_excludes=["src/excluded.cpp"] if ctx.platform == "windows"
                           else [])


APPEND = TransformDef("test-append", AppendParams, _apply, "append text (tests only)")


@pytest.fixture
def fake_transform() -> Iterator[TransformDef]:
    registry()
    register(APPEND)  # the code in patching, the name and params for recipes
    try:
        yield APPEND
    finally:
        REGISTRY.pop(APPEND.name, None)
        SPECS.pop(APPEND.name, None)
