"""TOML → the recipe model, with errors that point at the file and line.

The conversion is generic: `convert(cls, data)` walks a dataclass's fields and type hints, so the
recipe classes and every transform's params dataclass (from `recipes/transforms.py`) load the same
way. Raw dicts never leave this module. Unknown keys are errors with a "did you mean" (difflib);
wrong types name the field, what was expected and what was found.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

from flashbuild.errors import RecipeError, TreeError
from flashbuild.platforms.files import read_regular
from flashbuild.recipes.model import PatchStep, Recipe
from flashbuild.recipes.transforms import SPECS, TransformSpec, path_param_problem

T = TypeVar("T")

#: A location inside the TOML document: keys and array indexes from the root.
KeyPath = tuple[str | int, ...]


def transform_registry() -> dict[str, TransformSpec]:
    """Every transform a recipe may name (recipes/transforms.py: the built-ins, and any
    other that patching registered)."""
    return dict(SPECS)


# ---------------------------------------------------------------------------------------------
# Locating keys in the TOML text (tomllib keeps no positions).


@dataclass(frozen=True)
class _Source:
    file: Path | None
    text: str

    def where(self, path: KeyPath) -> str:
        name = str(self.file) if self.file else "<recipe>"
        line = self.line_of(path)
        return f"{name}:{line}" if line else name

    def line_of(self, path: KeyPath) -> int | None:
        """Best-effort 1-based line of the key at `path`: find the table (counting `[[x]]`
        headers for array indexes), then the last key of the path inside it."""
        lines = self.text.splitlines()
        start, end = 0, len(lines)
        header_path: list[str] = []
        found_line: int | None = None
        for depth, part in enumerate(path):
            if isinstance(part, int):
                name = ".".join(header_path)
                heads = [i for i in range(start, end)
                         if re.match(rf"^\s*\[\[\s*{re.escape(name)}\s*\]\]", lines[i])]
                if part < len(heads):
                    start = heads[part]
                    found_line = start + 1
                    nxt = [i for i in range(start + 1, end)
                           if re.match(r"^\s*\[\[?\s*[\w.-]+\s*\]\]?", lines[i])
                           and not re.match(rf"^\s*\[\[?\s*{re.escape(name)}\.", lines[i])]
                    end = nxt[0] if nxt else end
                continue
            header_path.append(part)
            name = ".".join(header_path)
            head = next((i for i in range(start, end)
                         if re.match(rf"^\s*\[\[?\s*{re.escape(name)}\s*\]\]?", lines[i])),
                        None)
            if head is not None:
                start, found_line = head, head + 1
                continue
            key = next((i for i in range(start, end)
                        if re.search(rf"(^|[{{,\s]){re.escape(part)}\s*=", lines[i])), None)
            if key is not None:
                found_line = key + 1
                if depth == len(path) - 1:
                    break
                start = key
        return found_line


# ---------------------------------------------------------------------------------------------
# Generic conversion.


class _Convert:
    def __init__(self, src: _Source) -> None:
        self.src = src

    def error(self, path: KeyPath, what: str, evidence: str = "", fix: str = "") -> RecipeError:
        return RecipeError(f"{what} ({self.src.where(path)})", evidence=evidence,
                           fix=fix or "correct the recipe; `flashbuild recipe check FILE` "
                           "validates it", details={"where": self.src.where(path),
                                                    "key": _dotted(path)})

    def dataclass(self, cls: type[T], data: object, path: KeyPath) -> T:
        if not isinstance(data, Mapping):
            raise self.error(path, f"`{_dotted(path) or 'recipe'}` must be a table, got "
                             f"{_describe(data)}")
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                  if f.metadata.get("toml", True)}
        for key in data:
            if key not in fields:
                # Only a key the table lacks: `kind` beside an `id` is no misspelt `id`.
                free = [name for name in fields if name not in data]
                close = difflib.get_close_matches(key, free, n=1, cutoff=0.6)
                hint = f"did you mean `{close[0]}`?" if close else ""  # the `what` names the key
                raise self.error(
                    (*path, key), f"unknown key `{key}` in {_table(path)}",
                    evidence=" ".join(filter(None, [hint, "known keys: " +
                                                    ", ".join(sorted(fields))])),
                    fix=f"rename it to `{close[0]}`" if close else "remove it")
        kwargs: dict[str, Any] = {}
        for name, f in fields.items():
            if name in data:
                if cls is PatchStep and name == "params":
                    continue
                kwargs[name] = self.value(hints[name], data[name], (*path, name))
                self.choice(f, kwargs[name], (*path, name))
            elif (f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING):
                raise self.error(path, f"{_table(path)} lacks the required key `{name}`",
                                 evidence=_doc(cls, name))
        if cls is PatchStep:
            kwargs["params"] = self.params(data, path)
        try:
            return cls(**kwargs)
        except (ValueError, TypeError) as exc:
            raise self.error(path, f"invalid {_table(path)}: {exc}") from exc

    def choice(self, f: dataclasses.Field[Any], value: object, path: KeyPath) -> None:
        """A field whose values a registry holds (`metadata={"choices": names}`, the build
        systems) takes only those."""
        if "choices" not in f.metadata:
            return
        choices = tuple(f.metadata["choices"]())
        if value not in choices:
            close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
            raise self.error(path, f"`{_dotted(path)}` must be one of "
                             f"{', '.join(repr(c) for c in choices)}, got {value!r}",
                             evidence=f"the closest valid value is {close[0]!r}"
                             if close else "")

    def params(self, data: Mapping[str, Any], path: KeyPath) -> object:
        name = data.get("transform")
        if name is None:
            if "params" in data:
                raise self.error((*path, "params"), "`params` belongs to a transform step, "
                                 "and this step has no `transform`")
            return None
        registry = transform_registry()
        if name not in registry:
            close = difflib.get_close_matches(str(name), list(registry), n=1)
            raise self.error(
                (*path, "transform"), f"unknown transform `{name}`",
                evidence=(f"did you mean `{close[0]}`? " if close else "") +
                "built-in transforms: " + (", ".join(sorted(registry)) or "none"),
                fix="use one of the built-in transforms (`flashbuild recipe show` lists them)")
        params = data.get("params", {})
        if isinstance(params, Mapping):
            for key, value in params.items():
                problem = path_param_problem(str(key), value)
                if problem is not None:
                    index, why = problem
                    where: KeyPath = (*path, "params", key)
                    label = f"`{key}`" if index is None else f"`{key}[{index}]`"
                    raise self.error(where, f"invalid {_table(path)}: {label} {why}")
        return self.dataclass(registry[name].params, params, (*path, "params"))

    def value(self, hint: Any, data: object, path: KeyPath) -> Any:  # noqa: PLR0911, PLR0912
        origin = get_origin(hint)
        args = get_args(hint)
        if hint is Any or hint is object:
            return data
        if origin in (types.UnionType, typing.Union):
            if data is None and type(None) in args:
                return None
            rest = [a for a in args if a is not type(None)]
            if len(rest) == 1:
                return self.value(rest[0], data, path)
            for option in rest:
                try:
                    return self.value(option, data, path)
                except RecipeError:
                    continue
            raise self.expected(path, " or ".join(_type_name(a) for a in rest), data)
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            return self.dataclass(hint, data, path)
        if origin is Literal:
            if data not in args:
                close = difflib.get_close_matches(str(data), [str(a) for a in args], n=1)
                raise self.error(path, f"`{_dotted(path)}` must be one of "
                                 f"{', '.join(repr(a) for a in args)}, got {data!r}",
                                 evidence=f"the closest valid value is {close[0]!r}"
                                 if close else "")
            return data
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            try:
                return hint(data)
            except ValueError:
                raise self.error(path, f"`{_dotted(path)}` must be one of "
                                 f"{', '.join(repr(m.value) for m in hint)}, "
                                 f"got {data!r}") from None
        if origin is tuple or origin is list:
            item = args[0]
            # A single scalar where a list of scalars is expected is accepted:
            # `platform = "windows"`. Tables must be written as arrays.
            if not isinstance(data, list) and not (_scalar(item) and _scalar(type(data))):
                raise self.expected(path, _type_name(hint), data)
            items = data if isinstance(data, list) else [data]
            converted = [self.value(item, v, (*path, i)) for i, v in enumerate(items)]
            return tuple(converted) if origin is tuple else converted
        if origin in (dict, Mapping):
            if not isinstance(data, Mapping):
                raise self.expected(path, "a table", data)
            return {str(k): self.value(args[1], v, (*path, str(k))) for k, v in data.items()}
        if hint is bool:
            if not isinstance(data, bool):
                raise self.expected(path, "true or false", data)
            return data
        if hint is int:
            if isinstance(data, bool) or not isinstance(data, int):
                raise self.expected(path, "an integer", data)
            return data
        if hint is float:
            if isinstance(data, bool) or not isinstance(data, int | float):
                raise self.expected(path, "a number", data)
            return float(data)
        if hint is str:
            if not isinstance(data, str):
                raise self.expected(path, "a string", data)
            return data
        if hint is Path:
            if not isinstance(data, str):
                raise self.expected(path, "a path string", data)
            return Path(data)
        raise self.error(path, f"the recipe loader cannot read type {hint!r}")  # a model bug

    def expected(self, path: KeyPath, what: str, data: object) -> RecipeError:
        return self.error(path, f"`{_dotted(path)}` must be {what}, got {_describe(data)}")


def _scalar(hint: Any) -> bool:
    return hint in (str, int, float) or get_origin(hint) is Literal


def _dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _table(path: KeyPath) -> str:
    if not path:
        return "the recipe"
    if isinstance(path[-1], int):
        return f"[[{_dotted(path[:-1])}]] #{path[-1] + 1}"
    return f"[{_dotted(path)}]"


def _describe(data: object) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
             list: "an array", dict: "a table"}
    return f"{names.get(type(data), type(data).__name__)} ({data!r:.60})"


def _type_name(hint: Any) -> str:
    origin = get_origin(hint)
    if origin in (tuple, list):
        return f"an array of {_type_name(get_args(hint)[0])}"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(hint))
    return {str: "a string", int: "an integer", bool: "true or false", float: "a number"}.get(
        hint, getattr(hint, "__name__", str(hint)))


def _doc(cls: type, name: str) -> str:
    from flashbuild.recipes.schema import field_docs  # noqa: PLC0415  # cycle

    return field_docs(cls).get(name, "")


# ---------------------------------------------------------------------------------------------
# Public API.


def parse_recipe(text: str, file: Path | None = None) -> Recipe:
    """Validate TOML text into a `Recipe` (`file` is where it came from, for paths/errors)."""
    src = _Source(file, text)
    try:
        data = tomllib.loads(text)
    except RecursionError as exc:  # tomllib recurses once per nested array or table
        where = str(file or "<recipe>")
        raise RecipeError(f"the recipe is nested too deeply to read ({where})",
                          evidence="arrays or inline tables nested thousands of levels deep",
                          fix="a recipe nests a few levels; remove the runaway brackets",
                          details={"where": where}) from exc
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        where = f"{file or '<recipe>'}:{m[1]}" if m else str(file or "<recipe>")
        raise RecipeError(f"the recipe is not valid TOML ({where})", evidence=str(exc),
                          fix="fix the TOML syntax at that line",
                          details={"where": where}) from exc
    return _validated(src, data, file)


def recipe_from_data(data: Mapping[str, Any], file: Path | None = None) -> Recipe:
    """Validate a recipe's data (what TOML loads to: tables, arrays, strings, integers) into a
    `Recipe`, with no text to parse: `recipe init` builds its draft in memory and checks each
    state of it this way, rendering TOML once at the end (issue 26 item 3). `file`: where the
    recipe will be written, for its relative paths."""
    return _validated(_Source(file, ""), data, file)


def _validated(src: _Source, data: object, file: Path | None) -> Recipe:
    recipe = _Convert(src).dataclass(Recipe, data, ())
    return dataclasses.replace(recipe, file=file.resolve() if file else None)


def load_recipe(name_or_path: str | Path) -> Recipe:
    """A recipe by bundled name (`csrc`) or by TOML file path."""
    path = Path(name_or_path)
    try:
        exists = path.exists()
    except (OSError, ValueError):  # a name the OS refuses (too long, a NUL)
        exists = False
    if path.suffix != ".toml" or not exists:
        bundled = {p.stem: p for p in bundled_recipes()}
        if str(name_or_path) in bundled:
            path = bundled[str(name_or_path)]
        elif not exists:
            close = difflib.get_close_matches(str(name_or_path), list(bundled), n=1)
            raise RecipeError(
                f"no recipe `{name_or_path}`",
                evidence=(f"did you mean `{close[0]}`? " if close else "") +
                f"bundled recipes: {', '.join(sorted(bundled)) or 'none'}",
                fix="name a bundled recipe or the path of a recipe .toml file")
    return parse_recipe(read_recipe_text(path), path)


def read_recipe_text(path: Path) -> str:
    """A recipe file's text, read with a bound: a FIFO, a device (`/dev/zero` read 7.4 GB)
    or an oversized file is exit 4 with one paragraph, never a hang (issue 27)."""
    try:
        return read_regular(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"cannot read the recipe {path}",
                          evidence=exc.strerror or str(exc) if isinstance(exc, OSError)
                          else str(exc),
                          fix="name a recipe file saved as UTF-8 TOML") from exc


#: Where a regular wheel carries the repo's `recipes/`, `patches/` and `csrc/` inside the
#: package (setup.py's build_py copies them; the recipes' `../csrc` and `../patches/x.patch`
#: paths resolve there as in the repo).
BUNDLED_DIR = "_bundled"


def recipes_dir() -> Path:
    """The bundled recipes: `flashbuild/_bundled/recipes` in a regular wheel install, else the
    repo's top-level `recipes/` next to the package (the editable install)."""
    package = Path(__file__).resolve().parent.parent
    candidates = (package / BUNDLED_DIR / "recipes", package.parent / "recipes")
    for here in candidates:
        if here.is_dir():
            return here
    raise RecipeError(
        "the bundled recipes folder is missing",
        evidence="looked for " + " and ".join(str(c) for c in candidates),
        fix="reinstall flashbuild (`pip install flashbuild`, or `pip install -e .` from its "
        "source checkout), or pass `--recipe FILE.toml`")


