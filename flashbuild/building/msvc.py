"""Activate MSVC from inside flashbuild (no Developer Prompt needed).

Given the Visual Studio installations detection found (vswhere + the toolset folders) and the
`_MSC_VER` window the chosen nvcc accepts (read from its `crt/host_config.h`), pick the newest
toolset inside the window, run `vcvarsall.bat x64 -vcvars_ver=14.44 && set` through the
runner (the platform layer's `capture_batch_env`: `cmd /u`, telemetry off), and take the
environment it prints. A shell that is already activated (VSCMD_VER / VCToolsVersion set) for
x64 with a `cl` inside the window is respected as is. FACTS.md, "Host
compilers accepted by nvcc": `vswhere -latest` may pick VS 2026 (19.50), which CUDA <= 13.1
rejects, hence choosing by window, not by "latest".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath, PureWindowsPath
from typing import TYPE_CHECKING

from packaging.version import Version

from flashbuild.errors import ToolchainError
from flashbuild.platforms import windows as _windows
from flashbuild.platforms.environ import CaseInsensitiveEnv
from flashbuild.platforms.windows import batch_env_argv, capture_batch_env
from flashbuild.toolchain_facts import (
    MSVC_HOST_FLAGS,
    MSVC_TOOLSET_FOR_ALL_CUDA,
    USE_CUDA_DEFINE,
    ZC_PREPROCESSOR,
    msvc_needs_use_cuda,
    msvc_needs_zc_preprocessor,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flashbuild.detect.compilers import ActiveMsvc, HostWindow, MsvcToolset, VisualStudio
    from flashbuild.proc import Runner

#: Variables whose presence means vcvarsall already ran in this shell.
_ACTIVATED = ("VSCMD_VER", "VCToolsVersion")


#: Kept here for callers of msvc.parse_set_output; the platform layer owns the parsing.
parse_set_output = _windows.parse_set_output


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
    """A `CaseInsensitiveEnv` (Windows semantics): `env["PATH"]` finds `Path=`."""
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
            f"components → MSVC v143 {MSVC_TOOLSET_FOR_ALL_CUDA} build tools), or use a newer "
            "CUDA",
        )
    return max(inside, key=lambda c: (Version(c.toolset.version), not c.studio.prerelease))


def vcvars_args(choice: MsvcChoice, arch: str = "x64") -> list[str]:
    """vcvarsall.bat's arguments: the target and the toolset (`x64 -vcvars_ver=14.44`)."""
    return [arch, f"-vcvars_ver={choice.toolset.vcvars_ver}"]


