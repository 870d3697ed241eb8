"""A small on-disk cache for slow probe results, keyed by the fingerprint of an installation.

What is slow to learn (nvcc's code list, torch's compiled arch list, vswhere's answer) does not
change until the installation changes. Each entry is keyed by a fingerprint made of the path,
size and modification time of the file that would change on an upgrade (the nvcc binary,
torch/version.py, vswhere.exe), so an upgrade is never answered from a stale entry. Entries are
JSON files written atomically; a corrupt or unreadable entry is treated as a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

#: Bumped when the shape of a cached value changes, so old entries are ignored.
CACHE_FORMAT = 1

Json = object
T = TypeVar("T")


def file_fingerprint(path: Path) -> str | None:
    """`realpath|size|mtime_ns` of a file, or None when it cannot be read."""
    try:
        real = path.resolve()
        stat = real.stat()
    except OSError:
        return None
    return f"{real}|{stat.st_size}|{stat.st_mtime_ns}"


@dataclass(frozen=True)
class ProbeCache:
    """JSON entries under `folder`; `enabled=False` (`--no-cache`) makes every lookup a miss
    and still refreshes the entry, so the next cached run sees the new answer."""

    folder: Path | None
    enabled: bool = True

    def _path(self, kind: str, fingerprint: str) -> Path | None:
        if self.folder is None:
            return None
        digest = hashlib.sha256(f"{CACHE_FORMAT}|{kind}|{fingerprint}".encode()).hexdigest()
        return self.folder / "probes" / f"{kind}-{digest[:24]}.json"

    def get(self, kind: str, fingerprint: str) -> Json | None:
        path = self._path(kind, fingerprint)
        if not self.enabled or path is None:
            return None
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(document, dict) or document.get("fingerprint") != fingerprint:
            return None
        return document.get("value")

    def put(self, kind: str, fingerprint: str, value: Json) -> None:
        path = self._path(kind, fingerprint)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"fingerprint": fingerprint, "value": value}, handle)
            Path(tmp).replace(path)
        except OSError:
            # A read-only home or a full disk only costs speed, never the answer.
            with contextlib.suppress(OSError, UnboundLocalError):
                Path(tmp).unlink()

    def fetch(self, kind: str, fingerprint: str | None, compute: Callable[[], T],
              *, encode: Callable[[T], Json | None], decode: Callable[[Json], T | None]) -> T:
        """The cached value for (kind, fingerprint) or `compute()`'s, stored for next time.
        Without a fingerprint nothing is cached; `encode` returning None (a failed probe)
        keeps the answer out of the cache so the next run asks again."""
        if fingerprint is not None:
            hit = self.get(kind, fingerprint)
            if hit is not None:
                decoded = decode(hit)
                if decoded is not None:
                    return decoded
        value = compute()
        encoded = encode(value)
        if fingerprint is not None and encoded is not None:
            self.put(kind, fingerprint, encoded)
        return value


NO_CACHE = ProbeCache(None, enabled=False)
