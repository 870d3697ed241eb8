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


def test_bracketed_words_survive_the_rendered_help() -> None:
    """Help is rendered as Rich markup: a `[verify]` written plainly is taken for a style tag
    and vanishes from `--help` ("this recipe's  table"). Every bracketed word the reference
    shows must be in the terminal's help too."""
    import re

    from typer.testing import CliRunner

    from flashbuild.cli import app

    reference = clidoc.render()
    runner = CliRunner()
    sections = re.split(r"^### `flashbuild ([^`]+)`$", reference, flags=re.MULTILINE)
    checked = 0
    for name, body in zip(sections[1::2], sections[2::2], strict=True):
        words = set(re.findall(r"\[\[?[a-z_.]+\]\]?", body))
        if not words:
            continue
        shown = runner.invoke(app, [*name.split(), "--help"], terminal_width=200).output
        for word in words:
            assert word in shown, f"`flashbuild {name} --help` lost {word}"
            checked += 1
    assert checked >= 2  # [verify] (verify --recipe) and [[patch]] (recipe init) at least