def vcvars_argv(choice: MsvcChoice, out_file: PurePath, arch: str = "x64", *,
                env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The whole `cmd /u /d /c call <vcvarsall.bat> x64 -vcvars_ver=14.44 && set > <file>`
    command and the variables that carry its two paths (see
    `platforms.windows.batch_env_argv` for why it is spelled so)."""
    return batch_env_argv(choice.vcvarsall, vcvars_args(choice, arch), out_file, env=env)


def get_ci(env: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive lookup (Windows semantics), whatever kind of mapping `env` is."""
    return CaseInsensitiveEnv(env).get(name)


def target_arch(env: Mapping[str, str], active: ActiveMsvc | None) -> str | None:
    """What the shell's compiler targets: VsDevCmd's VSCMD_ARG_TGT_ARCH, else the `cl`
    banner's last word (`for x64`, `für x64`, `pour x86`)."""
    named = get_ci(env, "VSCMD_ARG_TGT_ARCH")
    if named:
        return named.strip().lower()
    if active is not None and active.cl_target:
        return active.cl_target.lower()
    return None


def host_arch(env: Mapping[str, str], active: ActiveMsvc | None) -> str | None:
    """What the shell's compiler runs as: VsDevCmd's VSCMD_ARG_HOST_ARCH, else the
    `bin\\Host<arch>\\<target>` folder `cl.exe` sits in."""
    named = get_ci(env, "VSCMD_ARG_HOST_ARCH")
    if named:
        return named.strip().lower()
    if active is not None and active.cl_path:
        parts = PureWindowsPath(active.cl_path).parts
        if len(parts) >= 3 and parts[-3].lower().startswith("host"):
            return parts[-3][4:].lower()
    return None


def already_active(env: Mapping[str, str], active: ActiveMsvc | None,
                   window: HostWindow) -> bool:
    """True when this shell ran vcvarsall **for x64, on x64** and its `cl` is inside nvcc's
    window.

    The default "Developer Command Prompt for VS" targets x86 (FACTS.md "MSVC environment
    capture"): its 32-bit `cl` cannot build against 64-bit Python and CUDA, so a shell is
    used as it is only when x64 is confirmed. The "x86_x64 Cross Tools" prompt targets x64
    with a 32-bit `cl` (bin\\Hostx86\\x64), which runs out of heap on CUTLASS-heavy units
    (C1060); a shell whose host is known to be anything but x64 is not used either, and
    vcvarsall x64 (the x64 native tools) is activated instead."""
    if not any(get_ci(env, v) for v in _ACTIVATED):
        return False
    if active is None or active.msc_ver is None:
        return False
    if target_arch(env, active) != "x64":
        return False
    if host_arch(env, active) not in (None, "x64"):
        return False
    return window.accepts_msc(active.msc_ver) is not False


def activate(env: Mapping[str, str], runner: Runner, studios: Sequence[VisualStudio],
             window: HostWindow, active: ActiveMsvc | None) -> MsvcEnv:
    """The environment to build in: this shell's when already activated for x64 inside the
    window, else vcvarsall's for the chosen toolset."""
    if already_active(env, active, window):
        assert active is not None
        return MsvcEnv(CaseInsensitiveEnv(env), f"already active (VCToolsVersion "
                       f"{get_ci(env, 'VCToolsVersion') or '?'}, cl {active.cl_version})",
                       active.msc_ver)
    choice = pick_toolset(studios, window)
    done, got = capture_batch_env(runner, choice.vcvarsall, vcvars_args(choice), env=env)
    if not done.ok or not got.get("INCLUDE") or not got.get("VCToolsVersion"):
        raise ToolchainError(
            f"vcvarsall.bat did not activate MSVC {choice.toolset.version}",
            evidence=f"exit code {done.returncode}; {done.output.strip()[-800:]}",
            fix="run the same command in a terminal to see why; or open an 'x64 Native Tools "
            "Command Prompt' and run flashbuild from it",
        )
    source = f"vcvarsall {choice.studio.display_name} -vcvars_ver={choice.toolset.vcvars_ver}"
    host = host_arch(env, active)
    if host not in (None, "x64") and target_arch(env, active) == "x64":
        source += (f" (this shell's {host}-hosted x64 cross compiler was not used: a 32-bit "
                   "cl runs out of heap on large units, C1060; vcvarsall x64 gives the x64 "
                   "native tools)")
    return MsvcEnv(got, source, choice.toolset.msc_ver)


@dataclass(frozen=True)
class MsvcFlags:
    cuda: tuple[str, ...]
    """For CMAKE_CUDA_FLAGS (host flags go through -Xcompiler)."""
    cxx: tuple[str, ...]
    """For CMAKE_CXX_FLAGS."""


def msvc_flags(cuda: Version | None, torch: Version | None) -> MsvcFlags:
    """The flags MSVC builds need, where they apply (toolchain_facts): the CUTLASS-style host
    flags always; /Zc:preprocessor for a CUDA whose CCCL checks for it; -DUSE_CUDA for a torch
    whose headers need it."""
    host = list(MSVC_HOST_FLAGS)
    if msvc_needs_zc_preprocessor(cuda):
        host.append(ZC_PREPROCESSOR)
    defines = [USE_CUDA_DEFINE] if msvc_needs_use_cuda(torch) else []
    return MsvcFlags(cuda=(*(f"-Xcompiler={f}" for f in host), *defines),
                     cxx=(*host, *defines))
