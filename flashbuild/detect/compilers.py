"""Host compilers nvcc can use, and the window of versions a toolkit accepts.

Windows: every Visual Studio installation (`vswhere -all -prerelease -products * -format
json`), its MSVC toolsets (folders `VC\\Tools\\MSVC\\14.xx.yyyyy`, the default named in
`Microsoft.VCToolsVersion.default.txt`), and whether a developer prompt is active (VSCMD_VER /
VCToolsVersion / INCLUDE; the `cl` banner gives the active version). Linux: gcc / g++ / clang.
The accepted window is read from the toolkit's `crt/host_config.h`, with
`toolchain_facts.HOST_COMPILERS` as the fallback.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import TYPE_CHECKING, Literal

from packaging.version import InvalidVersion, Version

from flashbuild.detect.cache import NO_CACHE, ProbeCache, file_fingerprint
from flashbuild.errors import FlashbuildError
from flashbuild.toolchain_facts import HOST_COMPILERS

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flashbuild.platforms.base import Platform
    from flashbuild.proc import Runner

PROBE_TIMEOUT = 20.0


# --- the accepted window ------------------------------------------------------------------


@dataclass(frozen=True)
class HostWindow:
    """Host compiler versions one nvcc accepts."""

    msc_min: int | None
    """Lowest accepted `_MSC_VER` (inclusive)."""
    msc_end: int | None
    """First rejected `_MSC_VER` (exclusive upper bound)."""
    gcc_max: int | None
    """Newest accepted GCC major."""
    clang_max: int | None
    """Newest accepted clang major."""
    source: Literal["host_config.h", "table", "unknown"]

    def accepts_msc(self, msc: int) -> bool | None:
        if self.msc_min is None or self.msc_end is None:
            return None
        return self.msc_min <= msc < self.msc_end

    def to_json(self) -> dict[str, object]:
        return {"msc_min": self.msc_min, "msc_end": self.msc_end, "gcc_max": self.gcc_max,
                "clang_max": self.clang_max, "source": self.source}


_MSC = re.compile(r"#if\s+_MSC_VER\s*<\s*(\d+)\s*\|\|\s*_MSC_VER\s*>=\s*(\d+)")
_GCC = re.compile(r"#if\s+__GNUC__\s*>\s*(\d+)")
_CLANG = re.compile(r"#if\s+\(__clang_major__\s*>=\s*(\d+)\)[^\n]*\n(?:\s*\n)*"
                    r"#error -- unsupported clang version")


def parse_host_config(text: str) -> HostWindow:
    """The `_MSC_VER < N || _MSC_VER >= M`, `__GNUC__ > G` and plain-clang
    `__clang_major__ >= C` tests of crt/host_config.h."""
    msc = _MSC.search(text)
    gcc = _GCC.search(text)
    clang = _CLANG.search(text)
    if not (msc or gcc or clang):
        return HostWindow(None, None, None, None, "unknown")
    return HostWindow(
        int(msc[1]) if msc else None, int(msc[2]) if msc else None,
        int(gcc[1]) if gcc else None, int(clang[1]) - 1 if clang else None,
        "host_config.h")


def host_window(host_config: Path | None, release: Version | None) -> HostWindow:
    """The window from the header if it can be read, else toolchain_facts' table."""
    if host_config is not None:
        try:
            window = parse_host_config(host_config.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            window = HostWindow(None, None, None, None, "unknown")
        if window.source != "unknown":
            return window
    if release is not None:
        row = HOST_COMPILERS.get((release.major, release.minor))
        if row:
            return HostWindow(row.msc_min, row.msc_end, row.gcc_max, None, "table")
    return HostWindow(None, None, None, None, "unknown")


def cuda_accepting_msc(msc: int) -> str | None:
    """The oldest CUDA release (toolchain_facts.HOST_COMPILERS) whose nvcc accepts
    `_MSC_VER` = msc."""
    for (major, minor), row in sorted(HOST_COMPILERS.items()):
        if row.msc_min <= msc < row.msc_end:
            return f"{major}.{minor}"
    return None


def cuda_accepting_gcc(major: int) -> str | None:
    for (cmajor, cminor), row in sorted(HOST_COMPILERS.items()):
        if major <= row.gcc_max:
            return f"{cmajor}.{cminor}"
    return None


# --- findings -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HostCompiler:
    """A GCC-compatible compiler (Linux)."""

    name: str
    path: str
    version: Version | None

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "path": self.path,
                "version": str(self.version) if self.version else None}


