"""Windows: `.pyd`/`.dll`, `os.add_dll_directory`, MSVC, toolkits under Program Files."""

from __future__ import annotations

from pathlib import Path, PurePath, PureWindowsPath
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flashbuild.platforms.base import HostCompilerFamily, RegistryReader

_LONG_PATHS_KEY = r"SYSTEM\CurrentControlSet\Control\FileSystem"


class WindowsPlatform:
    name: Literal["windows"] = "windows"
    exe_suffix = ".exe"
    shared_lib_suffix = ".dll"
    pathsep = ";"
    registers_dll_dirs = True
    library_path_var = "PATH"
    host_compiler_family: HostCompilerFamily = "msvc"
    # The wheel's nvcc.profile links from $(TOP)/lib/x64, where the .lib files are
    # (FACTS.md "A CUDA toolchain from PyPI"): nothing to reshape.
    pypi_toolkit_usable_as_is = True

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

    def toolkit_target_dir(self) -> str:
        return "x64"

    def user_cache_dir(self, env: Mapping[str, str]) -> Path:
        base = env.get("LOCALAPPDATA") or env.get("APPDATA") or str(Path.home())
        return Path(base) / "flashbuild" / "Cache"

    def vswhere_path(self, env: Mapping[str, str]) -> PurePath | None:
        program_files = env.get("ProgramFiles(x86)") or env.get("PROGRAMFILES(X86)") \
            or r"C:\Program Files (x86)"
        return PureWindowsPath(program_files) / "Microsoft Visual Studio" / "Installer" \
            / "vswhere.exe"

    def long_paths_enabled(self, reader: RegistryReader | None = None) -> bool | None:
        read = reader or _read_registry
        try:
            value = read("HKEY_LOCAL_MACHINE", _LONG_PATHS_KEY, "LongPathsEnabled")
        except OSError:
            return None
        if value is None:
            # Absent = the Windows default, off.
            return False
        return value == 1

    def nvidia_driver_loaded(self) -> bool | None:
        return None


def _read_registry(root: str, key: str, name: str) -> object | None:
    """The real registry, only reachable on Windows."""
    import importlib

    # Through importlib so type-checking on Linux (where typeshed hides winreg) stays clean.
    winreg: Any = importlib.import_module("winreg")
    hive = getattr(winreg, root)
    try:
        with winreg.OpenKey(hive, key) as handle:
            value, _kind = winreg.QueryValueEx(handle, name)
    except FileNotFoundError:
        return None
    return cast("object | None", value)
