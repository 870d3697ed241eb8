"""Build a wheel of the project in the current folder with its PEP 517 backend's `build_wheel`
hook alone: `python pep517_wheel.py OUTDIR`.

`pip wheel` asks the backend for the metadata first (`prepare_metadata_for_build_wheel`), and
setuptools' backend runs the tree's setup.py for it, then once more for the wheel: two runs,
each importing torch (3-4 s of CPU on a small machine) and each free to compute its own
version. `build_wheel` alone runs it once (PEP 517 lets a frontend call it without the metadata
hook). The backend is the one pyproject.toml names, `setuptools.build_meta:__legacy__` when it
names none (as pip does), imported from this interpreter's environment: no isolation, as with
`pip wheel --no-build-isolation`. Only the standard library (and pip's vendored TOML reader on
Pythons before 3.11) is used: the interpreter that builds is the user's, not flashbuild's.
"""

from __future__ import annotations

import importlib
import os
import sys


def _build_system() -> dict[str, object]:
    if not os.path.isfile("pyproject.toml"):
        return {}
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        from pip._vendor import tomli as tomllib  # type: ignore[no-redef]
    with open("pyproject.toml", "rb") as fh:
        data = tomllib.load(fh)
    system = data.get("build-system", {})
    return system if isinstance(system, dict) else {}


def _backend(system: dict[str, object]) -> object:
    for path in reversed(list(system.get("backend-path", []) or [])):  # type: ignore[call-overload]
        sys.path.insert(0, os.path.abspath(str(path)))
    spec = str(system.get("build-backend") or "setuptools.build_meta:__legacy__")
    module, _, attrs = spec.partition(":")
    backend: object = importlib.import_module(module)
    for attr in filter(None, attrs.split(".")):
        backend = getattr(backend, attr)
    return backend


def main() -> int:
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    name = _backend(_build_system()).build_wheel(out)  # type: ignore[attr-defined]
    print(f"flashbuild: built {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
