"""Generate the recipe JSON schema from the model (fields, type hints and field docstrings).

`python -m flashbuild.recipes.schema` rewrites `schema/recipe.schema.json`; a unit test fails
when the committed file differs from what this generates, so the schema is never edited by
hand. Transform params come from `recipes/transforms.py`: a step's `params` is validated against
the params dataclass of the transform it names.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import inspect
import json
import textwrap
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from flashbuild.recipes.load import transform_registry
from flashbuild.recipes.model import PatchStep, Recipe

SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "recipe.schema.json"


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings (the string literal right after a field) of a dataclass."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, nxt in zip(body, [*body[1:], None], strict=True):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                docs[stmt.target.id] = " ".join(inspect.cleandoc(nxt.value.value).split())
    return docs


def _type_schema(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:  # noqa: PLR0911
    origin = get_origin(hint)
    args = get_args(hint)
    if hint is Any or hint is object:
        return {}
    if origin in (types.UnionType, typing.Union):
        rest = [a for a in args if a is not type(None)]
        options = [_type_schema(a, defs) for a in rest]
        return options[0] if len(options) == 1 else {"anyOf": options}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        name = hint.__name__
        if name not in defs:
            defs[name] = {}  # placeholder against recursion
            defs[name] = dataclass_schema(hint, defs)
        return {"$ref": f"#/$defs/{name}"}
    if origin is Literal:
        return {"enum": list(args)}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    if origin in (tuple, list):
        item = _type_schema(args[0], defs)
        array = {"type": "array", "items": item}
        if args[0] in (str, int, float) or get_origin(args[0]) is Literal:
            # The loader accepts a single scalar where a list of scalars is expected.
            return {"anyOf": [item, array]}
        return array
    if origin in (dict, Mapping):
        return {"type": "object", "additionalProperties": _type_schema(args[1], defs)}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "string"}
    if hint in simple:
        return {"type": simple[hint]}
    raise TypeError(f"no JSON schema for {hint!r}")


def dataclass_schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        if not f.metadata.get("toml", True):
            continue
        prop = _type_schema(hints[f.name], defs)
        if "choices" in f.metadata:
            # A name some registry holds (a build system): its names, as the loader checks.
            prop = {**prop, "enum": list(f.metadata["choices"]())}
        if docs.get(f.name):
            prop = {**prop, "description": docs[f.name]}
        if f.default is not dataclasses.MISSING and isinstance(
                f.default, str | int | float | bool | tuple) and f.default is not None:
            prop["default"] = list(f.default) if isinstance(f.default, tuple) else f.default
        props[f.name] = prop
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    out: dict[str, Any] = {"type": "object", "additionalProperties": False,
                           "properties": props}
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
        out["description"] = " ".join(inspect.cleandoc(cls.__doc__).split())
    if required:
        out["required"] = required
    return out


def generate() -> dict[str, Any]:
    """The whole schema document."""
    defs: dict[str, Any] = {}
    root = dataclass_schema(Recipe, defs)
    step = defs[PatchStep.__name__]
    conditions = []
    for name, definition in sorted(transform_registry().items()):
        params = _type_schema(definition.params, defs)
        conditions.append({
            "if": {"properties": {"transform": {"const": name}}, "required": ["transform"]},
            "then": {"properties": {"params": params}},
        })
    step["properties"]["params"] = {"type": "object",
                                    "description": step["properties"]["params"].get(
                                        "description", "")}
    step["properties"]["transform"]["enum"] = sorted(transform_registry())
    if conditions:
        step["allOf"] = conditions
    step["oneOf"] = [{"required": ["diff"]}, {"required": ["transform"]}]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://flashbuild.dev/schema/recipe.schema.json",
        "title": "flashbuild recipe",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def render() -> str:
    return json.dumps(generate(), indent=2, sort_keys=False) + "\n"


def main() -> None:
    SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_PATH.write_text(render(), encoding="utf-8")


if __name__ == "__main__":
    main()
