"""SARIF 2.1.0 output, so GitHub code scanning shows scan findings on a pull request.

The document follows the OASIS schema (../shared/schemas/sarif-schema-2.1.0.json; a test
validates against it): one run, `tool.driver` with every rule (id, name, shortDescription,
help, and `helpUri` where an upstream page states the rule's fact), and one result per finding
with `ruleId`, `level`, `message` and a physical location whose `artifactLocation.uri` is
relative to the scanned root (`uriBaseId` `%SRCROOT%`, which code scanning maps to the
checkout).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashbuild import __version__
from flashbuild.scanning.rules import RULES

if TYPE_CHECKING:
    from flashbuild.scanning.findings import ScanResult

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFO_URI = "https://github.com/flashbuild/flashbuild#build-your-own-tree"


def to_sarif(result: ScanResult) -> dict[str, Any]:
    rules = list(RULES.values())
    index = {r.id: i for i, r in enumerate(rules)}
    driver = {
        "name": "flashbuild",
        "version": __version__,
        "informationUri": INFO_URI,
        "rules": [{
            "id": r.id,
            "name": r.name,
            "shortDescription": {"text": r.short},
            "fullDescription": {"text": r.help},
            "help": {"text": r.help},
            **({"helpUri": r.help_uri} if r.help_uri else {}),
            "properties": {"category": r.category.value},
        } for r in rules],
    }
    results = []
    for f in result.findings:
        text = f"{f.message}. Evidence: {f.evidence}. Fix: {f.fix.describe()}."
        results.append({
            "ruleId": f.rule,
            "ruleIndex": index[f.rule],
            "level": f.severity.value,
            "message": {"text": text},
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": {"uri": f.path, "uriBaseId": "%SRCROOT%"},
                    "region": {"startLine": f.line, "startColumn": f.col,
                               "snippet": {"text": f.snippet}},
                },
            }],
            "properties": {"category": f.category.value, "target": result.target.label,
                           "truth": f.truth.value},
        })
    notes = [{"level": "note", "message": {"text": f"{s.path}: skipped: {s.reason}"},
              "descriptor": {"id": "skipped"}} for s in result.skipped]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": driver},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": result.root.as_uri() + "/"}},
            "results": results,
            "invocations": [{"executionSuccessful": True,
                             "toolExecutionNotifications": notes}],
        }],
    }
