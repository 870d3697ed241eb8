"""A CMake-usable CUDA toolkit root for any toolkit doctor finds.

A standard toolkit is used as is. The PyPI wheel tree on Linux is not toolkit-shaped: no
lib64, no targets/x86_64-linux/, no libcudart.so, and nvcc.profile links from
`$(TOP)/targets/<arch>/lib64`, so nvcc links, CMake's CUDA compiler check and FindCUDAToolkit
all fail on it (FACTS.md "A CUDA toolchain from PyPI"). For it we build, once per
installation, the toolkit-shaped folder FACTS.md describes, in a cache folder keyed by the
toolkit's fingerprint; on Windows the wheel layout already matches what nvcc expects.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild import platforms
from flashbuild.errors import ToolchainError
from flashbuild.toolchain_facts import CCCL_INCLUDE_SUBDIR, PYPI_TOOLKIT_EXTRAS

if TYPE_CHECKING:
    from flashbuild.detect.cuda import Toolkit
    from flashbuild.platforms.base import Platform

#: Written last into a finished folder; a folder without it is never used.
_COMPLETE = ".flashbuild-toolkit"
# nvcc finds nvcc.profile from its own real path, so a symlinked nvcc would read the wheel's
# profile (FACTS.md): these two must be real files (hard links or copies).
_REAL_FILES = ("nvcc", "nvcc.profile")
_VERSIONED_SO = re.compile(r"^(lib.+\.so)\.\d+$")


def cmake_toolkit_root(toolkit: Toolkit, cache_dir: Path, platform: Platform | None = None) -> Path:
    """The folder to give CMake as CUDAToolkit_ROOT / whose bin/nvcc is CMAKE_CUDA_COMPILER.

    Standard layout: the toolkit's own root. PyPI layout on Linux: a toolkit-shaped folder
    under `cache_dir`, created atomically and reused while the installation is unchanged.
    Raises ToolchainError when the toolkit has no nvcc or the folder cannot be made."""
    if platform is None:
        platform = platforms.current()
    if toolkit.layout == "standard" or platform.pypi_toolkit_usable_as_is:
        return toolkit.root
    if toolkit.nvcc is None:
        raise ToolchainError(
            f"the PyPI CUDA tree at {toolkit.root} has no nvcc",
            evidence=f"{toolkit.root / 'bin'} holds no nvcc",
            fix="pip install the project's CUDA extra: `pip install -e .[cuda]` (it pins "
            f"cuda-toolkit[{','.join(PYPI_TOOLKIT_EXTRAS)}])",
        )
    # The shaped folder links each library the wheel tree holds at the time it is made: a
    # component installed later (cuBLAS, the `cublas` extra of cuda-toolkit, which FlashRT
    # links) must give a new folder, so the listing is part of the key.
    try:
        libs = sorted(p.name for p in (toolkit.root / "lib").iterdir())
    except OSError:
        libs = []
    key = hashlib.sha256("\0".join([toolkit.fingerprint, *libs]).encode()).hexdigest()[:16]
    version = toolkit.version.public if toolkit.version else "unknown"
    final = cache_dir / f"cuda-{version}-{key}"
    if (final / _COMPLETE).is_file():
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=cache_dir))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; the toolkit is for every build
        _shape(toolkit.root, staging, platform.toolkit_target_dir())
        (staging / _COMPLETE).write_text(toolkit.fingerprint + "\n", encoding="utf-8")
        try:
            staging.rename(final)
        except OSError:
            # Another process finished first (rename onto a non-empty folder fails): use its.
            if not (final / _COMPLETE).is_file():
                raise
    except OSError as exc:
        raise ToolchainError(
            "could not build a CMake-usable toolkit folder from the PyPI CUDA tree",
            evidence=f"{exc.strerror or exc}: {exc.filename or final}",
            fix=f"check that {cache_dir} is writable, or point --cuda at a standard toolkit",
        ) from exc
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)  # another file system, or hard links refused


def _shape(src: Path, dst: Path, target_dir: str) -> None:
    """Lay out `dst` as a standard toolkit over the wheel tree `src` (absolute links, so the
    folder works wherever CMake copies paths to)."""
    src = src.resolve()
    (dst / "bin").mkdir()
    for entry in sorted((src / "bin").iterdir()):
        if entry.name in _REAL_FILES and entry.is_file():
            _link_or_copy(entry, dst / "bin" / entry.name)
        else:
            (dst / "bin" / entry.name).symlink_to(entry)
    for name in ("include", "nvvm"):
        if (src / name).exists():
            (dst / name).symlink_to(src / name, target_is_directory=True)
    lib = dst / "lib"
    lib.mkdir()
    names = set()
    if (src / "lib").is_dir():
        for entry in sorted((src / "lib").iterdir()):
            (lib / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
            names.add(entry.name)
    # The wheel ships libcudart.so.13 but no libcudart.so, which `-lcudart` and
    # FindCUDAToolkit's CUDA_CUDART need: add the unversioned development links.
    for name in sorted(names):
        match = _VERSIONED_SO.match(name)
        if match and match[1] not in names:
            (lib / match[1]).symlink_to(name)
            names.add(match[1])
    (dst / "lib64").symlink_to("lib", target_is_directory=True)
    target = dst / "targets" / target_dir
    target.mkdir(parents=True)
    (target / "include").symlink_to(Path("..") / ".." / "include", target_is_directory=True)
    (target / "lib").symlink_to(Path("..") / ".." / "lib", target_is_directory=True)
    # nvcc.profile asks for lib$(_TARGET_SIZE_) under targets/; _TARGET_SIZE_ is empty on
    # 64-bit hosts, but keep lib64 too for tools that look there.
    (target / "lib64").symlink_to("lib", target_is_directory=True)



def cccl_include_dir(root: Path) -> Path | None:
    """`<root>/include/cccl` when the toolkit keeps CCCL (`cuda/std/*`, `cub/`, `thrust/`)
    there, as CUDA 13 does; None for CUDA 12, whose CCCL sits in `include/` itself.

    nvcc adds this folder for itself (its nvcc.profile: `-isystem .../include/cccl`), but a
    host compiler given only `<root>/include` does not see it: torch's cpp_extension gives a
    `.cpp` exactly that, so a `.cpp` that includes CUTLASS stops at `<cuda/std/utility>`
    (FACTS.md "The seed trees on the GPU machine"; pytorch PR #170303 proposed the same)."""
    folder = Path(root).joinpath(*CCCL_INCLUDE_SUBDIR)
    return folder if (folder / "cuda").is_dir() else None
