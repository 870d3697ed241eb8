"""The interface every platform module implements."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path, PurePath

    from flashbuild.platforms.children import ChildTree
    from flashbuild.platforms.contain import Containment

PlatformName = Literal["linux", "windows"]
HostCompilerFamily = Literal["msvc", "gnu"]
#: What a build needs from the OS besides Python packages: Python's headers (`Python.h`, for
#: the sdists among flashbuild's dependencies and for the extensions), the `venv` module with
#: `ensurepip` (Debian splits it out as python3-venv), and a C++ compiler for nvcc's host pass.
Prerequisite = Literal["python-headers", "python-venv", "c++"]

#: Reads one registry value: (root key name, sub key, value name) -> value or None when absent.
#: Injected so the Windows long-path check runs in tests on Linux.
RegistryReader = Callable[[str, str, str], object | None]


class Platform(Protocol):
    """What differs between operating systems, as data and small pure functions.

    Functions take paths as `PurePath` of the platform's own flavour (`PureWindowsPath` on
    Windows) so the Windows behaviour can be exercised on Linux with recorded data.
    """

    # Read-only in the protocol so each class can narrow it to its own Literal.
    @property
    def name(self) -> PlatformName: ...

    #: Suffix of a plain shared library (a plugin): `.so` / `.dll`.
    shared_lib_suffix: str
    #: Separator of PATH-like variables.
    pathsep: str
    #: Name of the variable the dynamic loader searches (informational on Windows, where
    #: Python's extension loading ignores PATH; see FACTS.md "Windows DLL loading").
    library_path_var: str
    #: Whether an extension module must register its DLL folders itself (Windows: Python
    #: ignores PATH for a .pyd's dependencies); elsewhere RUNPATH does the job.
    registers_dll_dirs: bool
    #: Whether the loader shim loads, by path, the PyPI CUDA wheels' libraries a binary needs
    #: and its RUNPATH and the system would not find (Linux: the loader then matches them by
    #: soname; Windows registers their folders instead).
    preloads_wheel_libraries: bool
    #: The host compiler is MSVC, activated by flashbuild: torch's BuildExtension must be told
    #: to use that environment (DISTUTILS_USE_SDK=1), and `.cu` files that include torch's
    #: headers need -DUSE_CUDA (torch >= 2.7: C2872 "'std': ambiguous symbol").
    msvc_host: bool
    #: The path length build tools fail past unless long paths are enabled (Windows: 260),
    #: or None.
    path_limit: int | None
    #: The variable the host C++ compiler reads extra system include folders from, searched
    #: after every folder given on the command line: GCC/Clang `CPLUS_INCLUDE_PATH`, MSVC
    #: `INCLUDE` (which vcvarsall fills; flashbuild appends to it).
    host_include_var: str

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

    # --- environments and programs (flashbuild.platforms.environ) ------------------------
    def environ(self, env: Mapping[str, str]) -> MutableMapping[str, str]:
        """A copy of `env` that looks names up as this OS does (case-insensitively on
        Windows, where `Path` is `PATH`)."""
        ...

    def which(self, program: str, env: Mapping[str, str]) -> str | None:
        """Where `program` is on the PATH of `env` (PATHEXT on Windows), never searching the
        current directory; None when absent."""
        ...

    def writable(self, path: Path) -> bool:
        """Whether flashbuild may write into (folder) or replace (file) `path`."""
        ...

    def decode_output(self, data: bytes) -> str:
        """A tool's output as text: UTF-8 (with replacement characters for bad bytes); on
        Windows UTF-8 when it is valid, else the OEM code page cl, link and nvcc print in."""
        ...

    def quote_command(self, argv: Sequence[str]) -> str:
        """The command as a user could paste it into this OS's shell (`shlex.join`;
        `subprocess.list2cmdline` on Windows, which is the line the process receives)."""
        ...

    def replace(self, src: Path, dst: Path) -> None:
        """`os.replace(src, dst)`; on Windows retried for a moment while a scanner holds
        either file (flashbuild.platforms.files)."""
        ...

    # --- child processes (flashbuild.proc; see platforms/children.py) ----------------------
    def child_start_options(self) -> dict[str, Any]:
        """`subprocess.Popen` arguments that make a child the leader of its own tree (a new
        session on POSIX, a new process group on Windows)."""
        ...

    def containment(self) -> Containment:
        """How a tree's build scripts are contained on this machine (platforms/contain.py)."""
        ...

    def child_tree(self, proc: subprocess.Popen[Any]) -> ChildTree:
        """The tree a child started with `child_start_options()` leads (a process group on
        POSIX, a Job Object on Windows), to stop or kill as one."""
        ...

    def output_holders(self, pipe_id: int) -> list[str]:
        """The processes other than flashbuild that hold the pipe `pipe_id` (the `st_ino` of
        its read end, taken when it was made), as `pid N (name)`; empty where this OS cannot
        tell cheaply. For the note when a process outside a child's tree keeps its output
        open (proc.py)."""
        ...

    # --- detection (flashbuild.detect) -------------------------------------------------
    #: Which host compiler family nvcc uses here: MSVC's `cl` or GCC/clang.
    host_compiler_family: HostCompilerFamily
    #: Whether the PyPI CUDA wheel layout can be given to CMake as is. False on Linux (no
    #: lib64, no targets/, no libcudart.so: FACTS.md "A CUDA toolchain from PyPI").
    pypi_toolkit_usable_as_is: bool

    def toolkit_target_dir(self) -> str:
        """The `targets/<dir>` name of a standard toolkit for this machine (`x86_64-linux`)."""
        ...

    def user_cache_dir(self, env: Mapping[str, str]) -> Path:
        """Where flashbuild keeps its per-user cache (XDG_CACHE_HOME / LOCALAPPDATA)."""
        ...

    def vswhere_path(self, env: Mapping[str, str]) -> PurePath | None:
        """Where the Visual Studio installer puts vswhere.exe; None off Windows."""
        ...

    def long_paths_enabled(self, reader: RegistryReader | None = None) -> bool | None:
        """Whether Win32 long paths are on (None where the question does not apply or the
        value cannot be read)."""
        ...

    def memory(self) -> tuple[int, int] | None:
        """(available, total) bytes of RAM, or None when they cannot be read."""
        ...

    def os_release(self) -> str:
        """Linux's /etc/os-release (which distribution this is); empty elsewhere."""
        ...

    def install_command(self, needs: Sequence[Prerequisite], os_release: str = "") -> str:
        """The command that installs `needs` on this OS (`os_release`: the text of Linux's
        /etc/os-release, which names the distribution and so its package manager)."""
        ...

    def nvidia_driver_loaded(self) -> bool | None:
        """False when this OS can tell cheaply that no NVIDIA kernel driver is loaded (then
        NVML is not even imported); None when it cannot tell."""
        ...
