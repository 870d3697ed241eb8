"""Built-in transforms, by name. See `base.py` for the contract."""

from __future__ import annotations

from flashbuild.patching.transforms.base import TransformDef

REGISTRY: dict[str, TransformDef] = {}


def register(definition: TransformDef) -> TransformDef:
    REGISTRY[definition.name] = definition
    return definition
