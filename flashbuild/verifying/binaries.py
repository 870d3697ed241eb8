"""Which shared libraries / DLLs a binary needs, and whether each resolves the way the loader
will resolve it.

Linux (ld.so(8)): a name with a slash is a path; otherwise DT_RPATH (only when there is no
DT_RUNPATH), LD_LIBRARY_PATH, DT_RUNPATH, the ld.so cache (`ldconfig -p`), then the default
folders. `$ORIGIN` is the binary's folder. Only direct dependencies are checked: each installed
binary is checked in turn.

Windows (Python ≥ 3.8 loads extension modules with LOAD_LIBRARY_SEARCH_DEFAULT_DIRS |
LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR, so PATH is ignored): the binary's own folder first
(LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR), then the application folder (python.exe's), the folders
the loader shim registers with `os.add_dll_directory` (their order among themselves is not
defined), then System32. API sets (`api-ms-win-*`, `ext-ms-*`) and KnownDLLs are resolved by
the system. Delay-loaded imports (MSVC `/DELAYLOAD`) are resolved at their first call, not
when the module loads: a missing one does not stop the import, so it is reported apart.
`nvcuda.dll` / `libcuda.so.1` come with the NVIDIA driver: absent on a machine without one,
which is a warning (the module cannot run here), not a build defect.

The OS-specific rule is chosen by the `Platform` passed in; the functions take every folder
and variable as arguments so the Windows rule runs in tests on Linux.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pefile
from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from flashbuild.errors import FlashbuildError
from flashbuild.platforms.environ import CaseInsensitiveEnv
from flashbuild.verifying.fatbin import (
    BinaryFormat,
    BinaryFormatError,
    Mapped,
    as_stream,
    map_regular,
    validate_elf,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.platforms.base import Platform
    from flashbuild.proc import Runner


class Resolution(StrEnum):
    FOUND = "found"
    SYSTEM = "system"
    DRIVER = "driver"
    MISSING = "missing"
    DRIVER_MISSING = "driver-missing"
    #: A delay-loaded DLL that is not found: the module imports, the first call into it fails.
    DELAYED_MISSING = "delayed-missing"


@dataclass(frozen=True)
class Dependency:
    """One needed library and where the loader would find it."""

    name: str
    resolution: Resolution
    path: str | None = None
    #: How it was found or where it was looked for.
    via: str = ""
    #: A delay-load import (Windows): loaded at its first call, not with the module.
    delayed: bool = False

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "resolution": str(self.resolution), "path": self.path,
                "via": self.via, "delayed": self.delayed}


@dataclass(frozen=True)
class LinkInfo:
    """What a binary's headers say it needs."""

    path: Path
    format: BinaryFormat
    needed: tuple[str, ...]
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    #: Delay-load imports (PE only), apart from `needed`: the loader does not load them with
    #: the module.
    delay_needed: tuple[str, ...] = ()


#: torch's own libraries (`libc10.so`, `libtorch_cuda.so`, `c10.dll`): a binary that needs
#: one is a torch extension, loaded after `import torch`.
TORCH_LIB = re.compile(r"^(lib)?(c10|torch|shm)(_\w+)?\.(so|dll)$", re.IGNORECASE)
#: Libraries the NVIDIA driver installs; never part of a build.
DRIVER_LIBS = frozenset({"nvcuda.dll", "libcuda.so.1", "libcuda.so", "nvml.dll",
                         "libnvidia-ml.so.1"})
