"""Toolkit discovery: candidates, probes, choice, cache, odd trees — replayed, no processes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from packaging.version import Version

from flashbuild.arch import Arch
from flashbuild.detect.cache import ProbeCache
from flashbuild.detect.cuda import (
    find_toolkits,
    parse_gpu_codes,
    parse_nvcc_version,
    probe_toolkit,
    version_from_files,
)
from flashbuild.platforms.linux import LinuxPlatform
from flashbuild.platforms.windows import WindowsPlatform
from flashbuild.proc import Completed
from tests.fakes import ReplayRunner

if TYPE_CHECKING:
    from collections.abc import Mapping

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "detect"


class IsolatedLinux(LinuxPlatform):
    """Linux whose standard install folders are under a test's tmp_path."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = roots

    def standard_toolkit_roots(self, env: Mapping[str, str]) -> list[str]:
        return self.roots


def fixture_text(name: str) -> str:
    return (FIX / name).read_text()


def make_toolkit(root: Path, *, headers: bool = True, exe: str = "nvcc",
                 cuda_h: int | None = None) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / exe).write_text("#!/bin/sh\n")
    (root / "bin" / "nvcc.profile").write_text("TOP = $(_HERE_)/..\n")
    (root / "include" / "crt").mkdir(parents=True)
    if headers:
        (root / "include" / "cuda_runtime.h").write_text("/* runtime */\n")
        (root / "include" / "crt" / "host_config.h").write_text(
            fixture_text("host_config_13.0.h"))
    if cuda_h is not None:
        (root / "include" / "cuda.h").write_text(f"#define CUDA_VERSION {cuda_h}\n")
    return root


class Runner(ReplayRunner):
    """Only programs listed in `found` are on PATH (a response alone does not put nvcc there)."""

    def which(self, program: str, env: Mapping[str, str] | None = None) -> str | None:
        return self.found.get(self._key(program))


def nvcc_runner(versions: dict[str, str]) -> Runner:
    """nvcc answers by the toolkit its path is in: versions = {root: "12.8" | "12.9" | "13.0"}."""

    def answer(argv: tuple[str, ...]) -> Completed:
        root = str(Path(os.path.realpath(argv[0])).parent.parent)
        release = versions[root]
        name = "nvcc-version" if argv[1] == "--version" else "nvcc-list-gpu-code"
        return Completed(argv, 0, fixture_text(f"{name}-{release}.txt"), "")

    return Runner(responses={("nvcc",): answer})


@pytest.mark.parametrize(("release", "full"), [("12.8", "12.8.93"), ("12.9", "12.9.86"),
                                              ("13.0", "13.0.88")])
def test_nvcc_version_of_each_release(release: str, full: str) -> None:
    assert parse_nvcc_version(fixture_text(f"nvcc-version-{release}.txt")) == Version(full)


def test_gpu_codes_of_each_release() -> None:
    c128 = parse_gpu_codes(fixture_text("nvcc-list-gpu-code-12.8.txt"))
    c129 = parse_gpu_codes(fixture_text("nvcc-list-gpu-code-12.9.txt"))
    c130 = parse_gpu_codes(fixture_text("nvcc-list-gpu-code-13.0.txt"))
    assert "sm_120" in c128 and "sm_121" not in c128 and "sm_101" in c128
    assert "sm_121" in c129 and "sm_103" in c129
    assert "sm_110" in c130 and "sm_70" not in c130 and "sm_101" not in c130


@pytest.mark.parametrize("garbage", ["", "Segmentation fault", "release banana", "\x00\xff"])
def test_garbage_output_gives_unknown(garbage: str) -> None:
    assert parse_nvcc_version(garbage) is None
    assert parse_gpu_codes(garbage) == ()


def test_version_falls_back_to_version_json_then_cuda_h(tmp_path: Path) -> None:
    root = make_toolkit(tmp_path / "tk", cuda_h=12090)
    assert version_from_files(root) == (Version("12.9"), "cuda.h")
    (root / "version.json").write_text(json.dumps({"cuda": {"version": "12.9.1"}}))
    assert version_from_files(root) == (Version("12.9.1"), "version.json")
    (root / "version.json").write_text("{not json")
    assert version_from_files(root) == (Version("12.9"), "cuda.h")


