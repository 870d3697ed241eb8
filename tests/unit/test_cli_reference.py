from __future__ import annotations

import pytest

from flashbuild import clidoc, errors
from tests.conftest import ROOT


def test_the_command_reference_matches_the_app() -> None:
    document = (ROOT / clidoc.REFERENCE).read_text(encoding="utf-8")
    expected = clidoc.splice(document, clidoc.render())
    assert document == expected, (
        f"{clidoc.REFERENCE} is stale: run `python -m flashbuild.clidoc --write {clidoc.REFERENCE}`"
    )


def test_the_exit_code_table_matches_errors_py() -> None:
    document = (ROOT / clidoc.REFERENCE).read_text(encoding="utf-8")
    expected = clidoc.splice(document, errors.exit_code_table(), clidoc.EXIT_BEGIN,
                             clidoc.EXIT_END)
    assert document == expected, (
        f"{clidoc.REFERENCE}'s exit codes are stale: run "
        f"`python -m flashbuild.clidoc --write {clidoc.REFERENCE}`"
    )


def test_the_exit_code_table_follows_a_changed_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table is read from the classes: a changed code or meaning changes the document."""
    document = (ROOT / clidoc.REFERENCE).read_text(encoding="utf-8")
    monkeypatch.setattr(errors.BusyError, "exit_code", 12)
    assert "| 12 | `busy` |" in clidoc.regenerate(document)
    assert clidoc.regenerate(document) != document


def test_every_exit_code_is_in_the_table_once() -> None:
    table = errors.exit_code_table()
    codes = [int(line.split("|")[1]) for line in table.splitlines()[2:]]
    assert codes == sorted({0, *errors.EXIT_CODES.values()})


def test_usage_lines_in_the_reference_are_the_help_screens() -> None:
    """The reference's heading of a command is its usage line as `--help` prints it
    (`{NAME}`, `[PATH]`), not a spelling of its own."""
    import re

    from typer.testing import CliRunner

    from flashbuild.cli import app

    headings = re.findall(r"^## `flashbuild ([^`]+)`$", clidoc.render(), flags=re.MULTILINE)
    assert len(headings) >= 9
    for heading in headings:
        words = heading.split()
        command = [w for w in words if w[0].isalpha()]
        shown = CliRunner().invoke(app, [*command, "--help"], terminal_width=200).output
        usage = next(line for line in shown.splitlines() if "Usage:" in line)
        for argument in words[len(command):]:
            assert argument in usage, (heading, usage)


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
    sections = re.split(r"^## `flashbuild ([^`]+)`$", reference, flags=re.MULTILINE)
    checked = 0
    for name, body in zip(sections[1::2], sections[2::2], strict=True):
        words = set(re.findall(r"\[\[?[a-z_.]+\]\]?", body))
        if not words:
            continue
        command = [w for w in name.split() if w[0].isalpha()]
        shown = runner.invoke(app, [*command, "--help"], terminal_width=200).output
        for word in words:
            assert word in shown, f"`flashbuild {name} --help` lost {word}"
            checked += 1
    assert checked >= 2  # [verify] (verify --recipe) and [[patch]] (recipe init) at least