@dataclass(frozen=True)
class MsvcToolset:
    """One `VC\\Tools\\MSVC\\14.xx.yyyyy` folder."""

    version: str
    """Folder name, e.g. 14.44.35207."""
    path: Path

    @property
    def msc_ver(self) -> int | None:
        """Toolset 14.4x is `cl` 19.4x, i.e. _MSC_VER 194x (FACTS.md)."""
        match = re.match(r"14\.(\d+)", self.version)
        return 1900 + int(match[1]) if match else None

    @property
    def vcvars_ver(self) -> str:
        """The `-vcvars_ver=` value that picks it (major.minor)."""
        return ".".join(self.version.split(".")[:2])

    def to_json(self) -> dict[str, object]:
        return {"version": self.version, "path": str(self.path), "msc_ver": self.msc_ver}


@dataclass(frozen=True)
class VisualStudio:
    """One Visual Studio installation as vswhere reports it."""

    instance_id: str
    display_name: str
    path: Path
    version: str
    """installationVersion: 17.x = VS 2022, 18.x = VS 2026."""
    product_line: str
    """catalog.productLineVersion: "2022", "2026"."""
    prerelease: bool
    toolsets: tuple[MsvcToolset, ...]
    default_toolset: str | None

    @property
    def default(self) -> MsvcToolset | None:
        for toolset in self.toolsets:
            if toolset.version == self.default_toolset:
                return toolset
        return self.toolsets[-1] if self.toolsets else None

    def to_json(self) -> dict[str, object]:
        return {"instance_id": self.instance_id, "display_name": self.display_name,
                "path": str(self.path), "version": self.version,
                "product_line": self.product_line, "prerelease": self.prerelease,
                "toolsets": [t.to_json() for t in self.toolsets],
                "default_toolset": self.default_toolset}


@dataclass(frozen=True)
class ActiveMsvc:
    """The MSVC environment of the current shell (a developer prompt / vcvarsall)."""

    activated: bool
    """VSCMD_VER, VCToolsVersion or INCLUDE set: vcvarsall ran."""
    vc_tools_version: str | None
    cl_path: str | None
    cl_version: Version | None
    """From the `cl` banner (stderr): 19.44.35207.1."""
    cl_target: str | None = None
    """The banner's target: `x64`, `x86`, `ARM64` (`… for x64`, `… für x86`)."""

    @property
    def msc_ver(self) -> int | None:
        if self.cl_version is None:
            return None
        return self.cl_version.major * 100 + self.cl_version.minor

    def to_json(self) -> dict[str, object]:
        return {"activated": self.activated, "vc_tools_version": self.vc_tools_version,
                "cl_path": self.cl_path,
                "cl_version": str(self.cl_version) if self.cl_version else None,
                "msc_ver": self.msc_ver, "cl_target": self.cl_target}


@dataclass(frozen=True)
class HostCompilers:
    """Everything found about host compilers on this machine."""

    family: Literal["msvc", "gnu"]
    gnu: tuple[HostCompiler, ...] = ()
    visual_studios: tuple[VisualStudio, ...] = ()
    active_msvc: ActiveMsvc | None = None
    cuda_host_compiler: str | None = None
    """NVCC_CCBIN / CUDAHOSTCXX when set: the compiler nvcc will actually use."""
    problems: tuple[str, ...] = ()

    @property
    def gxx(self) -> HostCompiler | None:
        """The compiler nvcc uses on Linux: CUDAHOSTCXX / NVCC_CCBIN if set, else g++."""
        wanted = Path(self.cuda_host_compiler).name if self.cuda_host_compiler else "g++"
        return next((c for c in self.gnu if c.name == wanted),
                    next((c for c in self.gnu if c.name == "g++"), None))

    def to_json(self) -> dict[str, object]:
        return {"family": self.family, "gnu": [c.to_json() for c in self.gnu],
                "visual_studios": [v.to_json() for v in self.visual_studios],
                "active_msvc": self.active_msvc.to_json() if self.active_msvc else None,
                "cuda_host_compiler": self.cuda_host_compiler,
                "problems": list(self.problems)}


# --- parsers ------------------------------------------------------------------------------

