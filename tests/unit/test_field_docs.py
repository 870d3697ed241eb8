"""A field's docstring is the string right after it (`recipes.schema.field_docs` reads them
so): a field inserted between an older field and its docstring takes that docstring, and
leaves the older field's either missing or as a second string in a row."""

from __future__ import annotations

import ast
from pathlib import Path

from flashbuild.installing.install import InstallPlan
from flashbuild.recipes.schema import field_docs
from flashbuild.scanning.findings import ScanResult

PACKAGE = Path(__file__).resolve().parents[2] / "flashbuild"


def test_no_class_has_two_docstrings_in_a_row() -> None:
    """Two strings in a row in a class body: the second documents nothing (its field moved
    away from it, or a field was inserted above the first)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for before, stmt in zip(cls.body, cls.body[1:], strict=False):
                if all(isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and
                       isinstance(s.value.value, str) for s in (before, stmt)):
                    found.append(f"{path.relative_to(PACKAGE)}:{stmt.lineno} ({cls.name})")
    assert found == []


def test_the_fields_added_last_session_carry_their_own_docstrings() -> None:
    plan = field_docs(InstallPlan)
    assert "loader shim loads first" in plan["preload"]
    assert "imports torch first" in plan["import_torch"]
    scan = field_docs(ScanResult)
    assert scan["read"].startswith("The files the checks read")
    assert scan["kernels"].startswith("Per arch of the target, the kernels")
