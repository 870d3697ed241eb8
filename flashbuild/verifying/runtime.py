"""Import the installed package in a fresh interpreter and run its own GPU self-check.

The child runs from a new empty temp folder with `-P` (no script folder or cwd on sys.path),
so a source tree in the current directory cannot shadow the installed package; the package's
`__init__` (which holds the loader shim) runs as it will for users. Exports are looked up in
the child and reported back as JSON on stdout.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild.errors import FlashbuildError
from flashbuild.proc import Runner, tail

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: The child program: argv = [package, export...]; prints one JSON line.
_PROBE = r"""
import importlib, importlib.util, json, sys, traceback
pkg, names = sys.argv[1], sys.argv[2:]
out = {"imported": False, "missing": [], "error": None, "file": None,
       "torch": importlib.util.find_spec("torch") is not None}
try:
    mod = importlib.import_module(pkg)
    out["imported"] = True
    out["file"] = getattr(mod, "__file__", None)
except BaseException as exc:
    out["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
if out["imported"]:
    for name in names:
        obj, parts, path = mod, name.replace(":", ".").split("."), pkg
        for part in parts:
            path += "." + part
            if hasattr(obj, part):
                obj = getattr(obj, part)
                continue
            try:
                obj = importlib.import_module(path)
            except BaseException:
                out["missing"].append(name)
                break
print("FLASHBUILD-PROBE " + json.dumps(out))
"""

#: The package's own GPU self-check, `{python}` and `{package}` substituted.
DEFAULT_SELFCHECK = ("{python}", "-m", "{package}.selfcheck")


@dataclass(frozen=True)
class ImportResult:
    imported: bool
    missing_exports: tuple[str, ...]
    error: str | None
    file: str | None
    #: Whether torch is importable in that interpreter (the GPU self-check needs it).
    torch: bool = False


@dataclass(frozen=True)
class SelfCheckResult:
    ok: bool
    output: str


def _child_env(env: Mapping[str, str], extra_path: Path | None) -> dict[str, str]:
    child = dict(env)
    if extra_path is not None:
        child["PYTHONPATH"] = os.pathsep.join(
            [str(extra_path), *([child["PYTHONPATH"]] if child.get("PYTHONPATH") else [])])
    return child


def import_check(package: str, exports: Sequence[str], *, runner: Runner,
                 python: str = sys.executable, env: Mapping[str, str] | None = None,
                 search_path: Path | None = None, timeout: float = 120.0) -> ImportResult:
    """Import `package` in a fresh interpreter from a neutral folder and look up `exports`.
    `search_path` is put on PYTHONPATH (for an in-place install inside a source tree)."""
    child_env = _child_env(os.environ if env is None else env, search_path)
    with tempfile.TemporaryDirectory(prefix="flashbuild-verify-") as neutral:
        try:
            done = runner.run([python, "-P", "-c", _PROBE, package, *exports],
                              env=child_env, cwd=Path(neutral), timeout=timeout, check=False)
        except FlashbuildError as exc:
            return ImportResult(False, (), exc.paragraph(), None)
    for line in done.stdout.splitlines():
        if line.startswith("FLASHBUILD-PROBE "):
            data = json.loads(line[len("FLASHBUILD-PROBE "):])
            return ImportResult(bool(data["imported"]), tuple(data["missing"]),
                                data["error"], data["file"], bool(data.get("torch")))
    # The interpreter died before printing (a crash inside the extension's init).
    return ImportResult(False, (), f"the interpreter exited with code {done.returncode}: "
                        f"{tail(done.output, 12)}", None)


def run_selfcheck(package: str, *, runner: Runner, bench: bool = False,
                  command: Sequence[str] = DEFAULT_SELFCHECK, python: str = sys.executable,
                  env: Mapping[str, str] | None = None, search_path: Path | None = None,
                  timeout: float = 600.0) -> SelfCheckResult:
    """Run the package's kernel self-check (and `--bench`) in a fresh interpreter."""
    argv = [part.format(python=python, package=package) for part in command]
    if bench:
        argv.append("--bench")
    child_env = _child_env(os.environ if env is None else env, search_path)
    with tempfile.TemporaryDirectory(prefix="flashbuild-verify-") as neutral:
        try:
            done = runner.run(argv, env=child_env, cwd=Path(neutral), timeout=timeout,
                              check=False)
        except FlashbuildError as exc:
            return SelfCheckResult(False, exc.paragraph())
    return SelfCheckResult(done.ok, done.output)


def gpu_present() -> bool:
    """Whether NVML reports at least one NVIDIA GPU (False when there is no driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    try:
        return int(pynvml.nvmlDeviceGetCount()) > 0
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
