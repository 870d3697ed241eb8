"""FB195: a CMakeLists.txt that finds torch and pins C++17 (torchmcubes 0.1.0) compiles none of
its torch units with torch 2.14, whose headers `#error` below C++20. The drafted step raises
the standard for torch 2.14 and later only, and the build's `when` context knows the torch the
build uses (read from its version.py, never imported)."""

from __future__ import annotations

from pathlib import Path

from packaging.version import Version

from flashbuild.arch import parse_arch_spec
from flashbuild.detect.pyenv import torch_version
from flashbuild.recipes.model import When
from flashbuild.recipes.when import WhenContext, evaluate
from flashbuild.scanning.checks_cmake import check_cmake
from flashbuild.scanning.findings import FileText, make_target
from flashbuild.scanning.proposals import EditCall

LISTS = """cmake_minimum_required(VERSION 3.18)
project(m LANGUAGES CXX CUDA)
set(CMAKE_CUDA_STANDARD 17)
find_package(Torch CONFIG REQUIRED)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
"""


def _findings(text: str) -> list:  # type: ignore[type-arg]
    report = check_cmake(FileText(path="CMakeLists.txt", text=text, kind="cmake"),
                         make_target("linux", "sm_90a"))
    return [f for f in report.findings if f.rule == "FB195"]


def test_a_pinned_cxx17_beside_find_package_torch_gets_a_step_for_new_torch() -> None:
    found = _findings(LISTS)
    assert [f.line for f in found] == [3, 5]
    step = found[1].fix.step
    assert isinstance(step, EditCall) and step.step is not None
    assert step.step.params == {"file": "CMakeLists.txt", "anchor": "set(CMAKE_CXX_STANDARD 17)",
                                "block": "set(CMAKE_CXX_STANDARD 20)"}
    assert step.step.when == {"torch": ">=2.14.0.dev0"}
    # No torch in the project, or C++20 already: nothing to say.
    assert _findings(LISTS.replace("find_package(Torch CONFIG REQUIRED)", "")) == []
    assert _findings(LISTS.replace(" 17)", " 20)")) == []


def test_the_step_applies_with_torch_2_14_and_not_with_2_13(tmp_path: Path) -> None:
    when = When(torch=">=2.14.0.dev0")
    spec = parse_arch_spec("sm_90a")
    new = WhenContext(platform="linux", arch=spec, torch=Version("2.14.1+cu130"))
    old = WhenContext(platform="linux", arch=spec, torch=Version("2.13.0+cpu"))
    assert evaluate(when, new).matched and not evaluate(when, old).matched
    # An NGC-style pre-release of 2.14 needs C++20 too.
    pre = WhenContext(platform="linux", arch=spec, torch=Version("2.14.0a0+git1234"))
    assert evaluate(when, pre).matched
    site = tmp_path / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.14.1+cu130'\ncuda: Optional[str] = "
        "'13.0'\n", encoding="utf-8")
    assert torch_version([tmp_path / "other", site]) == "2.14.1+cu130"
    assert torch_version([tmp_path / "other"]) is None
