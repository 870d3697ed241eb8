"""Containment of a tree's build scripts (introspection's CMake configure and setup.py record).

A tree's build scripts are code the user may not have read. On Linux they run in a fresh
network namespace (no interface but a loopback that is down, so nothing on the host, its
loopback included, is reachable) and a PID namespace whose first process is the build script:
when it exits, the kernel kills every process left in the namespace, a `setsid` daemon
included. Root may create both; others need an unprivileged user namespace
(`unshare --map-root-user`), which some kernels refuse (a sysctl, AppArmor). Where neither
works, and on Windows, the fallback applies: proxy variables that point at a closed port,
CMake's FetchContent told it is disconnected, and the child's process group / Job Object
ended with the run (docs/introspection.md says what that does not stop).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path
    from typing import IO

    from flashbuild.runner import Completed


class _Runner(Protocol):
    def run(self, argv: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 60.0, check: bool = True,
            input: str | None = None) -> Completed: ...

    def which(self, program: str, env: Mapping[str, str] | None = None) -> str | None: ...

    def stream(self, argv: Sequence[str | os.PathLike[str]], *, on_line: Callable[[str], None],
               log: IO[str] | None = None, env: Mapping[str, str] | None = None,
               cwd: Path | None = None, timeout: float | None = None) -> int: ...

#: A port nothing listens on (the discard port): a proxy set to it refuses every connection.
CLOSED_PROXY = "http://127.0.0.1:9"
#: Proxy variables the fallback points at CLOSED_PROXY (curl, pip, git, CMake, requests).
PROXY_VARIABLES = ("http_proxy", "https_proxy", "ftp_proxy", "all_proxy",
                   "HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "ALL_PROXY")
#: CMake cache entries that keep FetchContent / ExternalProject from downloading.
CMAKE_OFFLINE = ("-DFETCHCONTENT_FULLY_DISCONNECTED=ON",)
_UNSHARE = ("--net", "--pid", "--fork", "--kill-child")


@dataclass(frozen=True)
class Containment:
    """How build scripts are run on this machine: `prefix` goes before the argv."""

    prefix: tuple[str, ...]
    summary: str

    @property
    def namespaces(self) -> bool:
        return bool(self.prefix)

    def argv(self, argv: Sequence[str]) -> list[str]:
        return [*self.prefix, *argv]


def offline_env(env: Mapping[str, str], *, proxies: bool = True) -> dict[str, str]:
    """`env` with the fallback's network settings. `proxies=False` where a network namespace
    already cuts the network: setup.py's offline hook then reports the host it asked for,
    not the closed proxy."""
    out = dict(env)
    if proxies:
        out = {k: v for k, v in out.items() if k.upper() != "NO_PROXY"}
        out.update(dict.fromkeys(PROXY_VARIABLES, CLOSED_PROXY))
    out["GIT_ALLOW_PROTOCOL"] = "file"
    out["PIP_NO_INDEX"] = "1"
    return out


def _works(prefix: Sequence[str]) -> bool:
    try:
        done = subprocess.run([*prefix, "true"], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@functools.cache
def linux_containment() -> Containment:
    """Namespaces as root, else in a user namespace, else the fallback (asked once a run)."""
    unshare = shutil.which("unshare")
    fallback = Containment((), "proxies to a closed port (no namespaces here)")
    if unshare is None:
        return fallback
    for extra in ((), ("--map-root-user",)):
        prefix = (unshare, *extra, *_UNSHARE, "--")
        if _works(prefix):
            return Containment(prefix, "network and PID namespaces"
                               + (" (user namespace)" if extra else ""))
    return fallback


def no_containment(summary: str) -> Containment:
    return Containment((), summary)


class ContainedRunner:
    """A runner whose programs run contained (`flashbuild build --contain`): the containment's
    prefix before every argv (namespaces where allowed) and the offline environment (proxies
    to a closed port without a network namespace; `PIP_NO_INDEX`, `GIT_ALLOW_PROTOCOL=file`
    always). Lookups go to the runner it wraps."""

    def __init__(self, inner: _Runner, containment: Containment) -> None:
        self.inner = inner
        self.containment = containment

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        return offline_env(os.environ if env is None else env,
                           proxies=not self.containment.namespaces)

    def _argv(self, argv: Sequence[str | os.PathLike[str]]) -> list[str]:
        return self.containment.argv([os.fspath(a) for a in argv])

    def which(self, program: str, env: Mapping[str, str] | None = None) -> str | None:
        return self.inner.which(program, env)

    def run(self, argv: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 60.0, check: bool = True,
            input: str | None = None) -> Completed:
        return self.inner.run(self._argv(argv), env=self._env(env), cwd=cwd, timeout=timeout,
                              check=check, input=input)

    def stream(self, argv: Sequence[str | os.PathLike[str]], *, on_line: Callable[[str], None],
               log: IO[str] | None = None, env: Mapping[str, str] | None = None,
               cwd: Path | None = None, timeout: float | None = None) -> int:
        return self.inner.stream(self._argv(argv), on_line=on_line, log=log,
                                 env=self._env(env), cwd=cwd, timeout=timeout)
