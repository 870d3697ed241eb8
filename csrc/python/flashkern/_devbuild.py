"""Developer build of csrc/ with plain CMake + Ninja, shared by tests/gpu and bench/.

Standalone on purpose (only the standard library, and pybind11/cmake/ninja found at run time):
the GPU machine that runs the tests and the benchmark has neither flashbuild nor its
dependencies. Load it by file path (``importlib``), not as ``flashkern._devbuild``, because
``flashkern`` itself cannot be imported before the module is built.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CSRC = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DevBuild:
    """A finished build: ``python_dir`` goes on sys.path; it holds the flashkern package."""

    python_dir: Path
    build_dir: Path
    archs: str


def arch_for_capability(major: int, minor: int) -> str:
    """CMAKE_CUDA_ARCHITECTURES for a GPU of this compute capability (9.0 -> ``90a-real``:
    the Hopper sources need the arch-specific target)."""
    code = f"{major}{minor}"
    return f"{code}a-real" if code == "90" else f"{code}-real"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        bin_dir = Path(sys.executable).parent
        candidate = bin_dir / name
        if candidate.exists():
            return str(candidate)
        raise FileNotFoundError(f"{name} is not on PATH (pip install {name})")
    return found


def _pybind11_dir() -> str:
    import pybind11

    return str(pybind11.get_cmake_dir())


def build(work: Path, archs: str, *, jobs: int | None = None, nvcc: str | None = None,
          quiet: bool = True) -> DevBuild:
    """Configure and build csrc/ into ``work``: the package is copied to ``work/python`` and
    the module and plugin are written into ``work/python/flashkern``."""
    python_dir = work / "python"
    pkg = python_dir / "flashkern"
    if pkg.exists():
        shutil.rmtree(pkg)
    shutil.copytree(CSRC / "python" / "flashkern", pkg,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    build_dir = work / "build"
    configure = [
        _tool("cmake"), "-S", str(CSRC), "-B", str(build_dir), "-G", "Ninja",
        f"-DCMAKE_CUDA_ARCHITECTURES={archs}",
        f"-DFLASHKERN_OUTPUT_DIR={pkg}",
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-Dpybind11_DIR={_pybind11_dir()}",
        f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}",
        "-DCMAKE_BUILD_TYPE=Release",
    ]
    compiler = nvcc or os.environ.get("CUDACXX")
    if compiler:
        configure.append(f"-DCMAKE_CUDA_COMPILER={compiler}")
    compile_ = [_tool("cmake"), "--build", str(build_dir), "-j", str(jobs or os.cpu_count() or 2)]
    for argv in (configure, compile_):
        done = subprocess.run(argv, capture_output=quiet, text=True, check=False)
        if done.returncode != 0:
            output = (done.stdout or "") + (done.stderr or "")
            tail = "\n".join(output.splitlines()[-40:])
            raise RuntimeError(f"flashkern dev build failed: {' '.join(argv)}\n{tail}")
    return DevBuild(python_dir=python_dir, build_dir=build_dir, archs=archs)


def main() -> None:
    """``python csrc/python/flashkern/_devbuild.py WORKDIR [ARCHS]``."""
    work = Path(sys.argv[1]).resolve()
    archs = sys.argv[2] if len(sys.argv) > 2 else "90a-real"
    result = build(work, archs, quiet=False)
    print(result.python_dir)


if __name__ == "__main__":
    main()
