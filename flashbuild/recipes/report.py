"""`flashbuild recipe list | show | check`: the stage functions and their rendering."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from flashbuild import buildsystems
from flashbuild.console import Column, ui
from flashbuild.errors import RecipeError
from flashbuild.recipes.load import (
    bundled_recipes,
    load_recipe,
    parse_recipe,
    read_recipe_text,
    transform_registry,
)

if TYPE_CHECKING:
    from pathlib import Path

    from flashbuild.recipes.model import Recipe, When


def _when_text(when: When) -> str:
    if when.always:
        return "always"
    parts = [f"{f.name}={','.join(v) if isinstance(v, tuple) else v}"
             for f in dataclasses.fields(when) if (v := getattr(when, f.name))]
    return " ".join(parts)


def build_lines(recipe: Recipe) -> list[str]:
    """The `[build]`, `[[build.env]]`, `[[artifact]]` and `[install]` tables as lines."""
    build = recipe.build
    lines = [f"  build: backend {build.backend}" + (
        f", CMakeLists.txt in {build.cmake_source}"
        if buildsystems.get(build.backend).compiles_cmake_targets else "")]
    if build.targets:
        lines.append("  build targets: " + ", ".join(build.targets))
    for opt in build.options:
        settings = [*(f"-D{k}={v}" for k, v in opt.define.items()), *opt.args]
        if settings:
            lines.append(f"  cmake options ({_when_text(opt.when)}): {' '.join(settings)}")
    for env in build.env:
        if env.set:
            values = " ".join(f"{k}={v}" for k, v in env.set.items())
            lines.append(f"  build env ({_when_text(env.when)}): {values}")
    for art in recipe.artifact:
        made_by = f", CMake target {art.target}" if art.target else ""
        only = "" if art.when.always else f", only when {_when_text(art.when)}"
        lines.append(f"  artifact {art.name} ({art.kind}{made_by}{only})")
    if recipe.install is not None:
        lines.append(f"  install: {recipe.install.describe()}")
    return lines


def recipe_json(recipe: Recipe) -> dict[str, Any]:
    data = dataclasses.asdict(recipe)
    data["file"] = str(recipe.file) if recipe.file else None
    return data


def list_recipes(*, as_json: bool) -> int:
    rows = []
    for path in bundled_recipes():
        recipe = load_recipe(path)
        rows.append({"name": recipe.name, "description": recipe.recipe.description,
                     "steps": len(recipe.patch), "file": str(path)})
    if as_json:
        ui.emit_json({"ok": True, "recipes": rows})
        return 0
    ui.table("bundled recipes",
             [Column("name", key=True), Column("description"), Column("steps"),
              Column("file", key=True)],
             [[str(row[c]) for c in ("name", "description", "steps", "file")] for row in rows])
    return 0


def show_recipe(name: str, *, as_json: bool) -> int:
    recipe = load_recipe(name)
    if as_json:
        ui.emit_json({"ok": True, "recipe": recipe_json(recipe)})
        return 0
    ui.step(f"recipe [bold]{escape(recipe.name)}[/] v{escape(recipe.recipe.version)}: "
            f"{escape(recipe.recipe.description)}")
    ui.literal(f"  file: {recipe.file}\n  source: {recipe.source_root()}")
    ui.table("patch steps",
             [Column("id", key=True), Column("kind"), Column("what", key=True), Column("when")],
             [[step.id, step.kind, step.diff or step.transform or "", _when_text(step.when)]
              for step in recipe.patch])
    for line in build_lines(recipe):
        ui.literal(line)
    ui.info("  built-in transforms: " + ", ".join(sorted(transform_registry())))
    return 0


def check_recipe(file: Path, *, as_json: bool) -> int:
    """Validate a recipe file: the model, the diff files it names, and its source tree."""
    recipe = parse_recipe(read_recipe_text(file), file)
    problems = [f"step `{s.id}`: the diff {recipe.diff_path(s)} does not exist"
                for s in recipe.patch if s.diff is not None and not _is(recipe.diff_path(s))]
    warnings = []
    if not _is(recipe.source_root(), folder=True):
        warnings.append(f"the source tree {recipe.source_root()} does not exist "
                        "(pass --source when patching)")
    if problems:
        raise RecipeError(f"the recipe {file} names missing files",
                          evidence="; ".join(problems),
                          fix="paths of diffs are relative to the recipe file")
    if as_json:
        ui.emit_json({"ok": True, "recipe": recipe.name, "steps": len(recipe.patch),
                      "warnings": warnings})
        return 0
    for warning in warnings:
        ui.warn(escape(warning))
    ui.step(f"{escape(str(file))}: recipe `{escape(recipe.name)}` is valid "
            f"({len(recipe.patch)} patch step(s))")
    return 0


def _is(path: Path, *, folder: bool = False) -> bool:
    """Whether `path` is a file (or folder); a name the OS refuses (too long) is neither."""
    try:
        return path.is_dir() if folder else path.is_file()
    except OSError:
        return False
