"""Python and torch: version.py read without importing, the arch list from a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashbuild.detect.cache import ProbeCache
from flashbuild.detect.pyenv import (
    PythonEnv,
    current_python,
    parse_torch_version_file,
    probe_pyenv,
    probe_torch,
)
from tests.fakes import ReplayRunner

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "detect" / "torch"


def site_with_torch(tmp_path: Path, version_file: str | None) -> Path:
    site = tmp_path / "site-packages"
    (site / "torch").mkdir(parents=True)
    if version_file is not None:
        (site / "torch" / "version.py").write_text((FIX / version_file).read_text())
    return site


def arch_runner(name: str) -> ReplayRunner:
    return ReplayRunner(responses={("python",): (FIX / name).read_text()})


def test_version_file_is_read_without_executing_it() -> None:
    fields = parse_torch_version_file((FIX / "version-2.13.0-cpu.py").read_text())
    assert fields["__version__"] == "2.13.0+cpu" and fields["cuda"] is None
    assert fields["git_version"] == "cf30153c4c131c8164ee7798e5022d810682e2cb"
    with pytest.raises(ValueError, match="not Python"):
        parse_torch_version_file("__version__ = ")


def test_cuda_torch_with_its_arch_list(tmp_path: Path) -> None:
    site = site_with_torch(tmp_path, "version-2.11.0-cu130.py")
    torch = probe_torch([site], python="python", runner=arch_runner("arch-list-cu130.json"),
                        env={})
    assert torch is not None and torch.version == "2.11.0+cu130" and torch.cuda == "13.0"
    assert torch.arch_list is not None and "sm_120" in torch.arch_list
    assert torch.problems == ()


def test_arch_list_is_cached_by_version_file(tmp_path: Path) -> None:
    site = site_with_torch(tmp_path, "version-2.11.0-cu130.py")
    cache = ProbeCache(tmp_path / "cache")
    runner = arch_runner("arch-list-cu130.json")
    probe_torch([site], python="python", runner=runner, env={}, cache=cache)
    again = probe_torch([site], python="python", runner=runner, env={}, cache=cache)
    assert len(runner.calls) == 1 and again is not None and again.arch_list is not None
    # An upgrade rewrites version.py: ask again.
    (site / "torch" / "version.py").write_text((FIX / "version-2.7.1-cu126.py").read_text())
    runner2 = arch_runner("arch-list-cu126.json")
    upgraded = probe_torch([site], python="python", runner=runner2, env={}, cache=cache)
    assert len(runner2.calls) == 1
    assert upgraded is not None and upgraded.arch_list is not None
    assert "sm_120" not in upgraded.arch_list


def test_cpu_torch_needs_no_import(tmp_path: Path) -> None:
    site = site_with_torch(tmp_path, "version-2.13.0-cpu.py")
    runner = ReplayRunner()
    torch = probe_torch([site], python="python", runner=runner, env={})
    assert torch is not None and torch.cuda is None and torch.arch_list == ()
    assert runner.calls == []


def test_torch_absent(tmp_path: Path) -> None:
    assert probe_torch([tmp_path], python="python", runner=ReplayRunner(), env={}) is None


def test_broken_torch_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    site = site_with_torch(tmp_path, "version-2.11.0-cu130.py")
    runner = ReplayRunner()
    runner.add("python", err="Traceback (most recent call last):\nOSError: libcudart.so.13: "
               "cannot open shared object file", code=1)
    torch = probe_torch([site], python="python", runner=runner, env={})
    assert torch is not None and torch.version == "2.11.0+cu130" and torch.arch_list is None
    assert "libcudart.so.13" in torch.problems[0]
    hung = probe_torch([site], python="python", runner=ReplayRunner(hangs={"python"}), env={})
    assert hung is not None and "did not finish" in hung.problems[0]
    missing = probe_torch([site_with_torch(tmp_path / "b", None)], python="python",
                          runner=ReplayRunner(), env={})
    assert missing is not None and "could not be read" in missing.problems[0]
    garbage = ReplayRunner(responses={("python",): "warning: something\nnot json"})
    odd = probe_torch([site], python="python", runner=garbage, env={})
    assert odd is not None and odd.arch_list is None and odd.problems


def test_pyenv_with_tools(tmp_path: Path) -> None:
    py = PythonEnv("python", "3.11.7", "cpython", "cp311", ".cpython-311-x86_64-linux-gnu.so",
                   None, (tmp_path,))
    runner = ReplayRunner(responses={("ninja", "--version"): "1.13.2\n",
                                     ("cmake", "--version"): "cmake version 4.4.4\n\nCMake"})
    report = probe_pyenv({}, runner, python=py)
    assert report.torch is None
    ninja, cmake = report.tool("ninja"), report.tool("cmake")
    assert ninja is not None and ninja.version == "1.13.2"
    assert cmake is not None and cmake.version == "4.4.4"
    assert report.tool("pybind11") is not None
    assert json.dumps(report.to_json())


def test_current_python_describes_this_interpreter() -> None:
    py = current_python()
    assert py.abi_tag.startswith("cp3") and py.ext_suffix.endswith((".so", ".pyd"))
    assert py.site_packages


def test_distribution_version_from_the_dist_info_folder(tmp_path: Path) -> None:
    from flashbuild.detect.pyenv import distribution_version

    first, second = tmp_path / "a", tmp_path / "b"
    (first / "pybind11").mkdir(parents=True)  # the package without metadata: not it
    (second / "pybind11-3.1.0.dist-info").mkdir(parents=True)
    (second / "pybind11_stubgen-2.5.dist-info").mkdir()
    (second / "Typing_Extensions-4.16.0.dist-info").mkdir()
    assert distribution_version("pybind11", [first, second]) == "3.1.0"
    assert distribution_version("typing-extensions", [first, second]) == "4.16.0"
    assert distribution_version("ninja", [first, second, tmp_path / "missing"]) is None
