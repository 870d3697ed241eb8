"""Plan a recipe's patch steps in memory: what each step would change and how many sites it
finds, with nothing written. `recipe init` uses it (through the caller: scanning never imports
patching) to record each drafted step's exact `expect` count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashbuild.patching.transforms import registry
from flashbuild.patching.transforms.base import TransformContext
from flashbuild.patching.tree import Tree

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from flashbuild.recipes.model import Recipe


def plan_steps(recipe: Recipe, root: Path, platform: str, archs: tuple[str, ...],
               ) -> Iterator[tuple[dict[str, str], int]]:
    """Per patch step in order: (path → new text, sites it edits or finds already handled).
    Each step sees the edits of the ones before it. A step the transform refuses raises its
    PatchError or TreeError when its turn comes, so the caller knows which step it was."""
    tree = Tree(root)
    sources = sorted({p for g in recipe.source.sources for p in tree.glob(g)})
    ctx = TransformContext(platform=platform, archs=archs, sources=tuple(sources))
    reg = registry()
    for step in recipe.patch:
        assert step.transform is not None
        result = reg[step.transform].apply(tree, step.params, ctx)
        for rel, new in result.changes.items():
            tree.plan(rel, new.encode("utf-8"))
        counted = [s for s in result.sites if s.action in ("edit", "already")]
        yield dict(result.changes), len(counted)
