"""Trees refused before anything is staged (building/treecheck.py): submodules the build uses
that are not checked out, and a setuptools_scm version nothing can be read from."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashbuild.arch import parse_arch_spec
from flashbuild.building import treecheck
from flashbuild.errors import TreeError

SM90 = parse_arch_spec("sm_90a").archs
GITMODULES = """[submodule "third_party/cutlass"]
\tpath = third_party/cutlass
\turl = https://github.com/NVIDIA/cutlass.git
[submodule "third_party/composable_kernel_tiled"]
\tpath = third_party/composable_kernel_tiled
\turl = https://github.com/ROCm/composable_kernel.git
\tbranch = develop
"""
# xformers' shape: the CUDA extension takes CUTLASS's headers, the ROCm one (not built for a
# CUDA target) composable_kernel's.
SETUP = """import os
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
ext = []
if os.environ.get("BUILD_TARGET") == "rocm":
    ext.append(CUDAExtension(name="pkg._hip", sources=["csrc/k.cu"],
                             include_dirs=["third_party/composable_kernel_tiled/include"]))
else:
    ext.append(CUDAExtension(name="pkg._C", sources=["csrc/k.cu"],
                             include_dirs=["third_party/cutlass/include"]))
setup(name="pkg", ext_modules=ext, cmdclass={"build_ext": BuildExtension})
"""


def _tree(root: Path, *, cutlass: bool) -> Path:
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "k.cu").write_text("__global__ void k() {}\n")
    (root / "setup.py").write_text(SETUP)
    (root / ".gitmodules").write_text(GITMODULES)
    (root / "third_party" / "cutlass").mkdir(parents=True)
    (root / "third_party" / "composable_kernel_tiled").mkdir()
    if cutlass:
        (root / "third_party" / "cutlass" / "include").mkdir()
    return root


def test_gitmodules_are_read() -> None:
    assert treecheck.gitmodules(Path("/nonexistent")) == []


def test_a_plain_clone_is_refused_naming_the_command(tmp_path: Path) -> None:
    tree = _tree(tmp_path, cutlass=False)
    with pytest.raises(TreeError) as err:
        treecheck.refuse_missing_submodules(tree, platform="linux", archs=SM90)
    assert "third_party/cutlass is not checked out" in str(err.value)
    assert "git submodule update --init --recursive" in err.value.fix
    assert "https://github.com/NVIDIA/cutlass.git" in err.value.evidence
    assert "third_party/cutlass/include" in err.value.evidence
    assert "composable_kernel" not in str(err.value) + err.value.evidence  # ROCm only


def test_an_empty_submodule_the_build_does_not_use_is_fine(tmp_path: Path) -> None:
    tree = _tree(tmp_path, cutlass=True)  # composable_kernel_tiled stays empty
    treecheck.refuse_missing_submodules(tree, platform="linux", archs=SM90)


def test_a_cmake_tree_that_names_the_submodule(tmp_path: Path) -> None:
    (tmp_path / ".gitmodules").write_text(GITMODULES)
    (tmp_path / "third_party" / "cutlass").mkdir(parents=True)
    (tmp_path / "CMakeLists.txt").write_text(
        "project(x LANGUAGES CXX CUDA)\n"
        "include_directories(${PROJECT_SOURCE_DIR}/third_party/cutlass/include)\n")
    with pytest.raises(TreeError):
        treecheck.refuse_missing_submodules(tmp_path, platform="linux", archs=SM90)


SCM_PYPROJECT = "[build-system]\nrequires = ['setuptools', 'setuptools_scm']\n\n" \
    "[tool.setuptools_scm]\n"


def test_setuptools_scm_without_git_is_refused(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "pyproject.toml").write_text(SCM_PYPROJECT)
    with pytest.raises(TreeError) as err:
        treecheck.refuse_unreadable_version(tree, {})
    assert "version cannot be read" in str(err.value)
    assert "SETUPTOOLS_SCM_PRETEND_VERSION" in err.value.fix
    # Each of these gives setuptools_scm a version.
    treecheck.refuse_unreadable_version(tree, {"SETUPTOOLS_SCM_PRETEND_VERSION": "1.0"})
    treecheck.refuse_unreadable_version(tree, {"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_T": "1"})
    (tree / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: t\nVersion: 1.0\n")
    treecheck.refuse_unreadable_version(tree, {})
    (tree / "PKG-INFO").unlink()
    (tree / ".git").mkdir()
    treecheck.refuse_unreadable_version(tree, {})


def test_setup_py_use_scm_version_and_a_plain_version(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text("from setuptools import setup\n"
                                       "setup(name='x', use_scm_version=True)\n")
    with pytest.raises(TreeError):
        treecheck.refuse_unreadable_version(tmp_path, {})
    (tmp_path / "setup.py").write_text("from setuptools import setup\n"
                                       "setup(name='x', version='1.0')\n")
    treecheck.refuse_unreadable_version(tmp_path, {})
