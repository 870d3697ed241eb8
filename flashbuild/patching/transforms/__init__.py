"""Built-in transforms, by name. See `base.py` for the contract."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flashbuild.patching.transforms.base import TransformDef

REGISTRY: dict[str, TransformDef] = {}

#: Modules that define (and register) the built-in transforms. They import this package for
#: `register`, so they are imported lazily by `registry()`, not at the top of this module.
_MODULES = (
    "instantiations",
    "dynload",
    "text_edits",
    "sources",
)


def register(definition: TransformDef) -> TransformDef:
    REGISTRY[definition.name] = definition
    return definition


def registry() -> dict[str, TransformDef]:
    """Every built-in transform by name (imports the transform modules on first use)."""
    for module in _MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return REGISTRY
