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
from flashbuild.errors import FlashbuildError, ToolchainError
from flashbuild.toolchain_facts import CCCL_INCLUDE_SUBDIR, PYPI_TOOLKIT_EXTRAS

if TYPE_CHECKING:
    from flashbuild.building.request import HostCompiler
    from flashbuild.detect.cuda import Toolkit
    from flashbuild.platforms.base import Platform
    from flashbuild.runner import Runner

#: Written last into a finished folder; a folder without it is never used.
_COMPLETE = ".flashbuild-toolkit"
# nvcc finds nvcc.profile from its own real path, so a symlinked nvcc would read the wheel's
# profile (FACTS.md): these two must be real files (hard links or copies).
_REAL_FILES = ("nvcc", "nvcc.profile")
_VERSIONED_SO = re.compile(r"^(lib.+\.so)\.\d+$")
#: Raised when what a shaped folder holds changes, so folders made before are made again.
_SHAPE_VERSION = "2"
#: The driver API functions cuda.h declares, after its preprocessor has mapped each name to
#: the versioned symbol the driver exports (`cuCtxCreate` -> `cuCtxCreate_v4`).
_DRIVER_FUNCTION = re.compile(r"\bCUresult\s+(cu\w+)\s*\(")


def cmake_toolkit_root(toolkit: Toolkit, cache_dir: Path, platform: Platform | None = None,
                       *, stub_with: tuple[Runner, Path] | None = None) -> Path:
    """The folder to give CMake as CUDAToolkit_ROOT / whose bin/nvcc is CMAKE_CUDA_COMPILER.

    Standard layout: the toolkit's own root. PyPI layout on Linux: a toolkit-shaped folder
    under `cache_dir`, created atomically and reused while the installation is unchanged.
    `stub_with` (a runner and the host compiler) also gives it the driver's link stub
    (`driver_stub`). Raises ToolchainError when the toolkit has no nvcc or the folder cannot
    be made."""
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
    key = hashlib.sha256("\0".join([_SHAPE_VERSION, str(stub_with is not None),
                                    toolkit.fingerprint, *libs]).encode()).hexdigest()[:16]
    version = toolkit.version.public if toolkit.version else "unknown"
    final = cache_dir / f"cuda-{version}-{key}"
    if (final / _COMPLETE).is_file():
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=cache_dir))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; the toolkit is for every build
        _shape(toolkit.root, staging, platform.toolkit_target_dir())
        if stub_with is not None and not (staging / "lib" / "libcuda.so").exists():
            driver_stub(staging, *stub_with)
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


def stub_compiler(runner: Runner, host: HostCompiler) -> tuple[Runner, Path] | None:
    """What `cmake_toolkit_root(stub_with=...)` needs to write the driver stub: the host
    compiler when it is GCC or Clang (the PyPI toolkit is shaped on Linux only)."""
    if host.kind not in ("gcc", "clang") or not host.path:
        return None
    return runner, Path(host.path)


def driver_stub(root: Path, runner: Runner, cc: Path) -> bool:
    """Write `<root>/lib/stubs/libcuda.so`, a link stub of the GPU driver's library, as a
    toolkit from NVIDIA's installer ships one; False when it could not be made.

    Trees link the driver API through CMake's `CUDA::cuda_driver` (ggml-cuda in
    llama-cpp-python for its virtual memory management), which FindCUDAToolkit finds in the
    toolkit's `lib/stubs` when no driver is installed. The PyPI wheels ship no stub
    (nvidia-cuda-runtime 13.0.96 holds libcudart only), so those trees could not configure
    with the PyPI toolkit. The stub defines every function `include/cuda.h` declares (the
    versioned symbols, from the host compiler's preprocessor) and names itself `libcuda.so.1`,
    so what links against it loads the real driver at run time; FindCUDAToolkit marks a
    library found under `stubs/` as one for linkers only."""
    header = root / "include" / "cuda.h"
    stubs = root / "lib" / "stubs"
    try:
        stubs.mkdir(parents=True, exist_ok=True)
        seen = runner.run([cc, "-E", "-P", "-x", "c", header], timeout=120, check=False)
        names = sorted(set(_DRIVER_FUNCTION.findall(seen.stdout))) if seen.returncode == 0 \
            else []
        if not names:
            return False
        source = stubs / "libcuda_stub.c"
        source.write_text("/* flashbuild's link stub of the CUDA driver library: never loaded "
                          "(its soname is the driver's). */\n" +
                          "".join(f"int {name}(void) {{ return 999; }}\n" for name in names),
                          encoding="utf-8")
        built = runner.run([cc, "-x", "c", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1",
                            "-o", stubs / "libcuda.so", source], timeout=300, check=False)
        source.unlink()
    except (OSError, FlashbuildError):
        return False
    return built.returncode == 0


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
