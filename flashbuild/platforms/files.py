"""Replacing a file when something else may briefly hold it open.

On Windows, Defender and the search indexer open a freshly written file to scan it; for those
few milliseconds `os.replace` onto it, or of it, fails with WinError 5 (access denied) or 32
(sharing violation), both raised as PermissionError. pip retries its deletes for the same
reason (`pip._internal.utils.misc.rmtree`: every 0.5 s for up to 3 s); flashbuild retries its
renames a bounded number of times, through this one helper. Elsewhere a PermissionError means
what it says and is never retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

Replace = Callable[[Path, Path], None]
Sleep = Callable[[float], None]

#: Waits between attempts (seconds): about 1.6 s in all before the error is raised, longer
#: than a scan of a freshly written file takes and short enough for a real lock to surface.
RETRY_DELAYS = (0.02, 0.04, 0.08, 0.16, 0.3, 0.5, 0.5)


def replace_with_retry(src: Path, dst: Path, *, delays: tuple[float, ...] | None = None,
                       replace: Replace | None = None, sleep: Sleep | None = None) -> None:
    """`os.replace(src, dst)`, tried again after each of `delays` (default `RETRY_DELAYS`)
    while it fails with PermissionError; the last error is raised. Other errors are raised
    at once."""
    do = replace or Path.replace
    wait = sleep or time.sleep
    for delay in RETRY_DELAYS if delays is None else delays:
        try:
            do(src, dst)
        except PermissionError:
            wait(delay)
        else:
            return
    do(src, dst)