def test_probe_reads_version_codes_headers_and_host_config(tmp_path: Path) -> None:
    root = make_toolkit(tmp_path / "cuda-12.9")
    tk = probe_toolkit(root, ["standard"], runner=nvcc_runner({str(root): "12.9"}), env={},
                       platform=LinuxPlatform())
    assert tk.version == Version("12.9.86") and tk.version_source == "nvcc"
    assert tk.release == Version("12.9")
    assert tk.can_emit(Arch(12, 1)) is True and tk.can_emit(Arch(11, 0)) is False
    assert tk.has_headers and tk.host_config == root / "include" / "crt" / "host_config.h"
    assert tk.layout == "standard" and tk.problems == ()


def test_nvcc_without_headers_is_half_installed(tmp_path: Path) -> None:
    root = make_toolkit(tmp_path / "cuda", headers=False)
    tk = probe_toolkit(root, ["standard"], runner=nvcc_runner({str(root): "13.0"}), env={},
                       platform=LinuxPlatform())
    assert tk.nvcc is not None and not tk.has_headers and tk.host_config is None


def test_hanging_nvcc_is_a_problem_and_cuda_h_gives_the_version(tmp_path: Path) -> None:
    root = make_toolkit(tmp_path / "cuda", cuda_h=13000)
    runner = Runner(hangs={"nvcc"})
    tk = probe_toolkit(root, ["standard"], runner=runner, env={}, platform=LinuxPlatform())
    assert tk.version == Version("13.0") and tk.version_source == "cuda.h"
    assert tk.codes == () and tk.can_emit(Arch(9, 0)) is None
    assert any("did not finish" in p for p in tk.problems)


def test_garbage_nvcc_output_is_a_problem(tmp_path: Path) -> None:
    root = make_toolkit(tmp_path / "cuda")
    runner = Runner(responses={("nvcc",): "\x1b[31mlicence expired\x1b[0m"})
    tk = probe_toolkit(root, ["standard"], runner=runner, env={}, platform=LinuxPlatform())
    assert tk.version is None and tk.version_source == "unknown"
    assert len(tk.problems) == 2


def test_choice_order_and_deduplication(tmp_path: Path) -> None:
    std128 = make_toolkit(tmp_path / "opt" / "cuda-12.8")
    std129 = make_toolkit(tmp_path / "opt" / "cuda-12.9")
    site = tmp_path / "site-packages"
    pypi = make_toolkit(site / "nvidia" / "cu13")
    versions = {str(std128): "12.8", str(std129): "12.9", str(pypi): "13.0"}
    platform = IsolatedLinux([str(tmp_path / "opt" / "cuda-*")])
    runner = nvcc_runner(versions)

    search = find_toolkits({}, runner, platform, site_packages=[site])
    assert [t.root for t in search.candidates] == [std128, std129, pypi]
    assert next(t for t in search.candidates if t.root == pypi).layout == "pypi"
    # This Python's own PyPI toolkit (what `pip install -e .[cuda]` installed) goes before
    # an older one in the install folders.
    assert search.chosen is not None and search.chosen.root == pypi
    assert search.reason == (f"it is this Python's own PyPI toolkit, newer than CUDA 12.9 in "
                             f"a standard folder ({std129})")
    assert search.pypi_home == pypi

    without_pypi = find_toolkits({}, runner, platform)
    assert without_pypi.chosen is not None and without_pypi.chosen.root == std129  # newest

    only_pypi = find_toolkits({}, runner, IsolatedLinux([]), site_packages=[site])
    assert only_pypi.chosen is not None and only_pypi.chosen.root == pypi
    assert "PyPI" in only_pypi.reason

    runner.found["nvcc"] = str(std128 / "bin" / "nvcc")
    on_path = find_toolkits({}, runner, platform)
    assert on_path.chosen is not None and on_path.chosen.root == std128
    assert on_path.chosen.origins == ("PATH", "standard")  # one entry, two origins

    link = tmp_path / "cuda-home"
    link.symlink_to(std129)
    home = find_toolkits({"CUDA_HOME": str(link)}, runner, platform, site_packages=[site])
    # Named by the user: used as named, although this Python's toolkit is newer.
    assert home.chosen is not None and home.chosen.origins == ("CUDA_HOME", "standard")
    assert len(home.candidates) == 3
    assert home.disagreement is not None and "CUDA_HOME" in home.disagreement

    explicit = find_toolkits({"CUDA_HOME": str(link)}, runner, platform,
                             explicit=pypi / "bin" / "nvcc", site_packages=[site])
    assert explicit.chosen is not None and explicit.chosen.root == pypi


# CUDA 12.4 is not recorded here: its answers are the 12.8 ones without what 12.8 added
# (sm_100, sm_101, sm_120; flashbuild.arch.FIRST_CUDA).
NVCC_12_4 = ("nvcc: NVIDIA (R) Cuda compiler driver\n"
             "Cuda compilation tools, release 12.4, V12.4.131\n")