def bundled_recipes() -> list[Path]:
    """Every bundled recipe file, sorted by name."""
    return sorted(recipes_dir().glob("*.toml"))


def bundled_for(tree: Path) -> Recipe | None:
    """The bundled recipe whose `[identity]` matches the tree by content, if one does."""
    for path in bundled_recipes():
        bundled = load_recipe(path)
        if bundled.matches(tree):
            return bundled
    return None


def source_tree(recipe: Recipe, override: Path | None = None) -> Path:
    """The tree a recipe applies to (`--source`, else its `[source] path`), which must be a
    folder: a recipe whose tree is not there (a bundled recipe for an upstream tree, run
    without `--source`) is told apart from a tree of the wrong shape. Exit 10, as the patch
    engine's own check of the tree has it."""
    tree = recipe.source_root(override)
    try:
        exists = tree.is_dir()
    except OSError:
        exists = False
    if exists:
        return tree
    origin = ("--source" if override is not None else
              f"the recipe's [source] path `{recipe.source.path}` (next to {recipe.file})"
              if recipe.file else f"the recipe's [source] path `{recipe.source.path}`")
    raise TreeError(
        f"the source tree {tree} does not exist",
        evidence=f"it comes from {origin}",
        fix=f"pass the folder of your checkout of the tree: `--source path/to/{tree.name}`"
        if override is None else "pass an existing folder with --source")
