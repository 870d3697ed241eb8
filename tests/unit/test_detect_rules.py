"""Every rule of the verdict table: one test (or more) that fails if the rule breaks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from packaging.version import Version

from flashbuild.detect.compilers import (
    ActiveMsvc,
    HostCompiler,
    HostCompilers,
    MsvcToolset,
    VisualStudio,
)
from flashbuild.detect.cuda import Toolkit, ToolkitSearch, parse_gpu_codes
from flashbuild.detect.gpu import Gpu, GpuReport
from flashbuild.detect.host import GIB, HostInfo, PathHazard
from flashbuild.detect.pyenv import PyEnvReport, PythonEnv, ToolInfo, TorchInfo
from flashbuild.detect.rules import RULES, Findings, Severity, Verdict, blocking, evaluate

if TYPE_CHECKING:
    from flashbuild.arch import Arch

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "detect"
CODES = {r: parse_gpu_codes((FIX / f"nvcc-list-gpu-code-{r}.txt").read_text())
         for r in ("12.8", "12.9", "13.0")}


def toolkit(release: str = "13.0", *, headers: bool = True, codes: bool = True,
            host_config: str | None = None) -> Toolkit:
    full = {"12.8": "12.8.93", "12.9": "12.9.86", "13.0": "13.0.88"}.get(release, release)
    return Toolkit(root=Path(f"/usr/local/cuda-{release}"),
                   nvcc=Path(f"/usr/local/cuda-{release}/bin/nvcc"), version=Version(full),
                   version_source="nvcc", codes=CODES.get(release, ()) if codes else (),
                   layout="standard", dll_dirs=(), has_headers=headers,
                   host_config=FIX / host_config if host_config else None, origins=("PATH",))


def search(tk: Toolkit | None, disagreement: str | None = None) -> ToolkitSearch:
    return ToolkitSearch((tk,) if tk else (), tk, "its nvcc is the first on PATH", disagreement)


H200 = Gpu(0, "NVIDIA H200", (9, 0), 143771)
RTX5090 = Gpu(0, "NVIDIA GeForce RTX 5090", (12, 0), 32607)


def gpus(*found: Gpu, driver_cuda: str = "13.0") -> GpuReport:
    return GpuReport(found, "580.159.04", Version(driver_cuda), "nvml")


PY = PythonEnv("/venv/bin/python", "3.11.7", "cpython", "cp311", ".so", "/venv", ())
TOOLS = (ToolInfo("pybind11", "3.0.1", None), ToolInfo("ninja", "1.13.2", "/venv/bin/ninja"),
         ToolInfo("cmake", "4.4.4", "/venv/bin/cmake"))


def pyenv(torch: TorchInfo | None = None, tools: tuple[ToolInfo, ...] = TOOLS) -> PyEnvReport:
    return PyEnvReport(PY, torch, tools)


def torch(cuda: str | None = "13.0", arch_list: tuple[str, ...] | None = ("sm_90", "sm_120"),
          problems: tuple[str, ...] = ()) -> TorchInfo:
    return TorchInfo(Path("/venv/torch/version.py"), "2.11.0", cuda, "abc", arch_list, problems)


def host(free: float = 20, long_paths: bool | None = None,
         hazards: tuple[PathHazard, ...] = ()) -> HostInfo:
    return HostInfo(2, int(free * GIB), 24 * GIB, Path("/b"), 100 * GIB, 2, 2, long_paths,
                    hazards)


GNU = HostCompilers("gnu", gnu=(HostCompiler("g++", "/usr/bin/g++", Version("12.2.0")),))


def findings(**kw: object) -> Findings:
    base: dict[str, object] = {"platform": "linux", "toolkits": search(toolkit()),
                               "compilers": GNU, "gpus": gpus(), "pyenv": pyenv(),
                               "host": host()}
    base.update(kw)
    return Findings(**base)  # type: ignore[arg-type]


def only(verdicts: list[Verdict], rule_id: str) -> list[Verdict]:
    return [v for v in verdicts if v.rule_id == rule_id]


def severities(f: Findings, rule_id: str) -> list[Severity]:
    return [v.severity for v in RULES[rule_id](f)]


def targets(*names: str) -> tuple[Arch, ...]:
    from flashbuild.arch import parse_arch

    return tuple(parse_arch(n).arch for n in names)


def test_every_rule_has_a_test_here() -> None:
    # Ids are looked up in the tests below this one (the table itself is in rules.py).
    below = Path(__file__).read_text().split("MARKER: rule tests")[-1]
    for rule_id in RULES:
        assert f'RULES["{rule_id}"]' in below or f'"{rule_id}")' in below, rule_id


# MARKER: rule tests


def test_a_healthy_machine_blocks_nothing() -> None:
    verdicts = evaluate(findings(targets=targets("sm_90a"), gpus=gpus(H200),
                                 pyenv=pyenv(torch()), target_origin="--arch"))
    assert not blocking(verdicts), [v for v in verdicts if v.severity is not Severity.OK]


def test_target_none() -> None:
    (v,) = RULES["target"](findings())
    assert v.severity is Severity.OK and v.title.startswith("no target")
    (v,) = RULES["target"](findings(targets=targets("120"), target_origin="gpus"))
    assert "sm_120" in v.title


def test_target_a_other_sm() -> None:
    f = findings(gpus=gpus(RTX5090), targets=targets("sm_90a"))
    assert severities(f, "target.a-other-sm") == [Severity.ERROR]
    f2 = findings(gpus=gpus(RTX5090), targets=targets("sm_90a", "sm_120"))
    assert severities(f2, "target.a-other-sm") == [Severity.WARN]
    assert severities(findings(gpus=gpus(H200), targets=targets("sm_90a")),
                      "target.a-other-sm") == []
    assert severities(findings(gpus=gpus(), targets=targets("sm_90a")),
                      "target.a-other-sm") == []


def test_toolkit_missing() -> None:
    assert severities(findings(toolkits=search(None)), "toolkit") == [Severity.ERROR]
    assert severities(findings(), "toolkit") == [Severity.OK]


def test_toolkit_half_installed() -> None:
    f = findings(toolkits=search(toolkit(headers=False)))
    assert severities(f, "toolkit.half-installed") == [Severity.ERROR]
    assert severities(findings(), "toolkit.half-installed") == []


def test_toolkit_version_unknown() -> None:
    odd = replace(toolkit(), version=None, version_source="unknown", problems=("hung",))
    assert severities(findings(toolkits=search(odd)), "toolkit.version-unknown") == \
        [Severity.WARN]
    assert severities(findings(), "toolkit.version-unknown") == []


def test_toolkit_env_disagree() -> None:
    f = findings(toolkits=search(toolkit(), "CUDA_HOME=/a but the nvcc on PATH belongs to /b"))
    assert severities(f, "toolkit.env-disagree") == [Severity.WARN]
    assert severities(findings(), "toolkit.env-disagree") == []


def test_toolkit_search_problem() -> None:
    broken = replace(search(toolkit()), problems=("CUDA_HOME=/nonexistent does not exist",))
    (v,) = RULES["toolkit.search-problem"](findings(toolkits=broken))
    assert v.severity is Severity.WARN and "CUDA_HOME" in v.evidence
    assert RULES["toolkit.search-problem"](findings()) == []


def test_toolkit_too_old() -> None:
    f = findings(toolkits=search(toolkit("12.8")), targets=targets("sm_121"))
    (v,) = RULES["toolkit.too-old"](f)
    assert v.severity is Severity.ERROR and "12.9" in v.evidence
    assert RULES["toolkit.too-old"](findings(toolkits=search(toolkit("12.8")),
                                             targets=targets("120f"))), "family needs 12.9"
    assert severities(findings(targets=targets("sm_121")), "toolkit.too-old") == []


def test_toolkit_arch_removed() -> None:
    f = findings(targets=targets("sm_70"))
    assert severities(f, "toolkit.arch-removed") == [Severity.ERROR]
    (v,) = RULES["toolkit.arch-removed"](findings(targets=targets("sm_101")))
    assert "sm_110" in v.fix
    assert severities(findings(toolkits=search(toolkit("12.9")), targets=targets("sm_70")),
                      "toolkit.arch-removed") == []


def test_toolkit_cannot_emit_asks_the_toolkits_own_list() -> None:
    # A 13.0 whose nvcc (say, a trimmed build) does not list sm_88.
    trimmed = replace(toolkit(), codes=tuple(c for c in CODES["13.0"] if c != "sm_88"))
    f = findings(toolkits=search(trimmed), targets=targets("sm_88"))
    assert severities(f, "toolkit.codes") == [Severity.ERROR]
    assert severities(findings(targets=targets("sm_88")), "toolkit.codes") == \
        [Severity.OK]
    assert severities(findings(toolkits=search(toolkit(codes=False)), targets=targets("sm_88")),
                      "toolkit.codes") == []


def _msvc(active: int | None, toolsets: tuple[str, ...] = ("14.44.35207",),
          default: str | None = None) -> HostCompilers:
    vs = VisualStudio("a", "Visual Studio 2026", Path("C:/VS/18"), "18.0.1", "2026", False,
                      tuple(MsvcToolset(t, Path("C:/VS") / t) for t in toolsets),
                      default or toolsets[-1])
    cl = None
    if active is not None:
        cl = ActiveMsvc(True, None, "cl.exe", Version(f"19.{active - 1900}.35207"))
    return HostCompilers("msvc", visual_studios=(vs,), active_msvc=cl)


def test_msvc_outside_window_with_working_toolset() -> None:
    tk = toolkit(host_config="host_config_13.0.h")
    f = findings(platform="windows", toolkits=search(tk),
                 compilers=_msvc(None, ("14.44.35207", "14.50.35717")))
    (v,) = RULES["msvc.version"](f)
    assert v.severity is Severity.ERROR and "1950" in v.title
    assert "-vcvars_ver=14.44" in v.fix


def test_msvc_outside_window_suggests_a_cuda_that_accepts_it() -> None:
    tk = toolkit(host_config="host_config_13.0.h")
    f = findings(platform="windows", toolkits=search(tk), compilers=_msvc(1950, ("14.50.35717",)))
    (v,) = RULES["msvc.version"](f)
    assert v.severity is Severity.ERROR and "CUDA 13.2" in v.fix


def test_msvc_inside_window_and_missing() -> None:
    tk = toolkit(host_config="host_config_13.0.h")
    ok = findings(platform="windows", toolkits=search(tk), compilers=_msvc(1944))
    assert severities(ok, "msvc.version") == [Severity.OK]
    # 12.9 accepts 1910..1949, 13.0 only from 1920 (VS 2017 dropped).
    old = findings(platform="windows", toolkits=search(tk), compilers=_msvc(1916,
                                                                          ("14.16.27023",)))
    assert severities(old, "msvc.version") == [Severity.ERROR]
    none = findings(platform="windows", compilers=HostCompilers("msvc"))
    (v,) = RULES["msvc.version"](none)
    assert v.severity is Severity.ERROR and "Build Tools" in v.fix
    assert severities(findings(), "msvc.version") == []


def test_gcc_too_new() -> None:
    new = HostCompilers("gnu", gnu=(HostCompiler("g++", "/usr/bin/g++", Version("16.1.0")),))
    tk130 = toolkit(host_config="host_config_13.0.h")
    (v,) = RULES["gcc"](findings(toolkits=search(tk130), compilers=new))
    assert v.severity is Severity.ERROR and "g++-15" in v.fix
    tk129 = toolkit("12.9", host_config="host_config_12.9.h")
    f15 = replace(new, gnu=(HostCompiler("g++", "/usr/bin/g++", Version("15.1.0")),))
    assert severities(findings(toolkits=search(tk129), compilers=f15), "gcc") == \
        [Severity.ERROR]
    assert severities(findings(toolkits=search(tk130), compilers=f15), "gcc") == \
        [Severity.OK]
    assert severities(findings(compilers=HostCompilers("gnu")), "gcc") == \
        [Severity.ERROR]
    clang = HostCompilers("gnu", gnu=(HostCompiler("clang++", "/usr/bin/clang++",
                                                   Version("21.1.0")),),
                          cuda_host_compiler="clang++")
    assert severities(findings(toolkits=search(tk130), compilers=clang), "gcc") == \
        [Severity.ERROR]


def test_gpu_found() -> None:
    assert severities(findings(gpus=gpus()), "gpu") == [Severity.OK]
    (v,) = RULES["gpu"](findings(gpus=gpus(H200)))
    assert "sm_90" in v.title


def test_driver_older_than_toolkit() -> None:
    assert severities(findings(gpus=gpus(H200, driver_cuda="12.8")),
                      "driver.older-than-toolkit") == [Severity.ERROR]
    assert severities(findings(toolkits=search(toolkit("12.9")),
                               gpus=gpus(H200, driver_cuda="12.8")),
                      "driver.older-than-toolkit") == [Severity.WARN]
    assert severities(findings(gpus=gpus(H200)), "driver.older-than-toolkit") == []
    assert severities(findings(gpus=gpus(driver_cuda="12.0")), "driver.older-than-toolkit") == []


def test_python_found() -> None:
    assert severities(findings(), "python") == [Severity.OK, Severity.OK]


def test_torch_broken() -> None:
    f = findings(pyenv=pyenv(torch(arch_list=None, problems=("import torch failed",))))
    assert severities(f, "torch.broken") == [Severity.WARN]
    assert severities(findings(pyenv=pyenv(torch())), "torch.broken") == []


def test_torch_cuda_mismatch() -> None:
    assert severities(findings(pyenv=pyenv(torch("12.8"))), "torch.cuda") == \
        [Severity.ERROR]
    assert severities(findings(toolkits=search(toolkit("12.9")), pyenv=pyenv(torch("12.8"))),
                      "torch.cuda") == [Severity.WARN]
    assert severities(findings(pyenv=pyenv(torch("13.0"))), "torch.cuda") == \
        [Severity.OK]
    assert severities(findings(pyenv=pyenv(torch(None))), "torch.cuda") == \
        [Severity.WARN]


def test_torch_arch_missing() -> None:
    cu126 = torch("12.6", ("sm_50", "sm_80", "sm_86", "sm_90"))
    f = findings(gpus=gpus(RTX5090), pyenv=pyenv(cu126))
    assert severities(f, "torch.arch-missing") == [Severity.WARN]
    assert severities(findings(gpus=gpus(H200), pyenv=pyenv(cu126)), "torch.arch-missing") == []
    # sm_120 SASS runs on a 12.1 GPU.
    spark = Gpu(0, "DGX Spark", (12, 1), 1)
    assert severities(findings(gpus=gpus(spark), pyenv=pyenv(torch())),
                      "torch.arch-missing") == []


def test_ninja_missing() -> None:
    no_ninja = (TOOLS[0], ToolInfo("ninja", None, None), TOOLS[2])
    assert severities(findings(pyenv=pyenv(tools=no_ninja)), "ninja") == \
        [Severity.ERROR]
    assert severities(findings(), "ninja") == [Severity.OK]


def test_cmake_missing() -> None:
    no_cmake = (TOOLS[0], TOOLS[1], ToolInfo("cmake", None, None))
    assert severities(findings(pyenv=pyenv(tools=no_cmake)), "cmake") == [Severity.WARN]


def test_pybind11_shown_by_the_human_report_too() -> None:
    # The README lists pybind11 among what doctor reports; before this rule only --json did.
    no_pybind11 = (ToolInfo("pybind11", None, None), TOOLS[1], TOOLS[2])
    assert severities(findings(pyenv=pyenv(tools=no_pybind11)), "pybind11") == \
        [Severity.WARN]
    ok = [v for v in evaluate(findings()) if v.rule_id == "pybind11"]
    assert [v.title for v in ok] == ["pybind11 3.0.1"]


@pytest.mark.parametrize(("free", "severity"), [(1.0, Severity.ERROR), (3.0, Severity.WARN),
                                                (20.0, Severity.OK)])
def test_ram_too_little(free: float, severity: Severity) -> None:
    assert severities(findings(host=host(free)), "ram") == [severity]


def test_disk_low() -> None:
    low = replace(host(), free_disk=2 * GIB)
    assert severities(findings(host=low), "disk.low") == [Severity.WARN]
    assert severities(findings(), "disk.low") == []


def test_windows_long_paths() -> None:
    (off,) = RULES["windows.long-paths"](findings(host=host(long_paths=False)))
    assert off.severity is Severity.WARN
    # Turning long paths on is not the whole fix: the compilers keep the 260 limit.
    assert "not long-path aware" in off.evidence and off.fix.startswith("build in a short")
    assert severities(findings(host=host(long_paths=True)), "windows.long-paths") == []
    assert severities(findings(host=host(long_paths=None)), "windows.long-paths") == []


def test_windows_path_hazard() -> None:
    hazards = (PathHazard("C:/My Builds/x", "spaces", "build folder"),
               PathHazard("C:/" + "x" * 70, "long", "build folder"))
    assert severities(findings(host=host(long_paths=False, hazards=hazards)),
                      "windows.path-hazard") == [Severity.WARN, Severity.WARN]
    # A long build folder stays a hazard once long paths are on (issue 20): cl.exe, link.exe
    # and nvcc are not long-path aware.
    on = RULES["windows.path-hazard"](findings(host=host(long_paths=True, hazards=hazards)))
    assert [v.severity for v in on] == [Severity.WARN, Severity.WARN]
    assert "cl.exe, link.exe and nvcc" in on[1].evidence


def test_probe_failed() -> None:
    f = findings(probe_failures=(("gpus", "RuntimeError: boom"),), gpus=None)
    (v,) = RULES["probe.failed"](f)
    assert v.severity is Severity.WARN and "gpus" in v.title


def test_a_rule_that_raises_becomes_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(f: Findings) -> list[Verdict]:
        raise RuntimeError("bug")

    monkeypatch.setitem(RULES, "gpu", boom)
    verdicts = evaluate(findings())
    assert any(v.rule_id == "probe.failed" and "gpu" in v.title for v in verdicts)



# Prerequisites outside Python (issue 21, item 2): each names the command that installs it,
# for the distribution /etc/os-release names (recorded from Ubuntu 24.04 and Fedora 40).

UBUNTU = (FIX / "os-release-ubuntu-24.04").read_text()
FEDORA = (FIX / "os-release-fedora-40").read_text()


def _on(os_release: str, **py: object) -> Findings:
    import dataclasses

    return findings(pyenv=PyEnvReport(dataclasses.replace(PY, **py), None, TOOLS),  # type: ignore[arg-type]
                    host=dataclasses.replace(host(), os_release=os_release))


def test_missing_python_headers_name_the_package_of_the_distribution() -> None:
    (debian,) = RULES["python.headers"](_on(UBUNTU, python_h=None))
    assert debian.severity is Severity.ERROR and "Python.h" in debian.title
    assert debian.fix == "sudo apt install python3-dev"
    (fedora,) = RULES["python.headers"](_on(FEDORA, python_h=None))
    assert fedora.fix == "sudo dnf install python3-devel"
    (unknown,) = RULES["python.headers"](_on("ID=someos\n", python_h=None))
    assert "Python development headers (Python.h)" in unknown.fix
    (present,) = RULES["python.headers"](_on(UBUNTU, python_h="/usr/include/python3.12/Python.h"))
    assert present.severity is Severity.OK


def test_a_python_without_ensurepip_cannot_make_the_quick_starts_venv() -> None:
    (verdict,) = RULES["python.venv"](_on(UBUNTU, venv_module=False))
    assert verdict.severity is Severity.WARN and verdict.fix == "sudo apt install python3-venv"
    assert RULES["python.venv"](_on(UBUNTU, venv_module=True)) == []


def test_no_gxx_names_the_package_of_the_distribution() -> None:
    import dataclasses

    f = dataclasses.replace(findings(compilers=HostCompilers("gnu", gnu=())),
                            host=dataclasses.replace(host(), os_release=FEDORA))
    (verdict,) = RULES["gcc"](f)
    assert verdict.severity is Severity.ERROR and verdict.fix == "sudo dnf install gcc-c++"
    ubuntu = dataclasses.replace(f, host=dataclasses.replace(host(), os_release=UBUNTU))
    assert RULES["gcc"](ubuntu)[0].fix == "sudo apt install g++"


def test_windows_install_commands_name_python_org_and_visual_studio() -> None:
    from flashbuild.platforms import get

    text = get("windows").install_command(("python-headers", "c++"))
    assert "python.org" in text and "Desktop development with C++" in text
