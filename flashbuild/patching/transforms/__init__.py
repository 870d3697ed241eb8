"""Built-in transforms, by name. See `base.py` for the contract."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from flashbuild.recipes import transforms as specs

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
    """Make `definition` the code behind its name. A built-in is declared with its params in
    recipes/transforms.py (the loader reads that, never this package); any other (a test's)
    is declared there now."""
    REGISTRY[definition.name] = definition
    if definition.name not in specs.SPECS:
        specs.declare(specs.TransformSpec(definition.name, definition.params,
                                          definition.summary))
    return definition


def registry() -> dict[str, TransformDef]:
    """Every built-in transform by name (imports the transform modules on first use)."""
    for module in _MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return REGISTRY
