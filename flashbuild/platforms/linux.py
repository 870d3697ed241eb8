"""Linux: ELF `.so` files, RPATH / LD_LIBRARY_PATH, toolkits under /usr/local/cuda*."""

from __future__ import annotations

import platform as _pyplatform
from pathlib import Path, PurePath, PurePosixPath
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flashbuild.platforms.base import HostCompilerFamily, RegistryReader


class LinuxPlatform:
    name: Literal["linux"] = "linux"
    exe_suffix = ""
    shared_lib_suffix = ".so"
    pathsep = ":"
    registers_dll_dirs = False
    library_path_var = "LD_LIBRARY_PATH"
    host_compiler_family: HostCompilerFamily = "gnu"
    pypi_toolkit_usable_as_is = False

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

    def toolkit_target_dir(self) -> str:
        # NVIDIA names the Arm server target `sbsa-linux`, x86-64 `x86_64-linux`.
        machine = _pyplatform.machine().lower()
        return "sbsa-linux" if machine in ("aarch64", "arm64") else "x86_64-linux"

    def user_cache_dir(self, env: Mapping[str, str]) -> Path:
        xdg = env.get("XDG_CACHE_HOME")
        if xdg:
            return Path(xdg) / "flashbuild"
        home = env.get("HOME") or str(Path.home())
        return Path(home) / ".cache" / "flashbuild"

    def vswhere_path(self, env: Mapping[str, str]) -> PurePath | None:
        return None

    def long_paths_enabled(self, reader: RegistryReader | None = None) -> bool | None:
        return None

    def nvidia_driver_loaded(self) -> bool | None:
        # The kernel module publishes /proc/driver/nvidia (also inside GPU containers).
        return Path("/proc/driver/nvidia").exists()