# `cl` banners are localised: "C/C++ Optimizing Compiler Version 19.44.35207.1 for x64",
# "C/C++-Optimierungscompiler Version 19.44.35207.1 für x64", "Compilateur d'optimisation
# Microsoft (R) C/C++ version 19.44.35207.1 pour x64", "用于 x64 的 Microsoft (R) C/C++ 优化编译器
# 19.44.35207.1 版" (FACTS.md "MSVC environment capture"): match the version number (19.xx.
# build, optionally .revision) and the target name, not the words around them.
_CL_VERSION = re.compile(r"(?<![\d.])(\d{2}\.\d{1,2}\.\d{4,5}(?:\.\d+)?)(?![\d.])")
_CL_TARGET = re.compile(r"(?<![\w-])(x64|x86|ARM64EC|ARM64|ARM|AMD64)(?![\w-])", re.IGNORECASE)
_GNU_VERSION = re.compile(r"(?<![\w.])(\d+\.\d+(?:\.\d+)?)")


def _banner_line(text: str) -> str:
    """The banner's first line that holds a compiler version (the copyright line does not)."""
    return next((line for line in text.splitlines() if _CL_VERSION.search(line)), "")


def parse_cl_banner(text: str) -> Version | None:
    """`Microsoft (R) C/C++ Optimizing Compiler Version 19.44.35207.1 for x64` → 19.44.35207.1,
    in any language."""
    match = _CL_VERSION.search(_banner_line(text))
    return Version(match[1]) if match else None


def parse_cl_target(text: str) -> str | None:
    """The target of a `cl` banner, lower-case (`x64`, `x86`, `arm64`); None when absent."""
    match = _CL_TARGET.search(_banner_line(text))
    if match is None:
        return None
    target = match[1].lower()
    return "x64" if target == "amd64" else target


def parse_gnu_version(text: str) -> Version | None:
    """First version on the first line of `gcc --version` / `clang --version`."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    match = _GNU_VERSION.search(first)
    try:
        return Version(match[1]) if match else None
    except InvalidVersion:
        return None


def parse_vswhere(text: str) -> list[dict[str, object]]:
    """vswhere's JSON array; raises ValueError when it is not one."""
    data = json.loads(text)
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ValueError("vswhere did not print a JSON array of objects")
    return data


#: Where a toolset keeps the 64-bit-hosted compiler for x64, relative to its folder.
TOOLSET_CL = ("bin", "HostX64", "x64", "cl.exe")


def _toolsets(install: Path, problems: list[str] | None = None,
              ) -> tuple[tuple[MsvcToolset, ...], str | None]:
    msvc = install / "VC" / "Tools" / "MSVC"
    found: list[MsvcToolset] = []
    if msvc.is_dir():
        for entry in msvc.iterdir():
            if not (entry.is_dir() and re.fullmatch(r"14\.\d+\.\d+", entry.name)):
                continue
            # A folder left by an uninstall, or a toolset installed without its x64
            # compiler (ARM-only components), cannot build: vcvarsall would pick it and fail.
            if not entry.joinpath(*TOOLSET_CL).is_file():
                if problems is not None:
                    problems.append(f"MSVC toolset folder {entry} has no "
                                    f"{PureWindowsPath(*TOOLSET_CL)}: not usable")
                continue
            found.append(MsvcToolset(entry.name, entry))
    found.sort(key=lambda t: Version(t.version))
    default_file = install / "VC" / "Auxiliary" / "Build" / "Microsoft.VCToolsVersion.default.txt"
    try:
        default = default_file.read_text(encoding="utf-8-sig").strip() or None
    except OSError:
        default = None
    return tuple(found), default


def visual_studios_from(items: list[dict[str, object]],
                        problems: list[str] | None = None) -> tuple[VisualStudio, ...]:
    out = []
    for item in items:
        catalog = item.get("catalog")
        catalog = catalog if isinstance(catalog, dict) else {}
        path = Path(str(item.get("installationPath", "")))
        toolsets, default = _toolsets(path, problems)
        out.append(VisualStudio(
            instance_id=str(item.get("instanceId", "")),
            display_name=str(item.get("displayName", "")),
            path=path,
            version=str(item.get("installationVersion", "")),
            product_line=str(catalog.get("productLineVersion", "")),
            prerelease=bool(item.get("isPrerelease", False)),
            toolsets=toolsets,
            default_toolset=default,
        ))
    return tuple(out)


# --- probes -------------------------------------------------------------------------------


