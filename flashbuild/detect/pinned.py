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

import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from flashbuild.errors import FlashbuildError
from flashbuild.proc import quote, tail

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.platforms.base import Platform
    from flashbuild.proc import Runner

#: The file, in flashbuild's user cache folder, that remembers pinned installs that failed.
MEMO_NAME = "pip-attempts.json"

def memo_file(platform: Platform, env: Mapping[str, str]) -> Path:
    """Where failed pinned installs are remembered: flashbuild's user cache folder."""
    return platform.user_cache_dir(env) / MEMO_NAME


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
    held: tuple[str, ...] = ()
    """Why each requirement left out was left out (torch's kin; a module another distribution
    provides): the others were installed without them, and `requirements` names only those."""


def installed_versions(python: str, names: Sequence[str], runner: Runner,
                       env: Mapping[str, str]) -> dict[str, str]:
    """The installed version of each distribution in `names`, for `python` (absent: not
    installed), read through importlib.metadata in that interpreter."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    if Path(python).absolute() == Path(sys.executable).absolute():
        # The interpreter running flashbuild (the usual case): asked in-process, so that a
        # build (a no-op re-run too) starts no Python for this. Not resolved: two venvs'
        # pythons are links to one interpreter, each with its own site-packages.
        here = {}
        for name in wanted:
            try:
                here[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return here
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


#: Never installed by flashbuild: the torch in the environment is the one the extension is
#: built against, and PyPI's build of it (GBs, its own CUDA) is no choice to make silently.
NEVER_INSTALLED = frozenset({"torch", "torchvision", "torchaudio"})

#: Run in the target interpreter: every installed distribution (name, version) and which
#: distributions provide each top-level module (`triton` <- `pytorch-triton`).
_LISTING = ("import importlib.metadata as m, json\n"
            "dists = {}\n"
            "for d in m.distributions():\n"
            "    name = d.metadata['Name']\n"
            "    if name: dists.setdefault(name, d.version)\n"
            "print(json.dumps({'dists': dists, 'modules': m.packages_distributions()}))")


@dataclass(frozen=True)
class Installed:
    """What an interpreter has installed."""

    pins: tuple[str, ...]
    """`name==version` for each distribution whose version is a PEP 440 version (pip refuses
    a whole constraints file over one that is not: Debian's `1.1build1`)."""
    modules: Mapping[str, tuple[str, ...]]
    """Top-level module -> the distributions that provide it."""


def installed(python: str, runner: Runner, env: Mapping[str, str]) -> Installed | None:
    """What `python` has installed, or None when it cannot say."""
    try:
        done = runner.run([python, "-c", _LISTING], env=env, timeout=120, check=False)
        data = json.loads(done.stdout.strip().splitlines()[-1]) if done.ok else None
    except (FlashbuildError, ValueError, IndexError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("dists"), dict):
        return None
    pins = []
    for name, version in sorted(data["dists"].items()):
        try:
            Version(str(version))
        except InvalidVersion:
            continue
        pins.append(f"{name}=={version}")
    modules = data.get("modules")
    return Installed(tuple(pins), {str(k): tuple(map(str, v)) for k, v in modules.items()}
                     if isinstance(modules, dict) else {})


def _held_back(requirement: str, have: Installed) -> str:
    """Why `requirement` must not be installed here ("" when it may): torch and its kin, or a
    distribution whose module another installed distribution already provides (pip would
    write over that one's files: `triton` over torch's `pytorch-triton`)."""
    try:
        req = Requirement(requirement)
    except InvalidRequirement:
        return f"{requirement!r} is not a requirement pip can read"
    name = canonicalize_name(req.name)
    if name in NEVER_INSTALLED:
        return (f"{req.name}: flashbuild never installs torch or its kin (the installed torch "
                "is the one the build compiled against)")
    module = name.replace("-", "_")
    others = [d for d in have.modules.get(module, ()) if canonicalize_name(d) != name]
    if others:
        return (f"{req.name}: its module `{module}` is already provided by {', '.join(others)}, "
                "whose files pip would overwrite")
    return ""


def install_pinned(python: str, requirements: Sequence[str], runner: Runner,
                   env: Mapping[str, str], *, memo: Path | None = None,
                   timeout: float = 900) -> PinnedInstall:
    """`pip install REQUIREMENTS` into `python`'s environment with everything installed
    pinned. Never raises for pip's own failure: the result says what pip said. `memo`: a file
    that remembers an attempt that failed, so that the same attempt in the same environment
    (offline, a refusal) is not made again on every build."""
    wanted = tuple(dict.fromkeys(requirements))
    have = installed(python, runner, env)
    if have is None:
        return PinnedInstall(wanted, False, "", "pip could not list the installed "
                             "distributions, so nothing could be pinned")
    reasons = {r: _held_back(r, have) for r in wanted}
    held = tuple(why for why in reasons.values() if why)
    # The rest still goes in (torchsparse's rootpath beside its torchvision): what is held
    # back is said, not a reason to install nothing.
    wanted = tuple(r for r, why in reasons.items() if not why)
    if not wanted:
        return PinnedInstall(wanted, False, "", "; ".join(held), held=held)
    attempt = hashlib.sha256(json.dumps([python, wanted, have.pins]).encode()).hexdigest()
    failed = _failed_before(memo, attempt)
    if failed:
        return PinnedInstall(wanted, False, "", f"{failed} (the same attempt failed before "
                             "in this environment; not tried again)")
    with tempfile.TemporaryDirectory(prefix="flashbuild-pins-") as tmp:
        constraints = Path(tmp) / "installed.txt"
        constraints.write_text("\n".join(have.pins) + "\n", encoding="utf-8")
        argv = [python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                "--quiet", *_PIP_NETWORK, "--constraint", str(constraints), *wanted]
        try:
            done = runner.run(argv, env=env, timeout=timeout, check=False)
        except FlashbuildError as exc:  # a pip that hangs past the timeout or cannot start
            _remember(memo, attempt, exc.what)
            return PinnedInstall(wanted, False, quote(argv), exc.what, held=held)
    shown = quote([*argv[:argv.index("--constraint")], "--constraint",
                   "<every installed distribution at its version>", *wanted])
    if not done.ok:
        error = tail(done.output, 6)
        _remember(memo, attempt, error.splitlines()[-1] if error else "pip failed")
        return PinnedInstall(wanted, False, shown, error, held=held)
    return PinnedInstall(wanted, True, shown, held=held)


def _failed_before(memo: Path | None, attempt: str) -> str:
    if memo is None:
        return ""
    try:
        data = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    found = data.get(attempt) if isinstance(data, dict) else None
    return str(found) if found else ""


def _remember(memo: Path | None, attempt: str, error: str) -> None:
    if memo is None:
        return
    try:
        data = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    data[attempt] = error[:300]
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(list(data.items())[-64:])), encoding="utf-8")
        tmp.replace(memo)
    except OSError:
        pass  # a memo that cannot be written only costs a second attempt