#: The values of HKLM\\SYSTEM\\CurrentControlSet\\Control\\Session Manager\\KnownDLLs on
#: Windows 10/11 x64: always loaded from System32, never from a module's folder. DLLs that only
#: live in System32 (ucrtbase, version, bcrypt, dbghelp, …) are *not* KnownDLLs: a copy beside
#: the module wins over them, so they go through the ordinary search.
KNOWN_DLLS = frozenset(n.lower() for n in (
    "advapi32.dll", "clbcatq.dll", "combase.dll", "comdlg32.dll", "coml2.dll", "difxapi.dll",
    "gdi32.dll", "gdiplus.dll", "imagehlp.dll", "imm32.dll", "kernel32.dll", "msctf.dll",
    "msvcrt.dll", "normaliz.dll", "nsi.dll", "ole32.dll", "oleaut32.dll", "psapi.dll",
    "rpcrt4.dll", "sechost.dll", "setupapi.dll", "shcore.dll", "shell32.dll", "shlwapi.dll",
    "user32.dll", "wldap32.dll", "wow64.dll", "wow64cpu.dll", "wow64win.dll", "ws2_32.dll",
))
#: In every process before any module loads (the loader itself and kernel32's base): never
#: searched for, whatever the folders hold.
ALWAYS_LOADED = frozenset({"ntdll.dll", "kernelbase.dll"})
_API_SET = re.compile(r"^(api|ext)-ms-", re.IGNORECASE)
LINUX_DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")


def read_link_info(path: Path) -> LinkInfo:
    """DT_NEEDED / RPATH / RUNPATH of an ELF file, or the import table of a PE file."""
    with map_regular(path) as blob:
        if blob[:4] == b"\x7fELF":
            validate_elf(blob, str(path), what=f"{path.name} is a damaged ELF file")
            return _elf_info(path, blob)
        if blob[:2] == b"MZ":
            return _pe_info(path, blob)
        raise BinaryFormatError(f"{path.name} is not an ELF or PE binary",
                                evidence=f"first bytes {blob[:4].hex() or '(empty file)'}",
                                fix="rebuild and reinstall the module (`flashbuild build`)")


def _elf_info(path: Path, blob: Mapped) -> LinkInfo:
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    try:
        elf = ELFFile(as_stream(blob))
        for section in elf.iter_sections():
            if not isinstance(section, DynamicSection):
                continue
            for raw_tag in section.iter_tags():
                # pyelftools sets `needed` / `rpath` / `runpath` on the tag at run time.
                tag = cast("Any", raw_tag)
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag == "DT_RPATH":
                    rpath += [p for p in tag.rpath.split(":") if p]
                elif tag.entry.d_tag == "DT_RUNPATH":
                    runpath += [p for p in tag.runpath.split(":") if p]
    except (ELFError, ValueError, OSError, EOFError) as exc:
        raise BinaryFormatError(f"{path.name} is a damaged ELF file", evidence=f"{path}: {exc}",
                                fix="rebuild and reinstall the module (`flashbuild build`)"
                                ) from exc
    return LinkInfo(path, "elf", tuple(needed), tuple(rpath), tuple(runpath))


