"""The Windows-semantics lane: how flashbuild behaves under Windows' rules, run on Linux.

Every test in this folder carries the `windows_semantics` marker (`pytest -m
windows_semantics` runs the lane alone) and runs in the normal `python -m pytest`. The lane
holds: each command's human output with stdout piped and `PYTHONIOENCODING=cp1252` (what a
GitHub Windows runner gives a step), literal printing of foreign text, the MSVC environment
capture fed real `cmd /u` UTF-16-LE output with non-ASCII paths, an x86 developer prompt, a
`Path=` environment, localised `cl` banners, program lookup that skips the current folder, a
read-only folder attribute, and PE delay-load imports. Tests that replay recorded output start
no process; the CLI tests start `python -m flashbuild` and wine where they say so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.windows_semantics)