CODES_12_4 = "".join(f"{c}\n" for c in fixture_text("nvcc-list-gpu-code-12.8.txt").split()
                     if c not in ("sm_100", "sm_101", "sm_120"))


def old_path_and_venv(tmp_path: Path) -> tuple[Path, Path, Path, Runner]:
    """CUDA 12.4 first on PATH, this Python's venv holding the CUDA 13.0 wheels (the README's
    `pip install -e .[cuda]`): the layout of issue 28."""
    old = make_toolkit(tmp_path / "usr" / "local" / "cuda-12.4")
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    venv = make_toolkit(site / "nvidia" / "cu13")
    replay = nvcc_runner({str(venv): "13.0"})

    def answer(argv: tuple[str, ...]) -> Completed:
        if Path(argv[0]).parent.parent == old:
            text = NVCC_12_4 if argv[1] == "--version" else CODES_12_4
            return Completed(argv, 0, text, "")
        return replay.run(argv)

    runner = Runner(responses={("nvcc",): answer})
    runner.found["nvcc"] = str(old / "bin" / "nvcc")
    return old, site, venv, runner


def test_old_nvcc_on_path_gives_way_to_the_venv_toolkit_that_compiles_sm120(
        tmp_path: Path) -> None:
    old, site, venv, runner = old_path_and_venv(tmp_path)
    search = find_toolkits({}, runner, IsolatedLinux([]), site_packages=[site],
                           targets=(Arch(12, 0),))
    assert search.chosen is not None and search.chosen.root == venv
    assert search.reason == ("it is this Python's own PyPI toolkit and can compile sm_120, "
                             f"which CUDA 12.4 on PATH ({old}) cannot")
    assert search.summary == f"CUDA 13.0.88 at {venv}, chosen because {search.reason}"


def test_a_venv_toolkit_of_the_same_release_does_not_displace_the_one_on_path(
        tmp_path: Path) -> None:
    on_path = make_toolkit(tmp_path / "usr" / "local" / "cuda-13.0")
    site = tmp_path / "site-packages"
    venv = make_toolkit(site / "nvidia" / "cu13")
    runner = nvcc_runner({str(on_path): "13.0", str(venv): "13.0"})
    runner.found["nvcc"] = str(on_path / "bin" / "nvcc")
    search = find_toolkits({}, runner, IsolatedLinux([]), site_packages=[site],
                           targets=(Arch(12, 0),))
    assert search.chosen is not None and search.chosen.root == on_path
    assert search.reason == "its nvcc is the first on PATH"


def test_a_venv_toolkit_of_the_same_release_wins_when_it_has_the_headers_torch_includes(
        tmp_path: Path) -> None:
    # A system CUDA 13.0 without cuSPARSE beside the venv's, where the CUDA torch's
    # nvidia-cusparse wheel put cusparse.h: every torch extension would stop at that header.
    on_path = make_toolkit(tmp_path / "usr" / "local" / "cuda-13.0")
    site = tmp_path / "site-packages"
    venv = make_toolkit(site / "nvidia" / "cu13")
    (venv / "include" / "cusparse.h").write_text("", encoding="utf-8")
    runner = nvcc_runner({str(on_path): "13.0", str(venv): "13.0"})
    runner.found["nvcc"] = str(on_path / "bin" / "nvcc")
    search = find_toolkits({}, runner, IsolatedLinux([]), site_packages=[site],
                           targets=(Arch(9, 0),))
    assert search.chosen is not None and search.chosen.root == venv
    assert search.reason == (
        "it is this Python's own PyPI toolkit and has cusparse.h, which torch's CUDA headers "
        f"include and CUDA 13.0 on PATH ({on_path}) lacks")


@pytest.mark.parametrize("how", ["--cuda", "CUDA_HOME", "CUDA_PATH"])
def test_a_named_old_toolkit_is_used_and_the_fix_names_the_one_that_compiles(
        tmp_path: Path, how: str) -> None:
    from flashbuild.detect.rules import Findings, Severity, evaluate

    old, site, venv, runner = old_path_and_venv(tmp_path)
    env = {how: str(old)} if how != "--cuda" else {}
    search = find_toolkits(env, runner, IsolatedLinux([]), site_packages=[site],
                           explicit=old if how == "--cuda" else None, targets=(Arch(12, 0),))
    assert search.chosen is not None and search.chosen.root == old
    verdicts = evaluate(Findings(platform="linux", toolkits=search, targets=(Arch(12, 0),)))
    too_old = [v for v in verdicts if v.rule_id == "toolkit.too-old"]
    assert [v.severity for v in too_old] == [Severity.ERROR]
    assert too_old[0].fix == (f"use the CUDA 13.0.88 found at {venv}: pass `--cuda {venv}`")
    assert "docs/pipeline.md#which-cuda-toolkit-a-build-uses" in too_old[0].evidence


