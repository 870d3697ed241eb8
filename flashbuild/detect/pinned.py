"""Install what a tree or its package requires without changing anything already installed.

flashbuild builds without build isolation (the torch in the environment is the one the
extension must be compiled against) and installs the wheel it built with `--no-deps` (so pip
never swaps that torch for another). Both leave a tree's other requirements out: a build
requirement such as `scikit-build-core`, a run-time one such as `typing_extensions`. pip
installs those here with every distribution already in the environment pinned to its
installed version by a constraints file (`pip install -c`, pip's documented way to restrict
what the resolver may choose): a requirement that would upgrade, downgrade or replace
anything installed (torch above all) makes pip refuse, and the caller falls back to naming
the requirement with the pip command, as before. pip needs its index for this; without one
(no network, `--contain`, `PIP_NO_INDEX`) it fails fast and the same fallback applies.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild.errors import FlashbuildError
from flashbuild.proc import quote, tail

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.proc import Runner

#: pip's own network patience, cut down: a machine without an index answers within seconds.
_PIP_NETWORK = ("--retries", "1", "--timeout", "15")


@dataclass(frozen=True)
class PinnedInstall:
    """What `install_pinned` did."""

    requirements: tuple[str, ...]
    ok: bool
    command: str
    """The pip command, as it ran."""
    error: str = ""
    """pip's last lines when it failed (or why pip did not run)."""


def installed_versions(python: str, names: Sequence[str], runner: Runner,
                       env: Mapping[str, str]) -> dict[str, str]:
    """The installed version of each distribution in `names`, for `python` (absent: not
    installed), read through importlib.metadata in that interpreter."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    code = ("import importlib.metadata as m, json, sys\nout = {}\n"
            "for n in json.loads(sys.argv[1]):\n"
            "    try: out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: pass\nprint(json.dumps(out))")
    try:
        done = runner.run([python, "-c", code, json.dumps(wanted)], env=env, timeout=120,
                          check=False)
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.ok else {}
    except (FlashbuildError, ValueError, IndexError):
        found = {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def installed_pins(python: str, runner: Runner, env: Mapping[str, str]) -> list[str] | None:
    """`name==version` for every distribution installed for `python` (pip's own listing),
    or None when pip cannot list them."""
    try:
        done = runner.run([python, "-m", "pip", "list", "--format=json",
                           "--disable-pip-version-check"], env=env, timeout=120, check=False)
        rows = json.loads(done.stdout.strip().splitlines()[-1]) if done.ok else None
    except (FlashbuildError, ValueError, IndexError):
        return None
    if not isinstance(rows, list):
        return None
    return [f"{row['name']}=={row['version']}" for row in rows
            if isinstance(row, dict) and row.get("name") and row.get("version")]


def install_pinned(python: str, requirements: Sequence[str], runner: Runner,
                   env: Mapping[str, str], *, timeout: float = 900) -> PinnedInstall:
    """`pip install REQUIREMENTS` into `python`'s environment with everything installed
    pinned. Never raises for pip's own failure: the result says what pip said."""
    wanted = tuple(dict.fromkeys(requirements))
    pins = installed_pins(python, runner, env)
    if pins is None:
        return PinnedInstall(wanted, False, "", "pip could not list the installed "
                             "distributions, so nothing could be pinned")
    with tempfile.TemporaryDirectory(prefix="flashbuild-pins-") as tmp:
        constraints = Path(tmp) / "installed.txt"
        constraints.write_text("\n".join(pins) + "\n", encoding="utf-8")
        argv = [python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                "--quiet", *_PIP_NETWORK, "--constraint", str(constraints), *wanted]
        try:
            done = runner.run(argv, env=env, timeout=timeout, check=False)
        except FlashbuildError as exc:  # a pip that hangs past the timeout or cannot start
            return PinnedInstall(wanted, False, quote(argv), exc.what)
    shown = quote([*argv[:argv.index("--constraint")], "--constraint",
                   "<every installed distribution at its version>", *wanted])
    if not done.ok:
        return PinnedInstall(wanted, False, shown, tail(done.output, 6))
    return PinnedInstall(wanted, True, shown)
