"""bench/trees.py and bench/tree_tests.py loaded for tests: they are scripts, not a package,
and tree_tests.py imports `trees` by name (bench/ on its sys.path)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load(name: str, path: Path) -> ModuleType:
    """Import the file at `path` as module `name` (registered in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def trees_module() -> Iterator[ModuleType]:
    """bench/trees.py registered as `trees` for as long as the block runs; what was there
    before is put back."""
    saved = sys.modules.get("trees")
    yield load("trees", BENCH / "trees.py")
    if saved is None:
        sys.modules.pop("trees", None)
    else:
        sys.modules["trees"] = saved
