"""SARIF 2.1.0 output validates against OASIS's schema (vendored unchanged in
tests/fixtures/sarif/, see SOURCE.md there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flashbuild.cli import app
from flashbuild.scanning.findings import make_target
from flashbuild.scanning.rules import RULES
from flashbuild.scanning.sarif import to_sarif
from flashbuild.scanning.scan import scan_tree

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "fixtures" / "sarif" / "sarif-schema-2.1.0.json"


@pytest.fixture(scope="module")
def schema() -> dict[str, object]:
    return json.loads(SCHEMA.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@pytest.mark.parametrize("tree", ["csrc", "tests/fixtures/scan/othertree"])
def test_sarif_validates(schema: dict[str, object], tree: str) -> None:
    import jsonschema

    result = scan_tree(ROOT / tree, make_target("windows", "sm120"))
    doc = to_sarif(result)
    jsonschema.Draft4Validator(schema).validate(doc)
    run = doc["runs"][0]
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} == set(RULES)
    assert len(run["results"]) == len(result.findings)
    first = run["results"][0]["locations"][0]["physicalLocation"]
    assert not first["artifactLocation"]["uri"].startswith("/")
    assert first["region"]["startLine"] >= 1


def test_cli_writes_sarif(tmp_path: Path, schema: dict[str, object]) -> None:
    import jsonschema

    out = tmp_path / "scan.sarif"
    # --static: a unit test runs no tool (the default scan would configure csrc with CMake).
    res = CliRunner().invoke(app, ["scan", str(ROOT / "csrc"), "--platform", "linux",
                                   "--arch", "sm120", "--sarif", str(out), "--static"])
    assert res.exit_code == 11, res.output
    doc = json.loads(out.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(schema).validate(doc)
    assert [r["ruleId"] for r in doc["runs"][0]["results"]] == ["FB151", "FB150", "FB170"]
    assert [r["level"] for r in doc["runs"][0]["results"]] == ["warning", "error", "error"]


def test_sarif_rules_cite_what_a_user_can_open() -> None:
    """helpUri is the rule's upstream page where it has one; no rule text cites the team's
    private FACTS.md."""
    doc = to_sarif(scan_tree(ROOT / "tests/fixtures/scan/othertree", make_target("windows",
                                                                                   "sm120")))
    rules = {r["id"]: r for r in doc["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["FB170"]["helpUri"] == (
        "https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/"
        "compute-capabilities.html")
    assert rules["FB181"]["helpUri"] == RULES["FB181"].help_uri
    assert "helpUri" not in rules["FB111"]  # no upstream page: no empty or made-up URI
    assert all(r["helpUri"].startswith("https://") for r in rules.values() if "helpUri" in r)
    assert not [r["id"] for r in rules.values() if "FACTS" in r["help"]["text"]]
    assert "docs/scan.md#shared-memory-per-block" in rules["FB170"]["help"]["text"]
