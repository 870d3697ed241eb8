"""Activate MSVC from inside flashbuild (no Developer Prompt needed).

Given the Visual Studio installations detection found (vswhere + the toolset folders) and the
`_MSC_VER` window the chosen nvcc accepts (read from its `crt/host_config.h`), pick the newest
toolset inside the window, run `vcvarsall.bat x64 -vcvars_ver=14.44 && set` through the
runner, and take the environment it prints. A shell that is already activated (VSCMD_VER /
VCToolsVersion set) with a `cl` inside the window is respected as is. FACTS.md, "Host
compilers accepted by nvcc": `vswhere -latest` may pick VS 2026 (19.50), which CUDA <= 13.1
rejects, hence choosing by window, not by "latest".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PureWindowsPath
from typing import TYPE_CHECKING

from packaging.version import Version

from flashbuild.errors import ToolchainError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.detect.compilers import ActiveMsvc, HostWindow, MsvcToolset, VisualStudio
    from flashbuild.proc import Runner

#: Variables whose presence means vcvarsall already ran in this shell.
_ACTIVATED = ("VSCMD_VER", "VCToolsVersion")


@dataclass(frozen=True)
class MsvcChoice:
    """The Visual Studio and toolset to activate."""

    studio: VisualStudio
    toolset: MsvcToolset

    @property
    def vcvarsall(self) -> PureWindowsPath:
        return PureWindowsPath(str(self.studio.path)) / "VC" / "Auxiliary" / "Build" / \
            "vcvarsall.bat"


@dataclass(frozen=True)
class MsvcEnv:
    """The build environment and where it came from."""

    env: dict[str, str]
    source: str
    """`already active (…)` or `vcvarsall … -vcvars_ver=14.44`."""
    msc_ver: int | None


def pick_toolset(studios: Sequence[VisualStudio], window: HostWindow) -> MsvcChoice:
    """The newest toolset whose `_MSC_VER` nvcc accepts, across every installation."""
    inside: list[MsvcChoice] = []
    seen: list[str] = []
    for studio in studios:
        for toolset in studio.toolsets:
            msc = toolset.msc_ver
            seen.append(f"{studio.display_name}: {toolset.version} (_MSC_VER {msc})")
            if msc is not None and window.accepts_msc(msc) is not False:
                inside.append(MsvcChoice(studio, toolset))
    if not inside:
        lo, hi = window.msc_min, window.msc_end
        raise ToolchainError(
            "no installed MSVC toolset is accepted by the chosen nvcc",
            evidence=f"nvcc accepts {lo} <= _MSC_VER < {hi} ({window.source}); found: "
            + ("; ".join(seen) or "no Visual Studio installation"),
            fix="install an accepted toolset with the Visual Studio Installer (Individual "
            "components → MSVC v143 14.4x build tools), or use a newer CUDA",
        )
    return max(inside, key=lambda c: (Version(c.toolset.version), not c.studio.prerelease))


def vcvars_argv(choice: MsvcChoice, arch: str = "x64") -> list[str]:
    """`cmd /d /c call "<vcvarsall.bat>" x64 -vcvars_ver=14.44 && set`, one word per item.

    No quotes of our own: on Windows the argv goes through `subprocess.list2cmdline`, which
    escapes an embedded quote with a backslash, an escape cmd.exe does not know (a
    pre-quoted `/s /c ""<bat>" x64 && set"` reaches cmd as backslash-quote garbage and
    fails). list2cmdline quotes the path plainly because it has spaces; `call` puts a word
    before that first quote, so cmd's /c quote stripping leaves the line as it is."""
    return ["cmd", "/d", "/c", "call", str(choice.vcvarsall), arch,
            f"-vcvars_ver={choice.toolset.vcvars_ver}", "&&", "set"]


def parse_set_output(text: str) -> dict[str, str]:
    """`set`'s `NAME=value` lines → an environment. Windows variable names are
    case-insensitive: a later `Path=` replaces an earlier `PATH=` under the first spelling."""
    env: dict[str, str] = {}
    spelling: dict[str, str] = {}
    for line in text.splitlines():
        if "=" not in line or line.startswith("="):
            continue  # banners, and cmd's hidden `=C:=C:\\` per-drive variables
        name, value = line.split("=", 1)
        if not name or (" " in name.strip() and not name.startswith("ProgramFiles")):
            continue
        key = spelling.setdefault(name.upper(), name)
        env[key] = value.rstrip("\r")
    return env


def get_ci(env: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive lookup (Windows semantics)."""
    upper = name.upper()
    return next((v for k, v in env.items() if k.upper() == upper), None)


def already_active(env: Mapping[str, str], active: ActiveMsvc | None,
                   window: HostWindow) -> bool:
    """True when this shell ran vcvarsall and its `cl` is inside nvcc's window."""
    if not any(get_ci(env, v) for v in _ACTIVATED):
        return False
    if active is None or active.msc_ver is None:
        return False
    return window.accepts_msc(active.msc_ver) is not False


def activate(env: Mapping[str, str], runner: Runner, studios: Sequence[VisualStudio],
             window: HostWindow, active: ActiveMsvc | None) -> MsvcEnv:
    """The environment to build in: this shell's when already activated inside the window,
    else vcvarsall's for the chosen toolset."""
    if already_active(env, active, window):
        assert active is not None
        return MsvcEnv(dict(env), f"already active (VCToolsVersion "
                       f"{get_ci(env, 'VCToolsVersion') or '?'}, cl {active.cl_version})",
                       active.msc_ver)
    choice = pick_toolset(studios, window)
    argv = vcvars_argv(choice)
    done = runner.run(argv, env=env, timeout=120, check=False)
    got = parse_set_output(done.stdout)
    if not done.ok or not get_ci(got, "INCLUDE") or not get_ci(got, "VCToolsVersion"):
        raise ToolchainError(
            f"vcvarsall.bat did not activate MSVC {choice.toolset.version}",
            evidence=f"exit code {done.returncode}; {done.output.strip()[-800:]}",
            fix="run the same command in a terminal to see why; or open an 'x64 Native Tools "
            "Command Prompt' and run flashbuild from it",
        )
    return MsvcEnv(got, f"vcvarsall {choice.studio.display_name} "
                   f"-vcvars_ver={choice.toolset.vcvars_ver}", choice.toolset.msc_ver)


@dataclass(frozen=True)
class MsvcFlags:
    cuda: tuple[str, ...]
    """For CMAKE_CUDA_FLAGS (host flags go through -Xcompiler)."""
    cxx: tuple[str, ...]
    """For CMAKE_CXX_FLAGS."""


def msvc_flags(cuda: Version | None, torch: Version | None) -> MsvcFlags:
    """The flags FACTS.md lists for MSVC builds, where they apply:
    /Zc:__cplusplus /bigobj /utf-8 /EHsc (CUTLASS-style code); /Zc:preprocessor for CCCL in
    CUDA 13.x; -DUSE_CUDA for torch >= 2.9 headers."""
    host = ["/Zc:__cplusplus", "/bigobj", "/utf-8", "/EHsc"]
    if cuda is not None and cuda >= Version("13.0"):
        host.append("/Zc:preprocessor")
    defines = ["-DUSE_CUDA"] if torch is not None and torch >= Version("2.9") else []
    return MsvcFlags(cuda=(*(f"-Xcompiler={f}" for f in host), *defines),
                     cxx=(*host, *defines))
