"""Host compilers and nvcc's accepted window, from recorded headers, banners and vswhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from flashbuild.detect.cache import ProbeCache
from flashbuild.detect.compilers import (
    cuda_accepting_msc,
    host_window,
    parse_cl_banner,
    parse_gnu_version,
    parse_host_config,
    probe_host_compilers,
)
from flashbuild.platforms.linux import LinuxPlatform
from flashbuild.platforms.windows import WindowsPlatform
from tests.fakes import ReplayRunner

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "detect"


def test_host_config_windows_of_12_9_and_13_0() -> None:
    w129 = parse_host_config((FIX / "host_config_12.9.h").read_text())
    w130 = parse_host_config((FIX / "host_config_13.0.h").read_text())
    assert (w129.msc_min, w129.msc_end, w129.gcc_max, w129.clang_max) == (1910, 1950, 14, 19)
    assert (w130.msc_min, w130.msc_end, w130.gcc_max, w130.clang_max) == (1920, 1950, 15, 20)
    assert w130.source == "host_config.h"
    assert w130.accepts_msc(1944) and not w130.accepts_msc(1950) and not w130.accepts_msc(1916)
    assert w129.accepts_msc(1916)


def test_window_falls_back_to_the_facts_table(tmp_path: Path) -> None:
    garbage = tmp_path / "host_config.h"
    garbage.write_text("/* nothing useful */\n")
    window = host_window(garbage, Version("13.2"))
    assert (window.msc_min, window.msc_end, window.source) == (1920, 1960, "table")
    assert host_window(None, None).source == "unknown"
    assert host_window(tmp_path / "missing.h", Version("12.8")).gcc_max == 14


def test_cuda_release_that_accepts_an_msvc() -> None:
    assert cuda_accepting_msc(1944) == "12.8"
    assert cuda_accepting_msc(1950) == "13.2"
    assert cuda_accepting_msc(1990) is None


@pytest.mark.parametrize(("name", "version"), [("cl-banner-19.44.txt", "19.44.35207.1"),
                                               ("cl-banner-19.50.txt", "19.50.35717")])
def test_cl_banners(name: str, version: str) -> None:
    assert parse_cl_banner((FIX / name).read_text()) == Version(version)


def test_gnu_versions() -> None:
    assert parse_gnu_version("g++ (Debian 12.2.0-14+deb12u1) 12.2.0\nCopyright") == \
        Version("12.2.0")
    assert parse_gnu_version("Ubuntu clang version 18.1.3 (1ubuntu1)\nTarget: x86_64") == \
        Version("18.1.3")
    assert parse_gnu_version("") is None
    assert parse_gnu_version("no digits here") is None


def _vs_tree(root: Path) -> str:
    """The recorded vswhere JSON with its paths pointing into a fake tree under root."""
    vs22 = root / "Microsoft Visual Studio" / "2022" / "BuildTools"
    vs26 = root / "Microsoft Visual Studio" / "18" / "Community"
    for vs, toolsets, default in ((vs22, ["14.38.33130", "14.44.35207"], "14.44.35207"),
                                  (vs26, ["14.50.35717"], "14.50.35717")):
        for toolset in toolsets:
            cl = vs / "VC" / "Tools" / "MSVC" / toolset / "bin" / "HostX64" / "x64" / "cl.exe"
            cl.parent.mkdir(parents=True)
            cl.write_bytes(b"MZ")
        build = vs / "VC" / "Auxiliary" / "Build"
        build.mkdir(parents=True)
        (build / "Microsoft.VCToolsVersion.default.txt").write_text(default + "\n")
    text = (FIX / "vswhere-2022-2026.json").read_text()
    # Windows paths in the recording; this test's tree uses the host's separators. The root is
    # pasted into JSON strings, so it is JSON-escaped (a Windows tmp_path has backslashes).
    return text.replace("\\\\", "/").replace("{ROOT}", json.dumps(str(root))[1:-1])


@pytest.mark.parametrize("folder", ["plain", "back\\slash"])
def test_vswhere_with_vs2022_and_vs2026(tmp_path: Path, folder: str) -> None:
    # `back\slash`: a root holding a backslash, as every Windows path does, must survive
    # being pasted into the recorded JSON.
    runner = ReplayRunner(responses={("vswhere",): _vs_tree(tmp_path / folder)})
    found = probe_host_compilers({}, runner, WindowsPlatform())
    assert found.family == "msvc" and found.problems == ()
    vs22, vs26 = found.visual_studios
    assert (vs22.product_line, vs26.product_line) == ("2022", "2026")
    assert [t.version for t in vs22.toolsets] == ["14.38.33130", "14.44.35207"]
    assert vs22.default is not None and vs22.default.msc_ver == 1944
    assert vs22.default.vcvars_ver == "14.44"
    assert vs26.default is not None and vs26.default.msc_ver == 1950
    assert found.active_msvc is not None and not found.active_msvc.activated
    assert runner.calls[0][1:] == ("-all", "-prerelease", "-products", "*", "-format", "json",
                                   "-utf8")


def test_active_developer_prompt_is_read_from_env_and_cl_banner() -> None:
    runner = ReplayRunner()
    # cl prints its banner on stderr.
    runner.add("cl", err=(FIX / "cl-banner-19.44.txt").read_text())
    env = {"VSCMD_VER": "17.14.13", "VCToolsVersion": "14.44.35207"}
    found = probe_host_compilers(env, runner, WindowsPlatform())
    active = found.active_msvc
    assert active is not None and active.activated and active.msc_ver == 1944
    assert active.vc_tools_version == "14.44.35207"
    assert any("vswhere" in p for p in found.problems)  # none installed in this replay


def test_vswhere_garbage_and_hang_are_problems(tmp_path: Path) -> None:
    garbage = probe_host_compilers({}, ReplayRunner(responses={("vswhere",): "<html>"}),
                                   WindowsPlatform())
    assert garbage.visual_studios == () and "not its JSON list" in garbage.problems[0]
    hung = probe_host_compilers({}, ReplayRunner(hangs={"vswhere"}), WindowsPlatform())
    assert hung.visual_studios == () and "did not finish" in hung.problems[0]


def test_vswhere_answer_is_cached(tmp_path: Path) -> None:
    vswhere = tmp_path / "vswhere.exe"
    vswhere.write_text("exe")
    runner = ReplayRunner(responses={("vswhere",): _vs_tree(tmp_path)},
                          found={"vswhere": str(vswhere)})
    cache = ProbeCache(tmp_path / "cache")
    first = probe_host_compilers({}, runner, WindowsPlatform(), cache=cache)
    second = probe_host_compilers({}, runner, WindowsPlatform(), cache=cache)
    assert first == second and len([c for c in runner.calls if "vswhere" in c[0]]) == 1


def test_linux_gcc_and_clang() -> None:
    runner = ReplayRunner(responses={
        ("gcc", "--version"): "gcc (GCC) 16.1.0\n", ("g++", "--version"): "g++ (GCC) 16.1.0\n",
        ("clang", "--version"): "clang version 20.1.0\n"})
    found = probe_host_compilers({}, runner, LinuxPlatform())
    assert found.family == "gnu"
    assert [(c.name, str(c.version)) for c in found.gnu] == [
        ("gcc", "16.1.0"), ("g++", "16.1.0"), ("clang", "20.1.0")]
    assert found.gxx is not None and found.gxx.name == "g++"


def test_cudahostcxx_picks_the_compiler_nvcc_uses() -> None:
    runner = ReplayRunner(responses={("g++", "--version"): "g++ (GCC) 16.1.0\n",
                                     ("g++-14", "--version"): "g++-14 (GCC) 14.2.0\n"})
    found = probe_host_compilers({"CUDAHOSTCXX": "g++-14"}, runner, LinuxPlatform())
    assert found.gxx is not None and found.gxx.version == Version("14.2.0")
