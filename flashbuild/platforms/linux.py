"""Linux: ELF `.so` files, RPATH / LD_LIBRARY_PATH, toolkits under /usr/local/cuda*."""

from __future__ import annotations

import contextlib
import os
import platform as _pyplatform
import shlex
from pathlib import Path, PurePath, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from flashbuild.platforms.environ import find_program

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping, MutableMapping, Sequence

    from flashbuild.platforms.base import HostCompilerFamily, Prerequisite, RegistryReader
    from flashbuild.platforms.children import ChildTree
    from flashbuild.platforms.contain import Containment


#: Package names per distribution family (the first ID or ID_LIKE of /etc/os-release that
#: is listed here), with the command that installs them.
_PACKAGES: dict[str, tuple[str, dict[str, str]]] = {
    "debian": ("sudo apt install", {"python-headers": "python3-dev",
                                    "python-venv": "python3-venv", "c++": "g++"}),
    "fedora": ("sudo dnf install", {"python-headers": "python3-devel", "c++": "gcc-c++"}),
    "rhel": ("sudo dnf install", {"python-headers": "python3-devel", "c++": "gcc-c++"}),
    "suse": ("sudo zypper install", {"python-headers": "python3-devel", "c++": "gcc-c++"}),
    "arch": ("sudo pacman -S", {"python-headers": "python", "c++": "gcc"}),
    "alpine": ("sudo apk add", {"python-headers": "python3-dev", "c++": "g++"}),
}
_DESCRIBED = {"python-headers": "the Python development headers (Python.h)",
              "python-venv": "Python's venv module with ensurepip", "c++": "g++"}


def _readlink(path: Path) -> str:
    try:
        return str(path.readlink())
    except OSError:  # the fd closed meanwhile
        return ""


def distribution_ids(os_release: str) -> list[str]:
    """ID, then each ID_LIKE, of an /etc/os-release text (`ubuntu`, `debian`)."""
    ids: list[str] = []
    for line in os_release.splitlines():
        key, _sep, value = line.partition("=")
        if key.strip() in ("ID", "ID_LIKE"):
            ids += value.strip().strip("\"'").lower().split()
    return ids


def parse_meminfo(text: str) -> tuple[int, int] | None:
    """(MemAvailable, MemTotal) in bytes from /proc/meminfo (values are in kB)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _sep, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[key.strip()] = int(fields[0]) * 1024
    if "MemAvailable" in values and "MemTotal" in values:
        return values["MemAvailable"], values["MemTotal"]
    return None


class LinuxPlatform:
    name: Literal["linux"] = "linux"
    shared_lib_suffix = ".so"
    pathsep = ":"
    registers_dll_dirs = False
    preloads_wheel_libraries = True
    msvc_host = False
    path_limit: int | None = None
    host_include_var = "CPLUS_INCLUDE_PATH"
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

    def decode_output(self, data: bytes) -> str:
        return data.decode("utf-8", errors="replace")

    def quote_command(self, argv: Sequence[str]) -> str:
        return shlex.join(argv)

    def replace(self, src: Path, dst: Path) -> None:
        src.replace(dst)  # no scanner holds files here: a failure is real

    def child_start_options(self) -> dict[str, Any]:
        return {"start_new_session": True}

    def containment(self) -> Containment:
        from flashbuild.platforms.contain import linux_containment  # noqa: PLC0415  # start-up

        return linux_containment()

    def child_tree(self, proc: subprocess.Popen[Any]) -> ChildTree:
        from flashbuild.platforms.children import ProcessGroup  # noqa: PLC0415  # start-up

        return ProcessGroup(proc)

    def output_holders(self, pipe_id: int) -> list[str]:
        # /proc/<pid>/fd/<n> links read `pipe:[<inode>]`; psutil lists regular files only.
        # Processes of other users cannot be read and are skipped: a child's pipe is held by
        # processes it started, which run as this user.
        target, me, found = f"pipe:[{pipe_id}]", os.getpid(), []
        with contextlib.suppress(OSError), os.scandir("/proc") as entries:
            for entry in entries:
                if not entry.name.isdigit() or int(entry.name) == me:
                    continue
                try:
                    fds = list(Path(f"/proc/{entry.name}/fd").iterdir())
                    if not any(_readlink(fd) == target for fd in fds):
                        continue
                    name = Path(f"/proc/{entry.name}/comm").read_text().strip()
                except OSError:
                    continue
                found.append(f"pid {entry.name} ({name})")
        return found

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

    def memory(self) -> tuple[int, int] | None:
        # /proc/meminfo's MemAvailable is what psutil reports as `available`; reading it here
        # spares doctor importing psutil (0.1 s and more on a cold VM).
        try:
            text = Path("/proc/meminfo").read_text(encoding="ascii", errors="replace")
        except OSError:
            return None
        return parse_meminfo(text)

    def os_release(self) -> str:
        try:
            return Path("/etc/os-release").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def install_command(self, needs: Sequence[Prerequisite], os_release: str = "") -> str:
        family = next((i for i in distribution_ids(os_release) if i in _PACKAGES), None)
        if family is None:
            return ("install " + " and ".join(_DESCRIBED[n] for n in needs) +
                    " with your distribution's package manager")
        command, names = _PACKAGES[family]
        packages = list(dict.fromkeys(names[n] for n in needs if n in names))
        # Where the distribution has no separate venv package, python3 carries it.
        return f"{command} {' '.join(packages or ['python3'])}"

    def nvidia_driver_loaded(self) -> bool | None:
        # The kernel module publishes /proc/driver/nvidia (also inside GPU containers).
        return Path("/proc/driver/nvidia").exists()
