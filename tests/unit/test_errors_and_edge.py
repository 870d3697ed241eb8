from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flashbuild import errors
from flashbuild.cli import app


def test_exit_codes_are_distinct_and_documented() -> None:
    codes = list(errors.EXIT_CODES.values())
    assert len(codes) == len(set(codes))
    # The documented table is generated from the classes (test_cli_reference checks the
    # committed copy); every code is in it with its kind.
    table = errors.exit_code_table()
    for kind, code in errors.EXIT_CODES.items():
        assert f"| {code} | `{kind}` |" in table, kind


def test_error_paragraph_has_what_evidence_fix() -> None:
    exc = errors.PatchError("hunk 2 of norm.cu does not apply", evidence="expected `x`",
                            fix="update the recipe")
    text = exc.paragraph()
    assert text.startswith("hunk 2 of norm.cu does not apply.")
    assert "expected `x`." in text and text.endswith("Fix: update the recipe.")
    assert exc.to_json()["exit_code"] == 5


def test_bad_arch_is_a_usage_error_without_traceback() -> None:
    result = CliRunner().invoke(app, ["doctor", "--arch", "banana", "--json"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    doc = json.loads(result.stdout)
    assert doc["error"] == "usage" and "banana" in doc["what"]


@pytest.mark.parametrize("argv", [["--version"], ["--help"]])
def test_version_and_help(argv: list[str]) -> None:
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0
