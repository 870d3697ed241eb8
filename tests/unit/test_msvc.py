"""MSVC activation from inside flashbuild, replaying a recorded `vcvarsall x64 && set`."""

from __future__ import annotations

import subprocess
from pathlib import Path, PureWindowsPath

import pytest
from packaging.version import Version

from flashbuild.building import msvc
from flashbuild.detect.compilers import ActiveMsvc, HostWindow, MsvcToolset, VisualStudio
from flashbuild.errors import ToolchainError
from flashbuild.proc import Completed
from tests.fakes import ReplayRunner, Responder, cmd_parse, set_target

SET = (Path(__file__).resolve().parent.parent / "fixtures" / "build" /
       "vcvarsall_x64_14.44_set.txt").read_text(encoding="utf-8")
CUDA_13_0 = HostWindow(1920, 1950, 15, None, "host_config.h")
CUDA_13_2 = HostWindow(1920, 1960, 15, None, "table")


def _vs(line: str, version: str, toolsets: list[str], prerelease: bool = False) -> VisualStudio:
    root = Path(f"C:\\Program Files\\Microsoft Visual Studio\\{line}\\Enterprise")
    return VisualStudio(
        instance_id=line, display_name=f"Visual Studio Enterprise {line}", path=root,
        version=version, product_line=line, prerelease=prerelease,
        toolsets=tuple(MsvcToolset(t, root / "VC" / "Tools" / "MSVC" / t) for t in toolsets),
        default_toolset=toolsets[-1])


VS2022 = _vs("2022", "17.14.36310.24", ["14.38.33130", "14.44.35207"])
VS2026 = _vs("2026", "18.0.11111.16", ["14.50.35717"], prerelease=True)


def test_picks_newest_toolset_inside_nvcc_window() -> None:
    choice = msvc.pick_toolset([VS2026, VS2022], CUDA_13_0)
    assert choice.toolset.version == "14.44.35207"  # 14.50 (19.50) is outside 13.0's window
    assert choice.studio is VS2022
    # CUDA 13.2 accepts VS 2026.
    assert msvc.pick_toolset([VS2026, VS2022], CUDA_13_2).toolset.version == "14.50.35717"


def test_no_toolset_in_window_names_the_window() -> None:
    with pytest.raises(ToolchainError) as info:
        msvc.pick_toolset([VS2026], CUDA_13_0)
    assert "1920 <= _MSC_VER < 1950" in info.value.evidence
    assert "14.50.35717" in info.value.evidence


def test_vcvars_command_line() -> None:
    out = PureWindowsPath("C:\\Users\\José\\AppData\\Local\\Temp\\flashbuild-env-1\\set.txt")
    argv, carried = msvc.vcvars_argv(msvc.pick_toolset([VS2022], CUDA_13_0), out,
                                     env={"COMSPEC": "C:\\Windows\\system32\\cmd.exe"})
    # What CreateProcess (and so cmd.exe) receives on Windows: the runner passes a list, which
    # subprocess joins with list2cmdline. cmd does not understand backslash-escaped quotes,
    # so no path is on the line: each comes in a variable, quoted. `/u`: `set` writes
    # UTF-16-LE, so José's TEMP survives. The interpreter is %ComSpec%, not a PATH lookup.
    line = subprocess.list2cmdline(argv)
    assert line == ("C:\\Windows\\system32\\cmd.exe /u /d /c call %FLASHBUILD_BATCH% x64 "
                    "-vcvars_ver=14.44 && set > %FLASHBUILD_SET_FILE%")
    assert '\\"' not in line
    assert carried == {
        "FLASHBUILD_BATCH": '"C:\\Program Files\\Microsoft Visual Studio\\2022\\Enterprise\\'
                            'VC\\Auxiliary\\Build\\vcvarsall.bat"',
        "FLASHBUILD_SET_FILE": f'"{out}"'}


@pytest.mark.parametrize("profile", ["C:\\Users\\R&D", "C:\\Users\\a^b", "C:\\Users\\x(1)",
                                     "C:\\Users\\José Müller", "C:\\Users\\100%"])
def test_vcvars_command_line_survives_cmd_metacharacters_in_the_profile(profile: str) -> None:
    # Before: `set > C:\\Users\\R&D\\...` went out bare; cmd split the line at `&` ("'D\\…'
    # is not recognized") and ate `^` as its escape ("path not found").
    out = PureWindowsPath(profile + "\\AppData\\Local\\Temp\\flashbuild-env-1\\set.txt")
    argv, carried = msvc.vcvars_argv(msvc.pick_toolset([VS2022], CUDA_13_0), out)
    words = cmd_parse(subprocess.list2cmdline(argv), carried)
    assert words[words.index(">") + 1:] == [str(out)]
    assert [w for w in words if w in ("&", "&&", "|", "||", "<", ">")] == ["&&", ">"]
    assert words[:6] == ["cmd", "/u", "/d", "/c", "call", "C:\\Program Files\\Microsoft Visual "
                         "Studio\\2022\\Enterprise\\VC\\Auxiliary\\Build\\vcvarsall.bat"]


