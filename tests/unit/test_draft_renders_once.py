"""`recipe init` builds its draft as a typed object and renders TOML once (issue 26 item 3):
the introspection and planning rounds read the draft as a `Recipe` made from its data
(`draft.to_recipe`), never from rendered text parsed back."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.recipes.load import parse_recipe

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
_MARK = "# Drafted by `flashbuild recipe init`"


def _counting(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[str]]:
    """The drafts `render` was given, and every draft text `tomllib.loads` was asked to read."""
    import flashbuild.scanning.draft as draft
    from flashbuild.pipeline import introspect, recipe_init
    from flashbuild.source.treemodel import Introspection

    rendered: list[Any] = []
    parsed: list[str] = []
    render, loads = draft.render, tomllib.loads

    def counted_render(d: Any) -> str:
        rendered.append(d)
        return render(d)

    def counted_loads(text: str, **kw: Any) -> dict[str, Any]:
        if text.startswith(_MARK):
            parsed.append(text)
        return loads(text, **kw)

    seen: list[object] = []

    def nothing(recipe: object, *_a: object, **_k: object) -> Introspection:
        seen.append(recipe)  # what introspection is given: the typed draft
        return Introspection(None, "unit test: nothing is run")

    monkeypatch.setattr(draft, "render", counted_render)
    monkeypatch.setattr(tomllib, "loads", counted_loads)
    monkeypatch.setattr(introspect, "introspect_for_draft", nothing)
    monkeypatch.setattr(recipe_init, "introspect_for_draft", nothing)
    return rendered, parsed


@pytest.mark.parametrize(("tree", "platform"), [
    (ROOT / "csrc", "windows"),
    (FIXTURES / "build" / "minikern", "linux"),
    (FIXTURES / "skbuild" / "skcuda", "linux"),
    (FIXTURES / "torchext", "linux"),
])
def test_recipe_init_renders_the_draft_once(tree: Path, platform: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / tree.name
    shutil.copytree(tree, copy)
    rendered, parsed = _counting(monkeypatch)
    out = tmp_path / "r.toml"
    res = CliRunner().invoke(app, ["recipe", "init", "--draft", "--source", str(copy),
                                   "--platform", platform, "--arch", "sm120", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert len(rendered) == 1, f"render ran {len(rendered)} times"
    assert parsed == [], f"the draft's TOML was parsed back {len(parsed)} times"
    # The typed draft and its TOML say the same recipe (render and draft_data in step).
    from flashbuild.recipes.load import recipe_from_data
    from flashbuild.scanning.draft import draft_data, render

    text = out.read_text(encoding="utf-8")
    assert render(rendered[0]) == text
    assert tomllib.loads(text) == draft_data(rendered[0])
    assert recipe_from_data(draft_data(rendered[0]), out) == parse_recipe(text, out)
