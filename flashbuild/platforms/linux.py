"""Linux: ELF `.so` files, RPATH / LD_LIBRARY_PATH, toolkits under /usr/local/cuda*."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath, PurePosixPath
from typing import Literal


class LinuxPlatform:
    name: Literal["linux"] = "linux"
    exe_suffix = ""
    shared_lib_suffix = ".so"
    pathsep = ":"
    library_path_var = "LD_LIBRARY_PATH"

    def path(self, text: str) -> PurePath:
        return PurePosixPath(text)

    def exe(self, name: str) -> str:
        return name

    def standard_toolkit_roots(self, env: Mapping[str, str]) -> list[str]:
        return ["/usr/local/cuda", "/usr/local/cuda-*", "/opt/cuda", "/usr/lib/cuda"]

    def toolkit_dll_dirs(self, root: PurePath) -> list[PurePath]:
        return [root / "lib64", root / "lib", root / "targets" / "x86_64-linux" / "lib"]

    def pypi_cuda_root(self, site_packages: PurePath, major: int) -> PurePath:
        return site_packages / "nvidia" / f"cu{major}"
