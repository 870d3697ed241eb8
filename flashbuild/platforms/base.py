"""The interface every platform module implements."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Literal, Protocol

PlatformName = Literal["linux", "windows"]


class Platform(Protocol):
    """What differs between operating systems, as data and small pure functions.

    Functions take paths as `PurePath` of the platform's own flavour (`PureWindowsPath` on
    Windows) so the Windows behaviour can be exercised on Linux with recorded data.
    """

    name: PlatformName
    #: `.exe` on Windows.
    exe_suffix: str
    #: Suffix of a plain shared library (a plugin): `.so` / `.dll`.
    shared_lib_suffix: str
    #: Separator of PATH-like variables.
    pathsep: str
    #: Name of the variable the dynamic loader searches (informational on Windows, where
    #: Python's extension loading ignores PATH; see FACTS.md "Windows DLL loading").
    library_path_var: str

    def path(self, text: str) -> PurePath:
        """A path of this platform's flavour."""
        ...

    def exe(self, name: str) -> str:
        """`nvcc` → `nvcc.exe` on Windows."""
        ...

    def standard_toolkit_roots(self, env: Mapping[str, str]) -> list[str]:
        """Glob patterns of the folders a CUDA installer puts toolkits in."""
        ...

    def toolkit_dll_dirs(self, root: PurePath) -> list[PurePath]:
        """Folders under a toolkit root that may hold the runtime libraries, in search order."""
        ...

    def pypi_cuda_root(self, site_packages: PurePath, major: int) -> PurePath:
        """Where PyPI's CUDA wheels unpack a toolkit (`nvidia/cu13`)."""
        ...