def _probe_vswhere(env: Mapping[str, str], runner: Runner, platform: Platform,
                   cache: ProbeCache, problems: list[str]) -> tuple[VisualStudio, ...]:
    vswhere = platform.vswhere_path(env)
    if vswhere is None:
        return ()
    program = runner.which(str(vswhere), env) or runner.which("vswhere", env)
    if program is None:
        problems.append(f"vswhere was not found at {vswhere}: is Visual Studio installed?")
        return ()

    def ask() -> list[dict[str, object]] | None:
        try:
            done = runner.run([program, "-all", "-prerelease", "-products", "*",
                               "-format", "json", "-utf8"], env=env, timeout=PROBE_TIMEOUT,
                              check=False)
            return parse_vswhere(done.stdout)
        except FlashbuildError as exc:
            problems.append(f"vswhere failed: {exc.what}")
        except ValueError as exc:
            problems.append(f"vswhere printed something that is not its JSON list: {exc}")
        return None

    items = cache.fetch("vswhere", file_fingerprint(Path(program)), ask,
                        encode=lambda v: v, decode=_decode_items)
    return visual_studios_from(items or [], problems)


def _decode_items(value: object) -> list[dict[str, object]] | None:
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return value
    return None


def _probe_active_msvc(env: Mapping[str, str], runner: Runner,
                       problems: list[str]) -> ActiveMsvc:
    # `env` has Windows' case-insensitive names here (probe_host_compilers made it so):
    # `dict(os.environ)` spells the variable VCTOOLSVERSION.
    activated = any(env.get(k) for k in ("VSCMD_VER", "VCToolsVersion", "INCLUDE"))
    cl = runner.which("cl", env)
    version = target = None
    if cl is not None:
        try:
            done = runner.run([cl], env=env, timeout=PROBE_TIMEOUT, check=False)
            version = parse_cl_banner(done.output)
            target = parse_cl_target(done.output)
            if version is None:
                problems.append(f"`cl` printed no version banner: {done.output.strip()[:200]!r}")
        except FlashbuildError as exc:
            problems.append(f"`cl` failed: {exc.what}")
    return ActiveMsvc(activated, env.get("VCToolsVersion") or None, cl, version, target)


def _decode_version(value: object) -> Version | None:
    try:
        return Version(str(value)) if isinstance(value, str) else None
    except InvalidVersion:
        return None


def _probe_gnu(env: Mapping[str, str], runner: Runner, cache: ProbeCache,
               problems: list[str]) -> tuple[HostCompiler, ...]:
    found = []
    names = ["gcc", "g++", "clang", "clang++"]
    override = env.get("NVCC_CCBIN") or env.get("CUDAHOSTCXX")
    if override and Path(override).name not in names:
        names.append(override)
    for name in names:
        path = runner.which(name, env)
        if path is None:
            continue

        def ask(path: str = path, name: str = name) -> Version | None:
            try:
                done = runner.run([path, "--version"], env=env, timeout=PROBE_TIMEOUT,
                                  check=False)
            except FlashbuildError as exc:
                problems.append(f"`{name} --version` failed: {exc.what}")
                return None
            version = parse_gnu_version(done.stdout or done.output)
            if version is None:
                problems.append(f"`{name} --version` printed no version")
            return version

        version = cache.fetch("compiler-version", file_fingerprint(Path(path)), ask,
                              encode=lambda v: str(v) if v is not None else None,
                              decode=_decode_version)
        found.append(HostCompiler(Path(name).name, path, version))
    return tuple(found)


def probe_host_compilers(env: Mapping[str, str], runner: Runner, platform: Platform, *,
                         cache: ProbeCache = NO_CACHE) -> HostCompilers:
    """The host compilers of this platform. Never raises."""
    problems: list[str] = []
    env = platform.environ(env)
    override = env.get("NVCC_CCBIN") or env.get("CUDAHOSTCXX") or None
    if platform.host_compiler_family == "msvc":
        studios = _probe_vswhere(env, runner, platform, cache, problems)
        active = _probe_active_msvc(env, runner, problems)
        return HostCompilers("msvc", visual_studios=studios, active_msvc=active,
                             cuda_host_compiler=override, problems=tuple(problems))
    gnu = _probe_gnu(env, runner, cache, problems)
    return HostCompilers("gnu", gnu=gnu, cuda_host_compiler=override, problems=tuple(problems))
