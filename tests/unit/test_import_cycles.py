"""Import cycles between modules (issue 26 item 6), read with `ast`, nothing imported.

- An import that runs when its module is loaded (at the top, not under TYPE_CHECKING) never
  closes a cycle: no allowlist.
- Counting the imports inside functions too, the cycles that remain are listed in
  ALLOWED_CYCLES with why. A new cycle, or a listed one that grew, fails; a listed one that is
  gone or smaller fails too, so the list only shrinks.
- A lazy import tagged `# noqa: PLC0415  # cycle` (pyproject's ruff section) must be one:
  the module it imports is in a listed cycle with the importing one.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests.pysource import parse
from tests.unit.test_layers import _modules, _sccs

#: Each cycle the function-level imports still close, and why it is not broken yet.
ALLOWED_CYCLES: dict[frozenset[str], str] = {
    frozenset({"flashbuild.recipes.load", "flashbuild.recipes.schema"}):
        "the schema walks the transform registry load keeps; load's messages quote the "
        "schema's field docs",
    frozenset({"flashbuild.scanning.callgraph", "flashbuild.scanning.checks_cxx",
               "flashbuild.scanning.checks_setup", "flashbuild.scanning.scan"}):
        "scan runs the C++ and setup.py checks, which read sources with scan.read_source; "
        "checks_cxx asks callgraph for a kernel's owner, callgraph reads checks_cxx's contexts",
    frozenset({"flashbuild.scanning.draft", "flashbuild.scanning.draft_check",
               "flashbuild.scanning.report"}):
        "draft reconciles itself with draft_check, which works on draft's types, and reads the "
        "scan report, which says what the draft would hold",
    frozenset({"flashbuild.pipeline.choose", "flashbuild.pipeline.command",
               "flashbuild.pipeline.introspect"}):
        "command chooses the recipe with choose, whose draft introspects the tree, and "
        "introspection takes command's toolkit and host-compiler choice",
}

_CYCLE_TAG = "# noqa: PLC0415  # cycle"


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom,
             modules: dict[str, Path]) -> set[str]:
    """The flashbuild modules one import statement loads (`from pkg import mod` = pkg.mod)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    if isinstance(node, ast.Import):
        found.update(a.name for a in node.names)
    else:
        if node.level:
            base = package[:len(package) - node.level + 1]
            target = ".".join([*base, *([node.module] if node.module else [])])
        else:
            target = node.module or ""
        subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
        found.update(subs)
        if len(subs) < len(node.names):
            found.add(target)
    return {m for m in found if m in modules and m != name}


def _statements(body: list[ast.stmt], deferred: bool,
                ) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import under `body` with whether it is deferred (inside a function); imports
    under `if TYPE_CHECKING:` never run and are left out."""
    out: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
    for st in body:
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            out.append((st, deferred))
        elif isinstance(st, ast.If) and "TYPE_CHECKING" in ast.unparse(st.test):
            out += _statements(st.orelse, deferred)
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out += _statements(st.body, True)
        else:
            for field in ("body", "orelse", "finalbody"):
                sub = getattr(st, field, None)
                if isinstance(sub, list):
                    out += _statements(sub, deferred)
            for handler in getattr(st, "handlers", None) or []:
                out += _statements(handler.body, deferred)
    return out


def _graphs(modules: dict[str, Path],
            ) -> tuple[dict[str, set[str]], dict[str, set[str]], list[tuple[str, str, int, bool]]]:
    """(top-level graph, graph with deferred imports too, each deferred import as (importer,
    imported, line, whether it is tagged `cycle`))."""
    top: dict[str, set[str]] = defaultdict(set)
    every: dict[str, set[str]] = defaultdict(set)
    deferred_imports: list[tuple[str, str, int, bool]] = []
    for name, path in modules.items():
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        lines = text.splitlines()
        # Parsed once per process (tests/pysource.py): all three tests read the whole package.
        for node, deferred in _statements(parse(text).body, False):
            targets = _targets(name, path, node, modules)
            every[name] |= targets
            if not deferred:
                top[name] |= targets
            else:
                tag = _CYCLE_TAG in lines[node.lineno - 1]
                deferred_imports += [(name, t, node.lineno, tag) for t in sorted(targets)]
    return top, every, deferred_imports


def test_no_import_at_load_time_closes_a_cycle() -> None:
    top, _every, _deferred = _graphs(_modules())
    assert _sccs(top) == [], "these modules import each other when they are loaded"


def test_only_the_listed_cycles_remain_and_each_still_exists() -> None:
    _top, every, _deferred = _graphs(_modules())
    found = {frozenset(c) for c in _sccs(every)}
    new = [sorted(c) for c in found - ALLOWED_CYCLES.keys()]
    gone = [sorted(c) for c in ALLOWED_CYCLES.keys() - found]
    assert new == [], ("a new or larger import cycle (break it, or list it in ALLOWED_CYCLES "
                       f"with why): {new}")
    assert gone == [], f"remove or shrink these in ALLOWED_CYCLES, the cycle changed: {gone}"


def test_an_import_is_tagged_cycle_exactly_when_it_closes_one() -> None:
    _top, _every, deferred = _graphs(_modules())
    assert any(tag for *_rest, tag in deferred), "the tag is spelled as pyproject says"
    wrong = [f"{src}:{line} imports {dst}: " + ("tagged `cycle`, but it is in no listed cycle"
                                                if tag else "closes a cycle, tag it `cycle`")
             for src, dst, line, tag in deferred
             if tag != any({src, dst} <= cycle for cycle in ALLOWED_CYCLES)]
    assert wrong == [], "\n".join(wrong)


@pytest.mark.parametrize(("source", "top", "deferred"), [
    ("import flashbuild.b\n", {"flashbuild.b"}, set()),
    ("def f():\n    from flashbuild import b\n", set(), {"flashbuild.b"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flashbuild.b import X\n",
     set(), set()),
    ("try:\n    from . import b\nexcept ImportError:\n    pass\n", {"flashbuild.b"}, set()),
])
def test_the_reader_tells_load_time_from_deferred_imports(
        tmp_path: Path, source: str, top: set[str], deferred: set[str]) -> None:
    path = tmp_path / "a.py"
    path.write_text(source, encoding="utf-8")
    modules = {"flashbuild.a": path, "flashbuild.b": tmp_path / "b.py"}
    graph_top, graph_every, _deferred = _graphs(modules)
    assert graph_top.get("flashbuild.a", set()) == top
    assert graph_every.get("flashbuild.a", set()) == top | deferred


def test_the_cycle_finder_sees_a_cycle_through_a_deferred_import(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from flashbuild import b\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("def f():\n    from flashbuild import a\n",
                                   encoding="utf-8")
    modules = {"flashbuild.a": tmp_path / "a.py", "flashbuild.b": tmp_path / "b.py"}
    top, every, _deferred = _graphs(modules)
    assert _sccs(top) == [] and _sccs(every) == [["flashbuild.a", "flashbuild.b"]]
