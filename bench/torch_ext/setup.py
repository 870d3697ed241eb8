"""The torch way to build the same sources: a CUDAExtension, for the no-op rebuild comparison.

`FLASHBUILD_BENCH_SOURCE` names the tree (default: the repository's csrc/); every .cu/.cpp
under it that the flashbuild build compiles is listed here, for the same arch
(TORCH_CUDA_ARCH_LIST, e.g. 9.0a). Run: `pip install --no-build-isolation .` in this folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

HERE = Path(__file__).resolve().parent
TREE = Path(os.environ.get("FLASHBUILD_BENCH_SOURCE", HERE.parent.parent / "csrc")).resolve()
# The plugin is a separate library in the CMake build; the sm90 TMA copy needs sm_90a, which
# the portable fallback replaces (the CMake build adds it only for 90a).
SKIP = ("sm90/", "tests/", "attention/plugin.cu")
sources = sorted(str(p) for p in [*TREE.rglob("*.cu"), *TREE.rglob("*.cpp")]
                 if not any(s in p.relative_to(TREE).as_posix() for s in SKIP))
package = os.environ.get("FLASHBUILD_BENCH_PACKAGE", "flashkern")

setup(
    name=f"{package}-torch-bench",
    version="0",
    ext_modules=[CUDAExtension(f"{package}_torch_bench._C", sources, include_dirs=[str(TREE)],
                               extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3"]})],
    cmdclass={"build_ext": BuildExtension},
)
