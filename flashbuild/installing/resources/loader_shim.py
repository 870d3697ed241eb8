"""flashbuild loader shim: makes the DLLs this package's binaries need findable on Windows.

Python >= 3.8 loads an extension with LoadLibraryExW(LOAD_LIBRARY_SEARCH_DEFAULT_DIRS |
LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR): PATH and the current directory are ignored, so the CUDA
runtime's folder must be registered with os.add_dll_directory before the module is
imported (FACTS.md, "Windows DLL loading"). CUDA <= 12 keeps its DLLs in bin, the CUDA 13
installer in bin\\x64, the CUDA 13 PyPI wheel in bin\\x86_64.

The folders were recorded when the package was built; they are hints, resolved again here at
import time. A recorded folder that is gone (the venv was recreated elsewhere, CUDA was
upgraded) is looked for where it would be now: below this environment's site-packages for a
folder that was below site-packages (the nvidia-* wheels, torch\\lib), below %CUDA_PATH% (and
the installer's CUDA_PATH_V* variables) for a toolkit folder. A folder found nowhere is
named in the ImportError of this package's extension modules, instead of only "DLL load
failed".

On Linux this file does nothing: the binaries find their libraries through RPATH ($ORIGIN).
This file runs inside the installed package, without flashbuild, so it checks the OS itself.
flashbuild renders DLL_DIRS when it installs the package; edit the build, not this file.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import site
import sys
from pathlib import Path
from typing import Any

#: Absolute folders that may hold the DLLs the binaries need (rendered by flashbuild).
DLL_DIRS: tuple[str, ...] = ()

#: The handles os.add_dll_directory returned: a folder stays registered only while its
#: handle is open, so they live as long as the module.
_HANDLES: list[object] = []

#: The sub folders of a toolkit that hold its DLLs, in the order each CUDA puts them.
_TOOLKIT_DLL_DIRS = (("bin", "x64"), ("bin", "x86_64"), ("bin",))


def _parts(folder: str) -> list[str]:
    return [p for p in folder.replace("\\", "/").split("/") if p]


def _is_absolute(folder: str) -> bool:
    # Never a relative folder: that would resolve against the current directory.
    return Path(folder).is_absolute() or (len(folder) > 2 and folder[1] == ":"
                                          and folder[2] in "\\/")


def site_dirs() -> list[Path]:
    """This environment's site-packages folders (a venv's first)."""
    found: dict[str, None] = {}
    for raw in [str(Path(sys.prefix, "Lib", "site-packages")), *site.getsitepackages(),
                *sys.path]:
        if raw and Path(raw).name.lower() == "site-packages":
            found.setdefault(raw, None)
    return [Path(p) for p in found]


def toolkit_roots(env: Any = None) -> list[Path]:
    """CUDA toolkits this machine names: %CUDA_PATH%, then CUDA_PATH_V<major>_<minor>."""
    environ = os.environ if env is None else env
    names = ["CUDA_PATH", *sorted((k for k in environ if k.upper().startswith("CUDA_PATH_V")),
                                  reverse=True)]
    return [Path(environ[n]) for n in names if environ.get(n)]


def alternatives(folder: str, sites: list[Path], toolkits: list[Path]) -> list[Path]:
    """Where a recorded folder that no longer exists would be in this environment."""
    parts = _parts(folder)
    lowered = [p.lower() for p in parts]
    out: list[Path] = []
    if "site-packages" in lowered:
        tail = parts[lowered.index("site-packages") + 1:]
        out += [s.joinpath(*tail) for s in sites]
    if "bin" in lowered:
        out += [root.joinpath(*sub) for root in toolkits for sub in _TOOLKIT_DLL_DIRS]
    return out


def resolve(folders: tuple[str, ...], sites: list[Path], toolkits: list[Path],
            ) -> tuple[list[str], list[str]]:
    """(folders to register, recorded folders found nowhere), each once, in order."""
    use: dict[str, None] = {}
    missing: list[str] = []
    for folder in folders:
        if not _is_absolute(folder):
            continue
        if Path(folder).is_dir():
            use.setdefault(folder, None)
            continue
        found = next((str(p) for p in alternatives(folder, sites, toolkits) if p.is_dir()), None)
        if found is None:
            missing.append(folder)
        else:
            use.setdefault(found, None)
    return list(use), missing


class _Explain(importlib.abc.MetaPathFinder):
    """Adds the missing DLL folders to the ImportError of this package's extension modules."""

    def __init__(self, package: str, missing: list[str]) -> None:
        self.package, self.missing = package, missing

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if not name.startswith(self.package + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            spec.loader = _ExplainingLoader(spec.loader.name, spec.loader.path, self.missing)
        return spec


class _ExplainingLoader(importlib.machinery.ExtensionFileLoader):
    def __init__(self, name: str, path: str, missing: list[str]) -> None:
        super().__init__(name, path)
        self.missing = missing

    def create_module(self, spec: Any) -> Any:
        try:
            return super().create_module(spec)
        except ImportError as exc:
            raise ImportError(
                f"{exc}. The folders this module's DLLs were built against are gone and were "
                f"not found in this environment either: {'; '.join(self.missing)} (looked "
                "below site-packages and %CUDA_PATH%). Install the CUDA toolkit or the "
                "nvidia-* wheels the package was built with, or rebuild it with flashbuild "
                "in this environment.", name=exc.name, path=exc.path) from exc


def _register(folders: tuple[str, ...]) -> list[str]:
    """Register each recorded folder, or where it is now; return the folders registered."""
    if sys.platform != "win32":
        return []
    use, missing = resolve(folders, site_dirs(), toolkit_roots())
    for folder in use:
        _HANDLES.append(os.add_dll_directory(folder))
    if missing and __package__:
        sys.meta_path.insert(0, _Explain(__package__, missing))
    return use


REGISTERED: list[str] = _register(DLL_DIRS)
