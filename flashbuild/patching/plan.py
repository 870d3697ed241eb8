"""Plan a recipe's patch steps in memory: what each step would change and how many sites it
finds, with nothing written. `recipe init` uses it (through the caller: scanning never imports
patching) to record each drafted step's exact `expect` count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashbuild import buildsystems
from flashbuild.errors import PatchError, TreeError
from flashbuild.patching.transforms import registry
from flashbuild.patching.transforms.base import TransformContext
from flashbuild.patching.tree import Tree
from flashbuild.source import separable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from flashbuild.patching.transforms.base import TreeView
    from flashbuild.recipes.model import Recipe, When


def separable_compilation(recipe: Recipe, tree: TreeView, applies: Callable[[When], bool],
                          configured: str = "") -> str:
    """Why the build links device code across units ('' when it does not), for the
    transforms (TransformContext.separable): the configured build's flags when `recipe init`
    has them (`configured`), the recipe's `[build]` tables that apply, the tree's build
    files (source/separable.py)."""
    def read(path: str) -> str | None:
        try:
            return tree.read(path) if tree.exists(path) else None
        except (PatchError, TreeError):
            return None

    settings = [("recipe [[build.options]]", f"{name}={value}")
                for options in recipe.build.options if applies(options.when)
                for name, value in [*options.define.items(), *(("arg", a)
                                                               for a in options.args)]]
    settings += [("recipe [[build.env]]", f"{name}={value}")
                 for env in recipe.build.env if applies(env.when)
                 for name, value in env.set.items()]
    return configured or separable.from_settings(settings) or separable.from_tree(
        buildsystems.get(recipe.build.backend), recipe.build.cmake_source, read)


def plan_steps(recipe: Recipe, root: Path, platform: str, archs: tuple[str, ...],
               configured: str = "",
               ) -> Iterator[tuple[dict[str, str], int, tuple[str, ...]]]:
    """Per patch step in order: (path → new text, sites it edits, finds already handled or
    refuses, one line per site it refuses: `path:line: why`). Each step sees the edits of the
    ones before it. A step the transform refuses as a whole raises its PatchError or
    TreeError when its turn comes, so the caller knows which step it was. `configured`: why
    the configured build links device code across units, when the caller read it from the
    build's flags. Every `[build]` table counts here (no WhenContext): a draft is planned for
    one target, and keeping more is the safe side."""
    tree = Tree(root)
    sources = sorted({p for g in recipe.source.sources for p in tree.glob(g)})
    ctx = TransformContext(platform=platform, archs=archs, sources=tuple(sources),
                           separable=separable_compilation(recipe, tree, lambda _w: True,
                                                           configured))
    reg = registry()
    for step in recipe.patch:
        assert step.transform is not None
        result = reg[step.transform].apply(tree, step.params, ctx)
        for rel, new in result.changes.items():
            tree.plan(rel, new.encode("utf-8"))
        counted = [s for s in result.sites if s.action in ("edit", "already", "refused")]
        yield dict(result.changes), len(counted), tuple(
            f"{s.path}:{s.line}: {s.note}" for s in result.sites if s.action == "refused")
