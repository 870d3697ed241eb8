"""Imports run one way (DESIGN.md's layout, STYLE.md rule 13): cli → pipeline → stages →
readers → foundation, and a stage never imports a later stage. Every import of every module
counts (top level, inside functions, under TYPE_CHECKING), read with `ast`, nothing imported.

The few edges that still break the rule are listed in ALLOWED with why; an allowed edge that no
longer exists fails too, so the list only shrinks."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests.pysource import parse_file

PACKAGE = Path(__file__).resolve().parents[2] / "flashbuild"

#: Lowest first. A unit is a subpackage (`building`) or a top-level module (`proc`); the
#: package's own `__init__` (`__version__`) is the unit `flashbuild`. A unit may import units of
#: its own layer or lower ones; within a layer of one unit, everything is one unit.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundation", frozenset({"flashbuild", "errors", "console", "interrupts", "outputs",
                              "runner", "toolchain_facts"})),
    ("readers", frozenset({"arch", "proc", "platforms", "recipes", "source", "detect",
                           "buildsystems"})),
    ("scanning", frozenset({"scanning"})),
    ("patching", frozenset({"patching"})),
    ("building", frozenset({"building"})),
    ("ci", frozenset({"ci"})),  # writes CI workflows from what building knows of a recipe
    ("installing", frozenset({"installing"})),
    ("verifying", frozenset({"verifying"})),
    ("pipeline", frozenset({"pipeline"})),
    ("entry", frozenset({"cli", "clidoc", "__main__"})),
)

#: (importing module, imported module): why it is still there. Remove an entry with its edge.
ALLOWED: dict[tuple[str, str], str] = {
}


def _rank() -> dict[str, int]:
    return {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The flashbuild modules `name` imports; `from pkg import mod` counts as `pkg.mod`."""
    found: set[str] = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(parse_file(path)):  # once per process: tests/pysource.py
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(target)
    return {m for m in found if m == "flashbuild" or m.startswith("flashbuild.")}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "flashbuild"


def _edges() -> dict[tuple[str, str], None]:
    modules = _modules()
    edges: dict[tuple[str, str], None] = {}
    for name, path in modules.items():
        for target in sorted(_imports(name, path, modules)):
            edges[(name, target)] = None
    return edges


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_unit_has_a_layer() -> None:
    rank = _rank()
    units = {_unit(m) for m in _modules()}
    assert sorted(units - rank.keys()) == [], "add the new package to LAYERS"
    assert sorted(rank.keys() - units) == [], "a unit in LAYERS no longer exists"


def test_no_import_reaches_up_a_layer() -> None:
    rank = _rank()
    wrong = [
        f"{src} imports {dst} ({LAYERS[rank[_unit(src)]][0]} → {LAYERS[rank[_unit(dst)]][0]})"
        for src, dst in _edges()
        if rank[_unit(dst)] > rank[_unit(src)] and (src, dst) not in ALLOWED
    ]
    assert wrong == [], "an import from a lower layer or an earlier stage:\n" + "\n".join(wrong)


def test_no_import_cycle_between_units() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst in _edges():
        if _unit(src) != _unit(dst) and (src, dst) not in ALLOWED:
            graph[_unit(src)].add(_unit(dst))
    assert _sccs(graph) == []


def test_every_allowed_edge_still_exists() -> None:
    edges = _edges()
    gone = [f"{src} → {dst}" for src, dst in ALLOWED if (src, dst) not in edges]
    assert gone == [], "remove these from ALLOWED, the import is gone:\n" + "\n".join(gone)


@pytest.mark.parametrize(("graph", "cycles"), [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
])
def test_the_cycle_finder_finds_cycles(graph: dict[str, set[str]],
                                       cycles: list[list[str]]) -> None:
    assert _sccs(graph) == cycles


def test_the_import_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Function-level, TYPE_CHECKING, relative and `from pkg import module` imports all count."""
    modules = {"flashbuild.building.x": tmp_path / "x.py", "flashbuild.installing.shim": Path()}
    (tmp_path / "x.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from flashbuild.verifying.fatbin import F\n"
        "def f():\n    from flashbuild.installing import shim\n"
        "from ..errors import UsageError\n"
        "from . import jobs\n", encoding="utf-8")
    assert _imports("flashbuild.building.x", tmp_path / "x.py", modules) == {
        "flashbuild.verifying.fatbin", "flashbuild.installing.shim", "flashbuild.errors",
        "flashbuild.building",
    }