def test_with_no_toolkit_that_compiles_the_fix_names_where_pip_puts_one(
        tmp_path: Path) -> None:
    from flashbuild.detect.rules import Findings, evaluate

    old, site, venv, runner = old_path_and_venv(tmp_path)
    shutil.rmtree(venv)
    search = find_toolkits({"CUDA_HOME": str(old)}, runner, IsolatedLinux([]),
                           site_packages=[site], targets=(Arch(12, 0),))
    verdicts = evaluate(Findings(platform="linux", toolkits=search, targets=(Arch(12, 0),)))
    fix = next(v.fix for v in verdicts if v.rule_id == "toolkit.too-old")
    assert f"into {venv}, then pass `--cuda {venv}`" in fix
    assert "<" not in fix


def test_doctor_and_build_choose_the_same_toolkit(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """One choice function: `flashbuild build`'s toolkit and its doctor checks' are one."""
    from flashbuild.arch import parse_arch_spec
    from flashbuild.detect import doctor
    from flashbuild.pipeline import command

    old, site, venv, runner = old_path_and_venv(tmp_path)
    monkeypatch.setattr(doctor, "python_site_packages", lambda: (site,))
    spec = parse_arch_spec("sm120")
    built = command.choose_toolkit({}, runner, IsolatedLinux([]), cuda=None,
                                   cache_dir=tmp_path / "cache", site_packages=[site],
                                   targets=spec.archs)
    found = doctor.collect({}, runner, IsolatedLinux([]), spec=spec,
                           only=frozenset({"toolkits"}))
    assert found.toolkits is not None and found.toolkit is not None
    assert built.chosen.root == found.toolkit.root == venv
    assert found.toolkits.reason == built.search.reason
    # Named old: build checks block on it, with the literal folder of the good one.
    blockers = command.doctor_blockers({}, runner, IsolatedLinux([]), spec=spec, cuda=old,
                                       cache_dir=tmp_path / "cache")
    assert any(f"--cuda {venv}" in b for b in blockers), blockers


def test_nothing_found(tmp_path: Path) -> None:
    search = find_toolkits({"CUDA_HOME": str(tmp_path / "gone")}, Runner(),
                           IsolatedLinux([]))
    assert search.chosen is None and search.candidates == ()
    assert any("does not exist" in p for p in search.problems)


def test_wrapper_script_on_path_is_followed_with_dryrun(tmp_path: Path) -> None:
    real = make_toolkit(tmp_path / "cuda-13.0")
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {real}/bin/nvcc "$@"\n')
    runner = nvcc_runner({str(real): "13.0"})
    runner.responses[(str(wrapper), "--dryrun", "-x", "cu", "-E", os.devnull)] = Completed(
        (), 0, "", f"#$ _NVVM_BRANCH_=nvvm\n#$ _HERE_={real}/bin\n#$ _THERE_={real}/bin\n")
    runner.found["nvcc"] = str(wrapper)

    def dry(argv: tuple[str, ...]) -> Completed:
        if argv[0] == str(wrapper):
            return Completed(argv, 0, "", f"#$ _HERE_={real}/bin\n")
        return nvcc_runner({str(real): "13.0"}).run(argv)

    runner.responses[("nvcc",)] = dry
    search = find_toolkits({}, runner, IsolatedLinux([]))
    assert search.chosen is not None and search.chosen.root == real


def test_windows_toolkit_from_cuda_path_with_bin_x64(tmp_path: Path) -> None:
    root = make_toolkit(tmp_path / "CUDA" / "v13.0", exe="nvcc.exe")
    (root / "bin" / "x64").mkdir()
    runner = nvcc_runner({str(root): "13.0"})
    search = find_toolkits({"CUDA_PATH": str(root), "CUDA_PATH_V13_0": str(root)}, runner,
                           WindowsPlatform())
    tk = search.chosen
    assert tk is not None and tk.nvcc == root / "bin" / "nvcc.exe"
    assert tk.dll_dirs == (root / "bin" / "x64", root / "bin")
    assert tk.origins == ("CUDA_PATH", "CUDA_PATH_V")


def test_windows_pypi_wheel_keeps_dlls_in_bin_x86_64(tmp_path: Path) -> None:
    site = tmp_path / "Lib" / "site-packages"
    root = make_toolkit(site / "nvidia" / "cu13", exe="nvcc.exe")
    (root / "bin" / "x86_64").mkdir()
    search = find_toolkits({}, nvcc_runner({str(root): "13.0"}), WindowsPlatform(),
                           site_packages=[site])
    assert search.chosen is not None and search.chosen.layout == "pypi"
    assert search.chosen.dll_dirs == (root / "bin" / "x86_64", root / "bin")


def test_non_ascii_and_spaced_paths(tmp_path: Path) -> None:
    root = make_toolkit(tmp_path / "Jürgen Müller" / "CUDA ünï")
    search = find_toolkits({"CUDA_HOME": str(root)}, nvcc_runner({str(root): "13.0"}),
                           IsolatedLinux([]))
    assert search.chosen is not None and search.chosen.version == Version("13.0.88")


def test_cache_answers_until_nvcc_changes(tmp_path: Path) -> None:
    root = make_toolkit(tmp_path / "cuda")
    cache = ProbeCache(tmp_path / "cache")
    runner = nvcc_runner({str(root): "12.9"})
    first = probe_toolkit(root, ["standard"], runner=runner, env={}, platform=LinuxPlatform(),
                          cache=cache)
    assert len(runner.calls) == 2
    again = probe_toolkit(root, ["standard"], runner=runner, env={}, platform=LinuxPlatform(),
                          cache=cache)
    assert len(runner.calls) == 2 and again == first
    # An upgrade changes nvcc's size: the cache must not answer for the new one.
    (root / "bin" / "nvcc").write_text("#!/bin/sh\n# upgraded\n")
    runner2 = nvcc_runner({str(root): "13.0"})
    upgraded = probe_toolkit(root, ["standard"], runner=runner2, env={},
                             platform=LinuxPlatform(), cache=cache)
    assert upgraded.version == Version("13.0.88") and len(runner2.calls) == 2
    # --no-cache asks again (and refreshes the entry).
    runner3 = nvcc_runner({str(root): "13.0"})
    probe_toolkit(root, ["standard"], runner=runner3, env={}, platform=LinuxPlatform(),
                  cache=ProbeCache(tmp_path / "cache", enabled=False))
    assert len(runner3.calls) == 2


def test_failures_are_not_cached(tmp_path: Path) -> None:
    root = make_toolkit(tmp_path / "cuda")
    cache = ProbeCache(tmp_path / "cache")
    probe_toolkit(root, ["standard"], runner=Runner(hangs={"nvcc"}), env={},
                  platform=LinuxPlatform(), cache=cache)
    runner = nvcc_runner({str(root): "13.0"})
    tk = probe_toolkit(root, ["standard"], runner=runner, env={}, platform=LinuxPlatform(),
                       cache=cache)
    assert tk.version == Version("13.0.88") and len(runner.calls) == 2


def test_corrupt_cache_entry_is_a_miss(tmp_path: Path) -> None:
    root = make_toolkit(tmp_path / "cuda")
    cache = ProbeCache(tmp_path / "cache")
    probe_toolkit(root, ["standard"], runner=nvcc_runner({str(root): "13.0"}), env={},
                  platform=LinuxPlatform(), cache=cache)
    for entry in (tmp_path / "cache" / "probes").iterdir():
        entry.write_text("{garbage")
    runner = nvcc_runner({str(root): "13.0"})
    tk = probe_toolkit(root, ["standard"], runner=runner, env={}, platform=LinuxPlatform(),
                       cache=cache)
    assert tk.version == Version("13.0.88") and len(runner.calls) == 2


def test_a_relative_cuda_option_becomes_an_absolute_root(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`--cuda .venv/.../nvidia/cu13` must not reach the manifest or the shim as a relative
    path: the shim drops relative folders, so the toolkit's DLLs would go unregistered."""
    from flashbuild.detect.cuda import _Candidates, _from_explicit

    (tmp_path / "tk" / "bin").mkdir(parents=True)
    (tmp_path / "tk" / "bin" / "nvcc").write_text("")
    monkeypatch.chdir(tmp_path)
    candidates = _Candidates()
    _from_explicit(candidates, Path("tk"), ReplayRunner(), {})
    roots = [root for root, _ in candidates.found.values()]
    assert roots == [tmp_path / "tk"] and roots[0].is_absolute()
