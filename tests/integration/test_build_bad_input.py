"""Bad input is refused before anything compiles, in one paragraph, with the source tree
unchanged (issue 19, item 5): a clone without the submodules its build uses, a setup.py that
downloads during the build, a version scheme nothing can be read from."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashbuild.building.backends import setuptools as st
from flashbuild.building.cmake import find_tools
from flashbuild.errors import BuildError
from flashbuild.proc import ProcessRunner

pytestmark = pytest.mark.integration

SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
{extra}
setup(name="bad", version="0.1", packages=["bad"],
      ext_modules=[CUDAExtension(name="bad._C", sources=["csrc/k.cu"],
                                 include_dirs=["third_party/cutlass/include"])],
      cmdclass={{"build_ext": BuildExtension}})
"""


def _tree(root: Path, *, extra: str = "", cutlass: bool = True) -> Path:
    tree = root / "bad"
    (tree / "csrc").mkdir(parents=True)
    (tree / "bad").mkdir()
    (tree / "bad" / "__init__.py").write_text("")
    (tree / "csrc" / "k.cu").write_text('extern "C" __global__ void k(float* x) {}\n')
    (tree / "setup.py").write_text(SETUP.format(extra=extra))
    (tree / ".gitmodules").write_text('[submodule "cutlass"]\n\tpath = third_party/cutlass\n'
                                      "\turl = https://github.com/NVIDIA/cutlass.git\n")
    (tree / "third_party" / "cutlass").mkdir(parents=True)
    if cutlass:
        (tree / "third_party" / "cutlass" / "include").mkdir()
    return tree


def _snapshot(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*"))
            if p.is_file()}


def _cli(tree: Path, cuda: Path) -> tuple[int, dict[str, object]]:
    done = subprocess.run([sys.executable, "-m", "flashbuild", "build", str(tree), "--arch",
                           "sm_90a", "--cuda", str(cuda), "--json"], cwd=tree.parent,
                          capture_output=True, text=True, check=False, timeout=600)
    return done.returncode, json.loads(done.stdout)


def test_missing_submodules_are_refused_before_anything(tmp_path: Path,
                                                        cuda_toolkit_root: Path) -> None:
    tree = _tree(tmp_path, cutlass=False)
    before = _snapshot(tree)
    code, doc = _cli(tree, cuda_toolkit_root)
    assert code == 10, doc
    assert "third_party/cutlass is not checked out" in str(doc["what"])
    assert "git submodule update --init --recursive" in str(doc["fix"])
    assert "\n" not in str(doc["what"])
    assert _snapshot(tree) == before
    assert not (tmp_path / "build").exists(), "nothing drafted, staged or built"


def test_an_unreadable_version_is_refused_before_anything(tmp_path: Path,
                                                          cuda_toolkit_root: Path) -> None:
    tree = _tree(tmp_path)
    (tree / "pyproject.toml").write_text("[tool.setuptools_scm]\n")
    before = _snapshot(tree)
    code, doc = _cli(tree, cuda_toolkit_root)
    assert code == 10, doc
    assert "version cannot be read" in str(doc["what"])
    assert _snapshot(tree) == before
    assert not list((tmp_path / "build").rglob("src")), "nothing staged"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_a_download_during_the_build_stops_at_once_before_compiling(
        tmp_path: Path, cuda_toolkit_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flashbuild.pipeline.command import run_build

    monkeypatch.setattr(st, "check_torch_cuda", lambda torch, request: None)
    # A host that is not this machine (TEST-NET-1, RFC 5737): refused by the build's network
    # switch at once, whether or not this machine is online.
    fetch = ("import urllib.request\n"
             "urllib.request.urlopen('http://192.0.2.1/prebuilt.whl', timeout=60)\n")
    tree = _tree(tmp_path, extra=fetch)
    before = _snapshot(tree)
    build_dir = tmp_path / "b"
    with pytest.raises(BuildError) as err:
        run_build(recipe=None, source=tree, arch="sm_90a", cuda=cuda_toolkit_root,
                  platform=None, jobs_text="2", launcher_text="none", install_text="none",
                  build_dir=build_dir, as_json=True)
    assert "tried to download" in str(err.value)
    assert "network access is off during the build" in err.value.evidence
    assert "192.0.2.1" in err.value.evidence
    assert not list(build_dir.rglob("*.o")), "nothing may be compiled"
    assert _snapshot(tree) == before


def test_a_cmakelists_cmake_4_refuses_names_the_define_that_gets_past_it(
        tmp_path: Path, cuda_toolkit_root: Path) -> None:
    # libKMCUDA's `cmake_minimum_required(VERSION 3.2)`, built from a recipe written without
    # the define `recipe init` drafts: one paragraph with the recipe line, before compiling.
    cmake_exe = find_tools(ProcessRunner(), {"PATH": "/usr/bin:/bin"}).cmake
    version = subprocess.run([str(cmake_exe), "--version"], capture_output=True, text=True,
                             check=True).stdout.split()[2]
    if int(version.split(".")[0]) < 4:
        pytest.skip(f"CMake {version} configures such a project as it is")
    tree = tmp_path / "oldmin"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "introspect" /
                    "cmake_oldminimum", tree)
    recipe = tmp_path / "oldmin.toml"
    recipe.write_text('[recipe]\nname = "oldmin"\n[source]\npath = "oldmin"\n[build]\n'
                      'targets = ["oldmin"]\n[[artifact]]\nname = "oldmin"\nkind = "plugin"\n'
                      'target = "oldmin"\n', encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "flashbuild", "build", "--recipe", str(recipe),
                           "--arch", "sm_90a", "--cuda", str(cuda_toolkit_root), "--install",
                           "none", "--json"], cwd=tmp_path, capture_output=True, text=True,
                          check=False, timeout=600)
    assert done.returncode == 6, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert "older than 3.5" in str(doc["what"]), doc
    assert '[[build.options]] define = { CMAKE_POLICY_VERSION_MINIMUM = "3.5" }' in \
        str(doc["fix"]), doc
