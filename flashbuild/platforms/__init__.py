"""The only place the operating system is decided.

Business logic asks `current()` (or `get("windows")` to plan for another OS, as
`--platform windows` does) and calls methods on the returned `Platform`; it never tests
`sys.platform` itself.
"""

from __future__ import annotations

import sys

from flashbuild.errors import UsageError
from flashbuild.platforms.base import Platform, PlatformName
from flashbuild.platforms.linux import LinuxPlatform
from flashbuild.platforms.windows import WindowsPlatform

__all__ = ["Platform", "PlatformName", "current", "get"]

_ALL: dict[str, Platform] = {"linux": LinuxPlatform(), "windows": WindowsPlatform()}


def current() -> Platform:
    """The platform flashbuild runs on."""
    return _ALL["windows"] if sys.platform == "win32" else _ALL["linux"]


def get(name: str | None) -> Platform:
    """A platform by name (`linux`, `windows`; `None` = this machine's)."""
    if name is None:
        return current()
    key = name.strip().lower()
    key = {"win": "windows", "win32": "windows", "win64": "windows"}.get(key, key)
    if key not in _ALL:
        raise UsageError(
            f"`{name}` is not a platform flashbuild builds for",
            fix="use `--platform linux` or `--platform windows`",
        )
    return _ALL[key]
