"""Markers shared by test files.

`needs_torch`: the README's install has no torch (its CPU build is an optional step), and
setup.py record mode runs torch's BuildExtension, so a test that records a setup.py tree skips
without it instead of failing on the README's own install."""

from __future__ import annotations

import importlib.util

import pytest

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (the README's optional CPU torch step): setup.py record "
    "mode runs torch's BuildExtension")
