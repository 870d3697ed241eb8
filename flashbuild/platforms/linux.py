"""Linux: ELF `.so` files, RPATH / LD_LIBRARY_PATH, toolkits under /usr/local/cuda*."""

from __future__ import annotations

import os
import platform as _pyplatform
from pathlib import Path, PurePath, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from flashbuild.platforms.environ import find_program

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping, MutableMapping

    from flashbuild.platforms.base import HostCompilerFamily, RegistryReader
    from flashbuild.platforms.children import ChildTree


class LinuxPlatform:
    name: Literal["linux"] = "linux"
    exe_suffix = ""
    shared_lib_suffix = ".so"
    pathsep = ":"
    registers_dll_dirs = False
    msvc_host = False
    path_limit: int | None = None
    library_path_var = "LD_LIBRARY_PATH"
    host_compiler_family: HostCompilerFamily = "gnu"
    pypi_toolkit_usable_as_is = False

    def path(self, text: str) -> PurePath:
        return PurePosixPath(text)

    def exe(self, name: str) -> str:
        return name

    def environ(self, env: Mapping[str, str]) -> MutableMapping[str, str]:
        return dict(env)

    def which(self, program: str, env: Mapping[str, str]) -> str | None:
        return find_program(program, env.get("PATH", os.defpath), pathsep=self.pathsep,
                            need_exec=True)

    def writable(self, path: Path) -> bool:
        # os.access alone says yes to root for a folder marked read-only (chmod a-w); the
        # mode bits say what the owner meant, so both must allow writing.
        return os.access(path, os.W_OK) and bool(path.stat().st_mode & 0o222)

    def child_start_options(self) -> dict[str, Any]:
        return {"start_new_session": True}

    def child_tree(self, proc: subprocess.Popen[Any]) -> ChildTree:
        from flashbuild.platforms.children import ProcessGroup

        return ProcessGroup(proc)

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
