"""Windows: `.pyd`/`.dll`, `os.add_dll_directory`, MSVC, toolkits under Program Files."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path, PurePath, PureWindowsPath
from typing import TYPE_CHECKING, Any, Literal, cast

from flashbuild.platforms.environ import CaseInsensitiveEnv, find_program, windows_extensions
from flashbuild.platforms.files import replace_with_retry
from flashbuild.toolchain_facts import TOOLKIT_DLL_SUBDIRS

if TYPE_CHECKING:
    from collections.abc import Mapping, MutableMapping, Sequence

    from flashbuild.platforms.base import HostCompilerFamily, Prerequisite, RegistryReader
    from flashbuild.platforms.children import ChildTree
    from flashbuild.platforms.contain import Containment
    from flashbuild.runner import Completed, Runner

_LONG_PATHS_KEY = r"SYSTEM\CurrentControlSet\Control\FileSystem"


class WindowsPlatform:
    name: Literal["windows"] = "windows"
    shared_lib_suffix = ".dll"
    pathsep = ";"
    registers_dll_dirs = True
    preloads_wheel_libraries = False
    msvc_host = True
    path_limit: int | None = 260
    host_include_var = "INCLUDE"
    library_path_var = "PATH"
    host_compiler_family: HostCompilerFamily = "msvc"
    # The wheel's nvcc.profile links from $(TOP)/lib/x64, where the .lib files are
    # (FACTS.md "A CUDA toolchain from PyPI"): nothing to reshape.
    pypi_toolkit_usable_as_is = True

    def path(self, text: str) -> PurePath:
        return PureWindowsPath(text)

    def exe(self, name: str) -> str:
        return name if name.lower().endswith(".exe") else name + ".exe"

    def environ(self, env: Mapping[str, str]) -> MutableMapping[str, str]:
        return CaseInsensitiveEnv(env)

    def which(self, program: str, env: Mapping[str, str]) -> str | None:
        lookup = CaseInsensitiveEnv(env)
        return find_program(program, lookup.get("PATH") or "", pathsep=self.pathsep,
                            extensions=windows_extensions(program, lookup.get("PATHEXT")))

    def writable(self, path: Path) -> bool:
        # Python maps the read-only *attribute* to the mode bits. On a folder Windows ignores
        # that attribute for creating files (Explorer sets it on every "customised" folder,
        # e.g. one with a custom icon), so only a file's attribute means "do not write".
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            return os.access(path, os.W_OK)
        return os.access(path, os.W_OK) and bool(mode & 0o222)

    def decode_output(self, data: bytes) -> str:
        # cl, link and nvcc print in the console's OEM code page (cp437, cp850, cp932...), so
        # a German `cl` banner or a path with `é` is not UTF-8; Python tools that print UTF-8
        # (and all-ASCII output) decode as UTF-8, which OEM text with non-ASCII bytes is
        # practically never.
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data.decode(oem_encoding(), errors="replace")

    def quote_command(self, argv: Sequence[str]) -> str:
        # What CreateProcess receives for an argv list: paste-able into cmd or PowerShell for
        # paths with spaces, where shlex's single quotes mean nothing to cmd.
        return subprocess.list2cmdline(argv)

    def replace(self, src: Path, dst: Path) -> None:
        # Defender and the indexer open new files briefly: WinError 5/32 for a moment.
        replace_with_retry(src, dst)

    def child_start_options(self) -> dict[str, Any]:
        from flashbuild.platforms.children import CREATE_NEW_PROCESS_GROUP

        # Its own console process group: a Ctrl-C in the console reaches flashbuild only, and
        # flashbuild passes it on as CTRL_BREAK to the group (children.JobObject.stop).
        return {"creationflags": CREATE_NEW_PROCESS_GROUP}

    def containment(self) -> Containment:
        from flashbuild.platforms.contain import no_containment  # start-up

        # A Job Object ends every process the script starts; the network is left as it is
        # (Windows has no unprivileged network namespace): only the proxy fallback applies.
        return no_containment("a Job Object and proxies to a closed port")

    def child_tree(self, proc: subprocess.Popen[Any]) -> ChildTree:
        from flashbuild.platforms.children import JobObject, Kernel32Jobs

        return JobObject(proc, Kernel32Jobs())

    def output_holders(self, pipe_id: int) -> list[str]:
        # Windows has no cheap way to list a pipe's holders (handles are per process, and
        # enumerating them needs NtQuerySystemInformation); the note names none.
        del pipe_id
        return []

    def standard_toolkit_roots(self, env: Mapping[str, str]) -> list[str]:
        program_files = env.get("ProgramFiles", env.get("PROGRAMFILES", r"C:\Program Files"))
        return [program_files + r"\NVIDIA GPU Computing Toolkit\CUDA\v*"]

    def toolkit_dll_dirs(self, root: PurePath) -> list[PurePath]:
        # CUDA <= 12 keeps DLLs in bin; the CUDA 13 installer moved them to bin\x64 and the
        # CUDA 13 PyPI wheel to bin\x86_64 (toolchain_facts.TOOLKIT_DLL_SUBDIRS).
        return [root.joinpath(*sub) for sub in TOOLKIT_DLL_SUBDIRS]

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

    def memory(self) -> tuple[int, int] | None:
        try:
            import psutil

            vm = psutil.virtual_memory()
        except Exception:
            return None
        return int(vm.available), int(vm.total)

    def os_release(self) -> str:
        return ""

    def install_command(self, needs: Sequence[Prerequisite], os_release: str = "") -> str:
        steps = []
        if "python-headers" in needs or "python-venv" in needs:
            # python.org's installer has both; the Microsoft Store and embeddable
            # distributions may lack the headers (`include\Python.h`).
            steps.append("install Python from python.org (`winget install Python.Python.3.12`)")
        if "c++" in needs:
            steps.append("install Visual Studio 2022 (or its Build Tools) with the \"Desktop "
                         "development with C++\" workload")
        return "; ".join(steps)

    def nvidia_driver_loaded(self) -> bool | None:
        return None


def oem_code_page() -> int | None:
    """The console OEM code page (GetOEMCP), None where it cannot be read (off Windows)."""
    import ctypes

    windll = getattr(ctypes, "windll", None)
    if windll is None:
        return None
    return int(windll.kernel32.GetOEMCP())


def oem_encoding() -> str:
    """Python's codec for the OEM code page; cp437 (US) when it cannot be read or Python has
    no codec for it."""
    import codecs

    page = oem_code_page()
    name = f"cp{page}" if page else "cp437"
    try:
        codecs.lookup(name)
    except LookupError:
        return "cp437"
    return name


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


# --- capturing the environment a batch file leaves (vcvarsall.bat) -------------------------

#: What `cmd /u` writes the output of its internal commands (`set`) in, to a pipe or a file.
SET_OUTPUT_ENCODING = "utf-16-le"


#: The variables that carry the batch file and the output file into cmd's command line.
BATCH_VAR = "FLASHBUILD_BATCH"
SET_FILE_VAR = "FLASHBUILD_SET_FILE"


def comspec(env: Mapping[str, str]) -> str:
    """The command interpreter Windows itself starts: `%ComSpec%` (normally
    `C:\\Windows\\System32\\cmd.exe`), not whatever `cmd` comes first on PATH."""
    return CaseInsensitiveEnv(env).get("ComSpec") or "cmd"


def cmd_quote(text: str) -> str:
    """`text` as one quoted word for cmd.exe: inside double quotes `&`, `|`, `<`, `>`, `^`
    and `(`/`)` are plain characters. A `"` cannot appear in a Windows path; `%` is only
    expanded when the quoted text is part of the command line, which `batch_env_argv` avoids
    by passing it through a variable (a variable's value is not expanded again)."""
    return '"' + text.replace('"', "") + '"'


def batch_env_argv(script: PurePath, args: Sequence[str], out_file: PurePath, *,
                   env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """`%ComSpec% /u /d /c call %FLASHBUILD_BATCH% <args> && set > %FLASHBUILD_SET_FILE%`,
    one word per item, and the two variables (each value a cmd-quoted path) to add to the
    environment it runs in.

    `/u` makes cmd write `set` as UTF-16-LE; without it `set` comes out in the console code
    page, and a profile such as `C:\\Users\\José` arrives mangled in TEMP, TMP, LIB and PATH
    (FACTS.md "MSVC environment capture"; setuptools decodes `cmd /u` output the same way).
    `set` writes into a file of ours rather than the pipe: the batch file's own messages stay
    on the pipe in the console code page, where the runner reads them for an error message.

    The paths travel in variables, already in quotes, because they cannot be quoted on the
    command line: on Windows the argv goes through `subprocess.list2cmdline`, which quotes
    only a word with a space and escapes an embedded quote with a backslash, an escape
    cmd.exe does not know. A bare `C:\\Users\\R&D\\...\\set.txt` splits the line at `&`
    ("'D\\...' is not recognized") and a `^` in a profile name is eaten as cmd's escape
    character ("path not found"). cmd expands `%VAR%` before it parses the line, so the
    quotes in the value protect the path, and the value never goes through list2cmdline.
    `call` before the first word keeps cmd's /c quote stripping away from the line (`call`
    re-expands `%` and doubles `^` in its own arguments, so only a batch *path* containing
    those is still at risk: vcvarsall.bat sits under Program Files). `/d` skips AutoRun
    commands from the registry."""
    argv = [comspec(env or {}), "/u", "/d", "/c", "call", f"%{BATCH_VAR}%", *args, "&&",
            "set", ">", f"%{SET_FILE_VAR}%"]
    return argv, {BATCH_VAR: cmd_quote(str(script)), SET_FILE_VAR: cmd_quote(str(out_file))}


def parse_set_output(text: str) -> CaseInsensitiveEnv:
    """`set`'s `NAME=value` lines -> an environment with Windows' case-insensitive names (a
    later `Path=` replaces an earlier `PATH=` under the first spelling)."""
    env = CaseInsensitiveEnv()
    for line in text.lstrip("\ufeff").splitlines():
        if "=" not in line or line.startswith("="):
            continue  # banners, and cmd's hidden `=C:=C:\\` per-drive variables
        name, value = line.split("=", 1)
        if not name or (" " in name.strip() and not name.startswith("ProgramFiles")):
            continue
        env[name] = value.rstrip("\r")
    return env


def capture_batch_env(runner: Runner, script: PurePath, args: Sequence[str], *,
                      env: Mapping[str, str], timeout: float = 120.0,
                      ) -> tuple[Completed, CaseInsensitiveEnv]:
    """Run a batch file such as vcvarsall.bat and return the run and the environment it
    leaves (empty when `set` wrote nothing)."""
    run_env = CaseInsensitiveEnv(env)
    # VsDevCmd otherwise starts a background PowerShell for telemetry that inherits the
    # captured pipe and can hold the capture open until the timeout (conan-io/conan#13196).
    run_env["VSCMD_SKIP_SENDTELEMETRY"] = "1"
    folder = Path(tempfile.mkdtemp(prefix="flashbuild-env-"))
    out_file = folder / "set.txt"
    argv, carried = batch_env_argv(script, args, out_file, env=run_env)
    run_env.update(carried)
    try:
        done = runner.run(argv, env=run_env, timeout=timeout, check=False)
        try:
            raw = out_file.read_bytes()
        except OSError:
            raw = b""
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    # Under /u cmd's own `echo` lines reach the pipe as UTF-16 too; the runner read them as
    # UTF-8, which leaves a NUL after each ASCII character. Drop those so an error message
    # quoting the batch file's output is readable.
    done = replace(done, stdout=done.stdout.replace("\0", ""),
                   stderr=done.stderr.replace("\0", ""))
    got = parse_set_output(raw.decode(SET_OUTPUT_ENCODING, errors="replace"))
    for name in carried:  # ours, not the batch file's
        got.pop(name, None)
    return done, got
