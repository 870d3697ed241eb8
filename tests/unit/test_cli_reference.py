from __future__ import annotations

from flashbuild import clidoc
from tests.conftest import ROOT


def test_readme_command_reference_matches_the_app() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    expected = clidoc.splice(readme, clidoc.render())
    assert readme == expected, (
        "README's command reference is stale: run `python -m flashbuild.clidoc --write README.md`"
    )


def test_every_command_is_documented() -> None:
    from typer.main import get_command

    from flashbuild.cli import app

    root = get_command(app)
    reference = clidoc.render()
    for name in root.commands:  # type: ignore[attr-defined]
        assert f"`flashbuild {name}" in reference
