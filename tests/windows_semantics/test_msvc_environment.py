"""MSVC activation and Windows environments under Windows' own rules (issue 11, items 3-6).

`cmd_u_set_jose.utf16` is what `cmd /u /d /c call fake_vcvarsall.bat x64 && set > FILE` wrote
(wine 8.0's cmd.exe, recorded once with `FB_PROFILE=C:\\Users\\José Müller` in the inherited
environment, as USERPROFILE is on a real machine); `cmd_u_stdout.utf16` is what the same run
wrote to its stdout pipe. Both are replayed here through the runner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from packaging.version import Version

from flashbuild.building import msvc
from flashbuild.detect.compilers import (
    ActiveMsvc,
    HostWindow,
    MsvcToolset,
    VisualStudio,
    parse_cl_banner,
    parse_cl_target,
    probe_host_compilers,
)
from flashbuild.installing.install import check_writable
from flashbuild.platforms.environ import CaseInsensitiveEnv
from flashbuild.platforms.linux import LinuxPlatform
from flashbuild.platforms.windows import WindowsPlatform, capture_batch_env
from flashbuild.proc import Completed
from tests.fakes import ReplayRunner, set_target

FIX = Path(__file__).resolve().parent.parent / "fixtures"
SET_UTF16 = (FIX / "build" / "cmd_u_set_jose.utf16").read_bytes()
STDOUT_UTF16 = (FIX / "build" / "cmd_u_stdout.utf16").read_bytes()
CUDA_13_0 = HostWindow(1920, 1950, 15, None, "host_config.h")
JOSE = "C:\\Users\\José Müller"


def _vs() -> VisualStudio:
    root = Path("C:\\Program Files\\Microsoft Visual Studio\\2022\\Enterprise")
    return VisualStudio(
        instance_id="x", display_name="Visual Studio Enterprise 2022", path=root,
        version="17.14.36310.24", product_line="2022", prerelease=False,
        toolsets=(MsvcToolset("14.44.35207", root / "VC" / "Tools" / "MSVC" / "14.44.35207"),),
        default_toolset="14.44.35207")


def _cmd_u(set_bytes: bytes, code: int = 0) -> ReplayRunner:
    """A runner whose `cmd` writes `set_bytes` where the command line redirects `set`, and the
    recorded UTF-16 banner to its stdout (decoded as UTF-8, as the real runner does)."""
    runner = ReplayRunner()

    def answer(argv: tuple[str, ...]) -> Completed:
        set_target(runner.envs[-1]).write_bytes(set_bytes)
        return Completed(argv, code, STDOUT_UTF16.decode("utf-8", errors="replace"), "")

    runner.responses[("cmd",)] = answer
    return runner


def test_vcvarsall_capture_keeps_a_non_ascii_profile() -> None:
    # Item 3: `set` in the console code page, read as UTF-8, mangled José in TEMP/TMP/LIB/PATH.
    runner = _cmd_u(SET_UTF16)
    got = msvc.activate({"PATH": "C:\\Windows"}, runner, [_vs()], CUDA_13_0, None)
    assert got.env["TEMP"] == got.env["TMP"] == JOSE + "\\AppData\\Local\\Temp"
    assert got.env["LIB"].endswith(";" + JOSE + "\\lib")
    # Item 6: `Path=` (the spelling set prints) answers to PATH, and the cl folder comes first.
    assert got.env["PATH"].split(";")[:2] == [
        "C:\\Program Files\\Microsoft Visual Studio\\2022\\Enterprise\\VC\\Tools\\MSVC\\"
        "14.44.35207\\bin\\HostX64\\x64", JOSE + "\\bin"]
    assert list(got.env).count("Path") == 1 and "PATH" not in list(got.env)
    assert got.env["vctoolsversion"] == "14.44.35207"
    (argv,) = runner.calls
    assert argv[:3] == ("cmd", "/u", "/d")


def test_vcvarsall_runs_with_telemetry_off() -> None:
    # Item 5: VsDevCmd's telemetry PowerShell inherits the pipe and can stall the capture.
    runner = _cmd_u(SET_UTF16)
    msvc.activate({"PATH": "C:\\Windows", "vscmd_skip_sendtelemetry": "0"}, runner, [_vs()],
                  CUDA_13_0, None)
    (env,) = runner.envs
    assert env is not None and CaseInsensitiveEnv(env)["VSCMD_SKIP_SENDTELEMETRY"] == "1"
    assert sum(k.upper() == "VSCMD_SKIP_SENDTELEMETRY" for k in env) == 1


def test_failed_capture_quotes_the_banner_readably() -> None:
    runner = _cmd_u(b"", code=1)
    with pytest.raises(Exception, match="did not activate") as info:
        msvc.activate({}, runner, [_vs()], CUDA_13_0, None)
    evidence = getattr(info.value, "evidence", "")
    assert "[vcvarsall.bat] Environment initialized for: 'x64'" in evidence
    assert "\0" not in evidence


def test_capture_batch_env_decodes_utf16_itself(tmp_path: Path) -> None:
    done, env = capture_batch_env(_cmd_u(SET_UTF16), Path("C:\\vc\\vcvarsall.bat"), ["x64"],
                                  env={})
    assert done.ok and env["FB_PROFILE"] == JOSE and env["Tmp"] == env["TEMP"]


# --- item 4: an x86 prompt is not "already activated" --------------------------------------

X64_BANNER = "Microsoft (R) C/C++ Optimizing Compiler Version 19.44.35207.1 for x64\n"
X86_BANNER = "Microsoft (R) C/C++ Optimizing Compiler Version 19.44.35207.1 for x86\n"


def test_x86_developer_prompt_is_not_used_as_it_is() -> None:
    env = {"VSCMD_VER": "17.14.8", "VCToolsVersion": "14.44.35207", "VSCMD_ARG_TGT_ARCH": "x86"}
    x86 = ActiveMsvc(True, "14.44.35207", "C:\\cl.exe", Version("19.44.35207.1"), "x86")
    assert not msvc.already_active(env, x86, CUDA_13_0)
    runner = _cmd_u(SET_UTF16)
    got = msvc.activate(env, runner, [_vs()], CUDA_13_0, x86)
    assert got.source.startswith("vcvarsall") and runner.calls  # activated for x64 instead


def test_x64_prompt_by_variable_or_banner_is_respected() -> None:
    by_var = {"VSCMD_VER": "17.14.8", "vscmd_arg_tgt_arch": "x64"}
    unknown = ActiveMsvc(True, None, "C:\\cl.exe", Version("19.44.35207.1"), None)
    assert msvc.already_active(by_var, unknown, CUDA_13_0)
    banner_only = ActiveMsvc(True, None, "C:\\cl.exe", Version("19.44.35207.1"), "x64")
    assert msvc.already_active({"VCToolsVersion": "14.44.35207"}, banner_only, CUDA_13_0)
    # Neither says x64: not trusted.
    assert not msvc.already_active({"VSCMD_VER": "17.14.8"}, unknown, CUDA_13_0)


def test_probe_reads_the_banner_target_and_upper_case_names() -> None:
    # `dict(os.environ)` on Windows spells names in upper case: VCTOOLSVERSION.
    runner = ReplayRunner()
    runner.add("cl", err=X86_BANNER + "Copyright (C) Microsoft Corporation.\n")
    env = {"VSCMD_VER": "17.14.8", "VCTOOLSVERSION": "14.44.35207"}
    active = probe_host_compilers(env, runner, WindowsPlatform()).active_msvc
    assert active is not None and active.activated
    assert active.vc_tools_version == "14.44.35207" and active.cl_target == "x86"
    assert not msvc.already_active(env, active, CUDA_13_0)


# --- item 6: localised banners --------------------------------------------------------------

@pytest.mark.parametrize(("banner", "target"), [
    (X64_BANNER, "x64"),
    ("Microsoft (R) C/C++-Optimierungscompiler Version 19.44.35207.1 für x64", "x64"),
    ("Compilateur d'optimisation Microsoft (R) C/C++ version 19.44.35207.1 pour x86", "x86"),
    ("Microsoft (R) C/C++ Compilatore di ottimizzazione versione 19.44.35207.1 per ARM64",
     "arm64"),
    ("用于 x64 的 Microsoft (R) C/C++ 优化编译器 19.44.35207.1 版", "x64"),
    ("Microsoft(R) C/C++ Optimizing Compiler Version 19.44.35207.1 for x64\n"
     "Copyright (C) Microsoft Corporation.  All rights reserved.", "x64"),
])
def test_localised_cl_banners(banner: str, target: str) -> None:
    assert parse_cl_banner(banner) == Version("19.44.35207.1")
    assert parse_cl_target(banner) == target


def test_copyright_line_alone_is_no_version() -> None:
    assert parse_cl_banner("Copyright (C) Microsoft Corporation.  All rights reserved.") is None


# --- item 6: case-insensitive environments and program lookup --------------------------------

def test_case_insensitive_environment() -> None:
    env = CaseInsensitiveEnv({"Path": "a", "TEMP": "t"})
    env["PATH"] = "b"
    assert env["path"] == "b" and dict(env) == {"Path": "b", "TEMP": "t"}
    assert "temp" in env and env.get("Temp") == "t" and env.pop("TeMp") == "t"
    assert len(env) == 1 and env.copy() == {"Path": "b"}
    assert env.popitem() == ("Path", "b") and "PATH" not in env
    env.update({"a": "1"}, A="2")
    assert dict(env) == {"a": "2"}
    env.clear()
    env["A"] = "3"
    assert dict(env) == {"A": "3"}


def _exe(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(b"MZ")
    path.chmod(0o755)
    return path


def test_windows_lookup_reads_path_in_any_case_and_never_the_current_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stray = _exe(tmp_path / "work", "cl.exe")
    real = _exe(tmp_path / "msvc" / "bin", "cl.exe")
    monkeypatch.chdir(stray.parent)
    plat = WindowsPlatform()
    env = {"Path": f".;;{real.parent}", "PATHEXT": ".COM;.EXE"}
    assert plat.which("cl", env) == str(real)  # not ./cl.exe, though `.` comes first
    assert plat.which("cl.exe", {"path": str(real.parent)}) == str(real)
    assert plat.which("cl", {"PATH": "."}) is None
    assert plat.which("nvcc", env) is None


def test_linux_lookup_skips_empty_and_relative_entries(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    stray = _exe(tmp_path / "work", "nvcc")
    monkeypatch.chdir(stray.parent)
    assert LinuxPlatform().which("nvcc", {"PATH": ":.:bin"}) is None
    real = _exe(tmp_path / "cuda" / "bin", "nvcc")
    assert LinuxPlatform().which("nvcc", {"PATH": f"::{real.parent}"}) == str(real)


def test_toolset_folder_without_cl_is_not_offered(tmp_path: Path) -> None:
    vs = tmp_path / "VS"
    for toolset, has_cl in (("14.44.35207", True), ("14.50.35717", False)):
        folder = vs / "VC" / "Tools" / "MSVC" / toolset
        folder.mkdir(parents=True)
        if has_cl:
            _exe(folder / "bin" / "HostX64" / "x64", "cl.exe")
    vswhere = ('[{"instanceId": "a", "installationPath": ' + f'"{vs.as_posix()}"' +
               ', "installationVersion": "17.14", "displayName": "VS 2022"}]')
    found = probe_host_compilers({}, ReplayRunner(responses={("vswhere",): vswhere}),
                                 WindowsPlatform())
    (studio,) = found.visual_studios
    assert [t.version for t in studio.toolsets] == ["14.44.35207"]
    assert any("14.50.35717" in p and "cl.exe" in p for p in found.problems)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root: os.access is what Windows answers for such a folder")
def test_read_only_folder_attribute_does_not_refuse_an_install(tmp_path: Path) -> None:
    # Python shows a folder's read-only attribute (set by Explorer on "customised" folders)
    # as mode 0o555; Windows still lets files be created in it. Root here stands in for
    # Windows' answer to os.access (true: the attribute is ignored for folders).
    folder = tmp_path / "site-packages"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        check_writable(folder, [], platform=WindowsPlatform())
        with pytest.raises(Exception, match="cannot be written"):
            check_writable(folder, [], platform=LinuxPlatform())
        locked = folder / "old.pyd"
        folder.chmod(0o755)
        locked.write_bytes(b"")
        locked.chmod(0o444)  # a read-only *file* does stop the install on Windows too
        with pytest.raises(Exception, match="read-only"):
            check_writable(folder, [locked], platform=WindowsPlatform())
    finally:
        folder.chmod(0o755)


def test_x86_hosted_x64_cross_prompt_is_not_used_as_it_is() -> None:
    # Issue 20: the "x86_x64 Cross Tools" prompt targets x64 with a 32-bit cl
    # (bin\Hostx86\x64), which runs out of heap on CUTLASS-heavy units (C1060).
    cl = ("C:\\Program Files\\Microsoft Visual Studio\\2022\\Enterprise\\VC\\Tools\\MSVC\\"
          "14.44.35207\\bin\\Hostx86\\x64\\cl.exe")
    cross = ActiveMsvc(True, "14.44.35207", cl, Version("19.44.35207.1"), "x64")
    by_var = {"VSCMD_VER": "17.14.8", "VSCMD_ARG_TGT_ARCH": "x64", "VSCMD_ARG_HOST_ARCH": "x86"}
    by_path = {"VCToolsVersion": "14.44.35207"}  # a shell set up by hand: only cl's folder
    assert msvc.host_arch(by_var, cross) == "x86" and msvc.host_arch(by_path, cross) == "x86"
    assert not msvc.already_active(by_var, cross, CUDA_13_0)
    assert not msvc.already_active(by_path, cross, CUDA_13_0)
    runner = _cmd_u(SET_UTF16)
    got = msvc.activate(by_var, runner, [_vs()], CUDA_13_0, cross)
    assert runner.calls and got.source.startswith("vcvarsall")
    assert "x86-hosted x64 cross compiler was not used" in got.source and "C1060" in got.source
    native = ActiveMsvc(True, "14.44.35207", cl.replace("Hostx86", "Hostx64"),
                        Version("19.44.35207.1"), "x64")
    assert msvc.already_active({**by_var, "VSCMD_ARG_HOST_ARCH": "x64"}, native, CUDA_13_0)
    assert msvc.already_active(by_path, native, CUDA_13_0)