def _pe_info(path: Path, blob: Mapped) -> LinkInfo:
    try:
        pe = pefile.PE(data=blob, fast_load=True)
        pe.parse_data_directories(directories=[
            pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"],
            pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT"]])
    except pefile.PEFormatError as exc:
        raise BinaryFormatError(f"{path.name} is a damaged PE file", evidence=f"{path}: {exc}",
                                fix="rebuild and reinstall the module (`flashbuild build`)"
                                ) from exc
    def names(attr: str) -> list[str]:
        return [entry.dll.decode("ascii", "replace") for entry in getattr(pe, attr, [])]

    needed = tuple(dict.fromkeys(names("DIRECTORY_ENTRY_IMPORT")))
    delayed = tuple(n for n in dict.fromkeys(names("DIRECTORY_ENTRY_DELAY_IMPORT"))
                    if n.lower() not in {m.lower() for m in needed})
    return LinkInfo(path, "pe", needed, delay_needed=delayed)


def parse_ldconfig(text: str) -> dict[str, str]:
    """`ldconfig -p` → {soname: path}. Lines read `\tlibz.so.1 (libc6,x86-64) => /lib/…`; a
    bare `(libc6)` tag is a 32-bit library on a 64-bit system, used only when nothing else
    has that name."""
    cache: dict[str, str] = {}
    narrow: dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r"^\s+(\S+) \(([^)]*)\) => (.+)$", line)
        if not match:
            continue
        name, tags, target = match.groups()
        (narrow if tags.strip() == "libc6" else cache).setdefault(name, target.strip())
    return {**narrow, **cache}


def ld_cache(runner: Runner, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ld.so cache through `ldconfig -p`; empty (and the default folders only) when
    ldconfig is unavailable."""
    program = runner.which("ldconfig", env) or ("/sbin/ldconfig" if Path(
        "/sbin/ldconfig").is_file() else None)
    if program is None:
        return {}
    try:
        return parse_ldconfig(runner.run([program, "-p"], env=env, timeout=30).stdout)
    except FlashbuildError:
        return {}


def _expand_origin(entry: str, origin: Path) -> str:
    # Through Path so the folder reads with one kind of separator wherever verify runs
    # (`$ORIGIN/lib` on a Windows host would otherwise give `C:\…\pkg/lib`).
    return str(Path(entry.replace("${ORIGIN}", str(origin)).replace("$ORIGIN", str(origin))))


def _find_in(dirs: Sequence[tuple[str, str]], name: str) -> tuple[str, str] | None:
    for folder, why in dirs:
        candidate = Path(folder) / name
        if candidate.is_file():
            return str(candidate), why
    return None


def resolve_linux(info: LinkInfo, *, env: Mapping[str, str], cache: Mapping[str, str],
                  default_dirs: Sequence[str] = LINUX_DEFAULT_DIRS) -> tuple[Dependency, ...]:
    origin = info.path.parent
    out: list[Dependency] = []
    for name in info.needed:
        if "/" in name:
            where = Path(_expand_origin(name, origin))
            out.append(Dependency(name, Resolution.FOUND if where.is_file() else
                                  Resolution.MISSING, str(where), "path in DT_NEEDED"))
            continue
        dirs: list[tuple[str, str]] = []
        if not info.runpath:
            dirs += [(_expand_origin(d, origin), "RPATH") for d in info.rpath]
        dirs += [(d, "LD_LIBRARY_PATH") for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
        dirs += [(_expand_origin(d, origin), "RUNPATH") for d in info.runpath]
        hit = _find_in(dirs, name)
        if hit is None and name in cache:
            hit = (cache[name], "ld.so cache")
        if hit is None:
            hit = _find_in([(d, "default folder") for d in default_dirs], name)
        if hit is not None:
            kind = Resolution.DRIVER if name in DRIVER_LIBS else Resolution.FOUND
            out.append(Dependency(name, kind, hit[0], hit[1]))
        else:
            searched = [d for d, _ in dirs] + ["ld.so cache", *default_dirs]
            kind = Resolution.DRIVER_MISSING if name in DRIVER_LIBS else Resolution.MISSING
            out.append(Dependency(name, kind, None, "searched " + ", ".join(searched)))
    return tuple(out)


def unresolved(infos: Sequence[LinkInfo], *, cache: Mapping[str, str]) -> list[str]:
    """The libraries the binaries need that the Linux loader would find nowhere: not through
    their RPATH/RUNPATH, the ld.so cache or the default folders, LD_LIBRARY_PATH left out
    (the build's is not the user's). In order, each once; the driver's are not counted."""
    names: dict[str, None] = {}
    for info in infos:
        for dep in resolve_linux(info, env={}, cache=cache):
            if dep.resolution is Resolution.MISSING:
                names.setdefault(dep.name, None)
    return list(names)


def with_shim_preload(deps: Sequence[Dependency], files: Sequence[Path],
                      ) -> tuple[Dependency, ...]:
    """Resolve a missing library the package's loader shim loads before the package's code
    (a PyPI CUDA wheel's file, recorded at install): the loader matches it by soname."""
    by_name = {f.name: f for f in files if f.is_file()}
    out = []
    for dep in deps:
        hit = by_name.get(dep.name) if dep.resolution is Resolution.MISSING else None
        out.append(dep if hit is None else Dependency(
            dep.name, Resolution.FOUND, str(hit),
            "loaded by the package's loader shim before its binaries"))
    return tuple(out)


def resolve_windows(info: LinkInfo, *, env: Mapping[str, str], dll_dirs: Sequence[Path],
                    app_dir: Path | None = None) -> tuple[Dependency, ...]:
    lookup_env = CaseInsensitiveEnv(env)
    system_root = lookup_env.get("SystemRoot") or lookup_env.get("windir")
    system32 = Path(system_root, "System32") if system_root else None
    # LOAD_LIBRARY_SEARCH_DEFAULT_DIRS = the application folder, the AddDllDirectory folders,
    # System32; LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR puts the module's own folder before them.
    dirs: list[tuple[Path, str]] = [(info.path.parent, "the module's folder")]
    if app_dir is not None:
        dirs.append((app_dir, "the application folder"))
    dirs += [(d, "a loader-shim DLL folder") for d in dll_dirs]
    if system32 is not None:
        dirs.append((system32, "System32"))
    listing: dict[Path, dict[str, str]] = {}

    def lookup(folder: Path, name: str) -> str | None:
        # The Windows file system is case-insensitive: compare lower-cased names.
        if folder not in listing:
            try:
                listing[folder] = {p.name.lower(): str(p) for p in folder.iterdir()}
            except OSError:
                listing[folder] = {}
        return listing[folder].get(name.lower())

    out: list[Dependency] = []
    wanted = [(n, False) for n in info.needed] + [(n, True) for n in info.delay_needed]
    for name, delayed in wanted:
        low = name.lower()
        if _API_SET.match(low):
            out.append(Dependency(name, Resolution.SYSTEM, None, "API set (resolved by Windows)",
                                  delayed))
            continue
        if low in KNOWN_DLLS or low in ALWAYS_LOADED:
            where = lookup(system32, name) if system32 is not None else None
            why = "KnownDLLs (System32)" if low in KNOWN_DLLS else "loaded in every process"
            out.append(Dependency(name, Resolution.SYSTEM, where, why, delayed))
            continue
        hit = next(((p, why) for folder, why in dirs
                    if (p := lookup(folder, name)) is not None), None)
        if hit is not None:
            kind = Resolution.DRIVER if low in DRIVER_LIBS else Resolution.FOUND
            out.append(Dependency(name, kind, hit[0], hit[1], delayed))
            continue
        searched = "searched " + ", ".join(str(f) for f, _ in dirs)
        if low in DRIVER_LIBS:
            kind = Resolution.DRIVER_MISSING
        elif delayed:
            kind = Resolution.DELAYED_MISSING
            searched = "delay-loaded: the module imports, the first call into it fails; " \
                + searched
        else:
            kind = Resolution.MISSING
        out.append(Dependency(name, kind, None, searched, delayed))
    return tuple(out)


def application_dir(python: str | Path) -> Path:
    """The application folder the Windows loader searches when `python` imports a module.

    A venv's `Scripts\\python.exe` is only a launcher: it starts the base interpreter, so
    the process that loads the `.pyd` is the base `python.exe`, and `python3XY.dll` (every
    extension module imports it) lives beside that, not in `Scripts`. PEP 405's pyvenv.cfg,
    beside the executable or one folder up, names the base folder as `home`."""
    exe = Path(python)
    for folder in (exe.parent, exe.parent.parent):
        try:
            text = (folder / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip().lower() == "home" and value.strip():
                return Path(value.strip())
    return exe.parent


def resolve(info: LinkInfo, *, platform: Platform, env: Mapping[str, str] | None = None,
            runner: Runner | None = None, dll_dirs: Sequence[Path] = (),
            cache: Mapping[str, str] | None = None,
            app_dir: Path | None = None) -> tuple[Dependency, ...]:
    """Resolve `info`'s dependencies with the rule of `platform`."""
    environ = dict(os.environ if env is None else env)
    if platform.name == "windows":
        return resolve_windows(info, env=environ, dll_dirs=dll_dirs, app_dir=app_dir)
    if cache is None:
        cache = ld_cache(runner, environ) if runner is not None else {}
    return resolve_linux(info, env=environ, cache=cache)