def test_parse_recorded_set_output() -> None:
    env = msvc.parse_set_output(SET)
    assert env["VCToolsVersion"] == "14.44.35207"
    assert env["VSCMD_VER"] == "17.14.8"
    assert env["INCLUDE"].startswith("C:\\Program Files\\Microsoft Visual Studio\\2022")
    assert "ucrt\\x64" in env["LIB"]
    assert env["WindowsSdkDir"] == "C:\\Program Files (x86)\\Windows Kits\\10\\"
    assert env["CommonProgramFiles(x86)"] == "C:\\Program Files (x86)\\Common Files"
    assert not any("\r" in v for v in env.values())
    assert not any(k.startswith("*") or k.startswith("[") for k in env)  # banner lines
    # Case-insensitive names: `Path` is found as PATH.
    assert msvc.get_ci(env, "PATH") is not None and "HostX64\\x64" in msvc.get_ci(env, "path")  # type: ignore[operator]


def test_later_spelling_replaces_earlier() -> None:
    env = msvc.parse_set_output("PATH=a\r\nPath=b\r\n=C:=C:\\\r\n")
    assert env == {"PATH": "b"}


def _writes_set(runner: ReplayRunner, text: str, code: int = 0,
                encoding: str = "utf-16-le") -> Responder:
    """A replayed `cmd /u … && set > FILE`: `set`'s lines land in FILE, as cmd writes them."""
    def answer(argv: tuple[str, ...]) -> Completed:
        set_target(runner.envs[-1]).write_bytes(text.encode(encoding))
        return Completed(argv, code, "", "")
    return answer


def test_activate_runs_vcvarsall_through_the_runner() -> None:
    runner = ReplayRunner()
    runner.responses[("cmd",)] = _writes_set(runner, SET)
    got = msvc.activate({"PATH": "C:\\Windows"}, runner, [VS2026, VS2022], CUDA_13_0, None)
    assert got.env["VCToolsVersion"] == "14.44.35207"
    assert got.msc_ver == 1944
    assert "-vcvars_ver=14.44" in got.source
    assert runner.calls and "-vcvars_ver=14.44" in runner.calls[0]


def test_failed_vcvarsall_is_a_toolchain_error() -> None:
    runner = ReplayRunner()
    runner.responses[("cmd",)] = Completed(("cmd",), 1, "",
                                           "[ERROR:vcvars.bat] Toolset 14.44 not found")
    with pytest.raises(ToolchainError) as info:
        msvc.activate({}, runner, [VS2022], CUDA_13_0, None)
    assert "Toolset 14.44 not found" in info.value.evidence


def test_already_activated_shell_is_respected() -> None:
    env = msvc.parse_set_output(SET)
    active = ActiveMsvc(True, "14.44.35207", "C:\\...\\cl.exe", Version("19.44.35207.1"))
    runner = ReplayRunner()  # no vcvarsall call allowed
    got = msvc.activate(env, runner, [VS2022], CUDA_13_0, active)
    assert got.env == env and "already active" in got.source and not runner.calls
    # An activated shell whose cl is outside the window is not used: vcvarsall picks 14.44.
    too_new = ActiveMsvc(True, "14.50.35717", "C:\\...\\cl.exe", Version("19.50.35717"))
    assert not msvc.already_active({"VSCMD_VER": "18.0"}, too_new, CUDA_13_0)
    assert not msvc.already_active({}, active, CUDA_13_0)


def test_msvc_flags_where_they_apply() -> None:
    f12 = msvc.msvc_flags(Version("12.9"), None)
    assert "-Xcompiler=/Zc:__cplusplus" in f12.cuda and "-Xcompiler=/bigobj" in f12.cuda
    assert "/utf-8" in f12.cxx and "/EHsc" in f12.cxx
    assert not any("preprocessor" in f for f in f12.cuda)
    # /Zc:preprocessor from the CCCL of CUDA 13.2 on (13.0's does not check); -DUSE_CUDA from
    # torch 2.7 on (toolchain_facts: one threshold each, shared with scan).
    assert not any("preprocessor" in f for f in msvc.msvc_flags(Version("13.1.1"), None).cuda)
    f13 = msvc.msvc_flags(Version("13.2.0"), Version("2.7.0+cu128"))
    assert "-Xcompiler=/Zc:preprocessor" in f13.cuda and "-DUSE_CUDA" in f13.cuda
    assert "-DUSE_CUDA" not in msvc.msvc_flags(Version("13.2"), Version("2.6.0")).cuda
    assert isinstance(msvc.pick_toolset([VS2022], CUDA_13_0).vcvarsall, PureWindowsPath)
