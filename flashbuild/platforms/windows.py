"""Windows: `.pyd`/`.dll`, `os.add_dll_directory`, MSVC, toolkits under Program Files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath, PureWindowsPath
from typing import Literal


class WindowsPlatform:
    name: Literal["windows"] = "windows"
    exe_suffix = ".exe"
    shared_lib_suffix = ".dll"
    pathsep = ";"
    library_path_var = "PATH"

    def path(self, text: str) -> PurePath:
        return PureWindowsPath(text)

    def exe(self, name: str) -> str:
        return name if name.lower().endswith(".exe") else name + ".exe"

    def standard_toolkit_roots(self, env: Mapping[str, str]) -> list[str]:
        program_files = env.get("ProgramFiles", env.get("PROGRAMFILES", r"C:\Program Files"))
        return [program_files + r"\NVIDIA GPU Computing Toolkit\CUDA\v*"]

    def toolkit_dll_dirs(self, root: PurePath) -> list[PurePath]:
        # CUDA <= 12 keeps DLLs in bin; the CUDA 13 installer moved them to bin\x64 and the
        # CUDA 13 PyPI wheel to bin\x86_64 (FACTS.md, "Windows DLL loading").
        return [root / "bin" / "x64", root / "bin" / "x86_64", root / "bin"]

    def pypi_cuda_root(self, site_packages: PurePath, major: int) -> PurePath:
        return site_packages / "nvidia" / f"cu{major}"
