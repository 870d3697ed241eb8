"""The reliability suite: every case is marked `reliability` and writes its outcome to the
ledger (see helpers.py); tests/conftest.py prints the totals at the end of the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.helpers import Sandbox


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.reliability)


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    """A fresh tree, its recipe beside it and a sentinel folder beside both."""
    return Sandbox(tmp_path)
