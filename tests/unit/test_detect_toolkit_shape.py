"""cmake_toolkit_root on fake trees (the real CMake run is in tests/integration)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from packaging.version import Version

from flashbuild.building.toolkit import cmake_toolkit_root
from flashbuild.detect.cuda import Toolkit
from flashbuild.errors import ToolchainError
from flashbuild.platforms.linux import LinuxPlatform
from flashbuild.platforms.windows import WindowsPlatform

if TYPE_CHECKING:
    from pathlib import Path


def pypi_tree(site: Path) -> Path:
    root = site / "nvidia" / "cu13"
    for folder in ("bin", "include", "lib/cmake", "nvvm/bin"):
        (root / folder).mkdir(parents=True)
    (root / "bin" / "nvcc").write_text("nvcc binary")
    (root / "bin" / "nvcc.profile").write_text("TOP = $(_HERE_)/..\n")
    (root / "bin" / "ptxas").write_text("ptxas binary")
    (root / "include" / "cuda_runtime.h").write_text("")
    (root / "lib" / "libcudart.so.13").write_text("elf")
    (root / "lib" / "libnvvm.so.4").write_text("elf")
    (root / "lib" / "libcudadevrt.a").write_text("ar")
    return root


def toolkit(root: Path, layout: str = "pypi", nvcc: bool = True) -> Toolkit:
    return Toolkit(root=root, nvcc=root / "bin" / "nvcc" if nvcc else None,
                   version=Version("13.0.88"), version_source="nvcc", codes=("sm_90",),
                   layout=layout,  # type: ignore[arg-type]
                   dll_dirs=(), has_headers=True, host_config=None, origins=("pypi",))


def test_pypi_tree_becomes_toolkit_shaped(tmp_path: Path) -> None:
    root = pypi_tree(tmp_path / "site")
    shaped = cmake_toolkit_root(toolkit(root), tmp_path / "cache", LinuxPlatform())
    assert shaped.parent == tmp_path / "cache" and shaped.name.startswith("cuda-13.0.88-")
    # nvcc and its profile are real files (nvcc reads the profile beside its real path).
    for name in ("nvcc", "nvcc.profile"):
        assert not (shaped / "bin" / name).is_symlink()
        assert (shaped / "bin" / name).read_text() == (root / "bin" / name).read_text()
    assert (shaped / "bin" / "ptxas").resolve() == (root / "bin" / "ptxas").resolve()
    assert (shaped / "include").resolve() == root.resolve() / "include"
    assert (shaped / "nvvm").resolve() == root.resolve() / "nvvm"
    assert (shaped / "lib" / "libcudart.so").resolve() == (root / "lib" / "libcudart.so.13"
                                                           ).resolve()
    assert (shaped / "lib" / "libnvvm.so").is_symlink()
    assert (shaped / "lib64" / "libcudadevrt.a").exists()
    target = shaped / "targets" / "x86_64-linux"
    assert (target / "include" / "cuda_runtime.h").exists()
    assert (target / "lib" / "libcudart.so").exists()


def test_shaping_is_idempotent_and_leaves_no_staging(tmp_path: Path) -> None:
    root = pypi_tree(tmp_path / "site")
    first = cmake_toolkit_root(toolkit(root), tmp_path / "cache", LinuxPlatform())
    marker = (first / ".flashbuild-toolkit").stat().st_mtime_ns
    second = cmake_toolkit_root(toolkit(root), tmp_path / "cache", LinuxPlatform())
    assert first == second
    assert (first / ".flashbuild-toolkit").stat().st_mtime_ns == marker
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.name]


def test_a_replaced_nvcc_gets_a_new_folder(tmp_path: Path) -> None:
    root = pypi_tree(tmp_path / "site")
    first = cmake_toolkit_root(toolkit(root), tmp_path / "cache", LinuxPlatform())
    (root / "bin" / "nvcc").unlink()
    (root / "bin" / "nvcc").write_text("a newer, longer nvcc binary")
    second = cmake_toolkit_root(toolkit(root), tmp_path / "cache", LinuxPlatform())
    assert second != first
    assert (second / "bin" / "nvcc").read_text() == "a newer, longer nvcc binary"


def test_incomplete_folder_is_not_used(tmp_path: Path) -> None:
    root = pypi_tree(tmp_path / "site")
    first = cmake_toolkit_root(toolkit(root), tmp_path / "cache", LinuxPlatform())
    (first / ".flashbuild-toolkit").unlink()  # as if a run died before finishing
    with pytest.raises(ToolchainError):
        # The final name is taken by a folder without the marker: refuse, do not trust it.
        cmake_toolkit_root(toolkit(root), tmp_path / "cache", LinuxPlatform())


def test_standard_layout_and_windows_are_used_as_is(tmp_path: Path) -> None:
    root = pypi_tree(tmp_path / "site")
    assert cmake_toolkit_root(toolkit(root, "standard"), tmp_path / "c", LinuxPlatform()) == root
    assert cmake_toolkit_root(toolkit(root), tmp_path / "c", WindowsPlatform()) == root
    assert not (tmp_path / "c").exists()


def test_pypi_tree_without_nvcc_is_a_toolchain_error(tmp_path: Path) -> None:
    root = pypi_tree(tmp_path / "site")
    with pytest.raises(ToolchainError, match="has no nvcc"):
        cmake_toolkit_root(toolkit(root, nvcc=False), tmp_path / "cache", LinuxPlatform())


def test_a_component_installed_later_gets_a_new_folder(tmp_path: Path) -> None:
    """`pip install "cuda-toolkit[cublas]"` after a first build adds libcublas.so.13 to the
    wheel tree: the shaped folder must link it (FindCUDAToolkit looks for libcublas.so)."""
    root = pypi_tree(tmp_path / "site")
    first = cmake_toolkit_root(toolkit(root), tmp_path / "cache", LinuxPlatform())
    (root / "lib" / "libcublas.so.13").write_text("elf")
    second = cmake_toolkit_root(toolkit(root), tmp_path / "cache", LinuxPlatform())
    assert second != first
    assert (second / "lib" / "libcublas.so").resolve() == (root / "lib" / "libcublas.so.13")
