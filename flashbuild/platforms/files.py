"""Replacing a file when something else may briefly hold it open.

On Windows, Defender and the search indexer open a freshly written file to scan it; for those
few milliseconds `os.replace` onto it, or of it, fails with WinError 5 (access denied) or 32
(sharing violation), both raised as PermissionError. pip retries its deletes for the same
reason (`pip._internal.utils.misc.rmtree`: every 0.5 s for up to 3 s); flashbuild retries its
renames a bounded number of times, through this one helper. Elsewhere a PermissionError means
what it says and is never retried.
"""

from __future__ import annotations

import errno
import os
import stat
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


#: The most a recipe or a file it names (`block_file`) may hold: recipes are a few KiB; a
#: limit keeps `block_file = "/dev/zero"` from reading 7.4 GB (issue 27).
TEXT_INPUT_LIMIT = 16 * 1024 * 1024


def read_regular(path: Path, limit: int = TEXT_INPUT_LIMIT) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them.

    A FIFO, a device or a socket is refused (a FIFO hung the reader; `/dev/zero` never
    ends), and so is a file over `limit`: both as OSError (EINVAL, EFBIG) with a sentence of
    what it is, so that every caller's existing OSError paragraph reports it. The open never
    blocks (O_NONBLOCK: a FIFO with no writer would) and the type is taken from the open file,
    not from the name, so a swap between the check and the read changes nothing."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else
                    "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
                    "a folder" if stat.S_ISDIR(mode) else "not a regular file")
            raise OSError(errno.EINVAL, f"{path} is {kind}, not a regular file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"{path} is over {limit // (1024 * 1024)} MiB, more than "
                      "a recipe or a block of code holds")
    return data
