"""flashbuild loader shim: makes the DLLs this package's binaries need findable on Windows.

Python >= 3.8 loads an extension with LoadLibraryExW(LOAD_LIBRARY_SEARCH_DEFAULT_DIRS |
LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR): PATH and the current directory are ignored, so the CUDA
runtime's folder must be registered with os.add_dll_directory before the module is
imported (FACTS.md, "Windows DLL loading"). CUDA <= 12 keeps its DLLs in bin, the CUDA 13
installer in bin\\x64, the CUDA 13 PyPI wheel in bin\\x86_64.

On Linux this file does nothing: the binaries find their libraries through RPATH ($ORIGIN).
This file runs inside the installed package, without flashbuild, so it checks the OS itself.
flashbuild renders DLL_DIRS when it installs the package; edit the build, not this file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: Absolute folders that may hold the DLLs the binaries need (rendered by flashbuild).
DLL_DIRS: tuple[str, ...] = ()

#: The handles os.add_dll_directory returned: a folder stays registered only while its
#: handle is open, so they live as long as the module.
_HANDLES: list[object] = []


def _register(folders: tuple[str, ...]) -> list[str]:
    """Register each folder that is absolute and exists now; return the ones registered."""
    if sys.platform != "win32":
        return []
    registered: list[str] = []
    for folder in folders:
        path = Path(folder)
        # Never a relative folder: that would resolve against the current directory.
        if path.is_absolute() and path.is_dir():
            _HANDLES.append(os.add_dll_directory(str(path)))
            registered.append(str(path))
    return registered


REGISTERED: list[str] = _register(DLL_DIRS)
