"""flashbuild's own sources read with `ast`, each text parsed once per test process.

Several meta tests (tests/unit/test_layers.py, test_import_cycles.py, test_build_systems.py,
test_message_sources.py, test_toolchain_facts.py) read every module of the package, some of
them once per test or per parameter: one parse of the package is about 1.6 s of CPU on the
project's 2-core machine, and the default run parsed it about 14 times (the CPU ledger,
tests/conftest.py). The cache is keyed by the text itself, so a file that changes, or a
source a test writes, is parsed anew; the trees it returns are shared, so a caller must only
read them (none of these tests edits a tree)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "flashbuild"


@functools.cache
def parse(text: str) -> ast.Module:
    """`ast.parse(text)`, shared by every caller in this process. Do not modify the tree."""
    return ast.parse(text)


def parse_file(path: Path) -> ast.Module:
    """The parsed text of `path` as it is now (read every time, parsed once per text)."""
    return parse(path.read_text(encoding="utf-8"))
