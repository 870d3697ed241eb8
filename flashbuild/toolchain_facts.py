"""Toolchain facts: the thresholds and folder names of CUDA, MSVC and torch that more than one
stage needs, each with where it comes from.

Scan (its rule texts and checks), doctor (the accepted host compilers), build (the MSVC flags,
the DLL folders, the install hints) and ci (the PyPI toolkit extras) read them from here, so a
fact changes in one place. The module imports nothing of flashbuild: every layer may use it.
`tests/unit/test_toolchain_facts.py` fails when one of these numbers is spelled again
elsewhere in the package.

Sources are the toolkits themselves where they could be read (each nvcc's
`crt/host_config.h`), NVIDIA's and Microsoft's documentation, and the upstream issues that
found the fact; FACTS.md records how each was checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

# --- host compilers nvcc accepts ------------------------------------------------------------


@dataclass(frozen=True)
class HostCompilerRow:
    """The host compilers one CUDA release's nvcc accepts."""

    msc_min: int
    """Lowest accepted `_MSC_VER` (inclusive)."""
    msc_end: int
    """First rejected `_MSC_VER` (exclusive): VS 2026's toolset 14.50 is `_MSC_VER` 1950."""
    gcc_max: int
    """Newest accepted GCC major."""


#: By CUDA (major, minor): the `_MSC_VER < N || _MSC_VER >= M` and `__GNUC__ > G` tests of each
#: release's `include/crt/host_config.h` (read from the toolkits and the PyPI
#: nvidia-cuda-nvcc / nvidia-cuda-crt wheels). The header of the toolkit in use wins; this is
#: the fallback when it cannot be read. NVIDIA's own tables:
#: https://docs.nvidia.com/cuda/cuda-installation-guide-microsoft-windows/#system-requirements
#: https://docs.nvidia.com/cuda/cuda-installation-guide-linux/#host-compiler-support-policy
HOST_COMPILERS: dict[tuple[int, int], HostCompilerRow] = {
    (12, 8): HostCompilerRow(1910, 1950, 14),
    (12, 9): HostCompilerRow(1910, 1950, 14),
    (13, 0): HostCompilerRow(1920, 1950, 15),
    (13, 1): HostCompilerRow(1920, 1950, 15),
    (13, 2): HostCompilerRow(1920, 1960, 15),  # 13.2 is the first to accept VS 2026 (19.50)
    (13, 3): HostCompilerRow(1920, 1960, 16),
    (13, 4): HostCompilerRow(1920, 1960, 16),
    (13, 5): HostCompilerRow(1920, 1960, 16),
}

#: CUDA 12 releases older than HOST_COMPILERS's rows (what NVIDIA's network installer still
#: gives a CI job), by the first `_MSC_VER` their host_config.h rejects: 12.4 stops at VS 2022
#: 17.9 (1939); 12.5 was the first to take 17.10+ (19.40+). Their lowest accepted is 1910.
INSTALLER_HOST_MSC: dict[str, HostCompilerRow] = {
    "12.4": HostCompilerRow(1910, 1940, 13),
    "12.6": HostCompilerRow(1910, 1950, 13),
}

#: An MSVC toolset every CUDA in HOST_COMPILERS accepts (toolset 14.4x is `cl` 19.4x, _MSC_VER
#: 194x): GitHub's windows-2022 image has it as its default, and windows-2025 / windows-latest
#: (VS 2026, 14.5x by default) install it beside (https://github.com/actions/runner-images,
#: component `Microsoft.VisualStudio.Component.VC.14.44.17.14.x86.x64`). The fix to suggest
#: when no installed toolset is accepted.
MSVC_TOOLSET_FOR_ALL_CUDA = "14.44"


# --- flags MSVC builds of CUDA code need ----------------------------------------------------

#: The first CUDA whose CCCL stops with `#error` (C1189) under MSVC's traditional
#: preprocessor, so cl needs `/Zc:preprocessor` (passed through nvcc as `-Xcompiler`). The
#: CCCL of 13.0 does not check. https://github.com/Dao-AILab/flash-attention/issues/2395,
#: https://github.com/pytorch/pytorch/issues/197574,
#: https://learn.microsoft.com/en-us/cpp/build/reference/zc-preprocessor
ZC_PREPROCESSOR_FROM_CUDA = Version("13.2")
ZC_PREPROCESSOR = "/Zc:preprocessor"

#: Host flags CUTLASS-style code needs from cl whatever the CUDA: `/Zc:__cplusplus` (CUTLASS
#: before 4.3 reads `__cplusplus`, which cl leaves at 199711L without it;
#: https://github.com/Dao-AILab/flash-attention/pull/1932), `/bigobj` (template-heavy units
#: pass 65,279 sections, C1128), `/utf-8` (sources read in the ANSI code page otherwise, C2001
#: on non-English systems), `/EHsc` (C++ exceptions; cl's default is none).
MSVC_HOST_FLAGS = ("/Zc:__cplusplus", "/bigobj", "/utf-8", "/EHsc")

#: The first torch whose headers, included from a `.cu` file compiled by nvcc + cl, stop with
#: C2872 "'std': ambiguous symbol" unless `USE_CUDA` is defined
#: (https://github.com/thu-ml/SageAttention/issues/101, .../issues/228, .../issues/281,
#: https://github.com/pytorch/pytorch/issues/148317).
USE_CUDA_FROM_TORCH = Version("2.7")
USE_CUDA_DEFINE = "-DUSE_CUDA"


def msvc_needs_zc_preprocessor(cuda: Version | None) -> bool:
    """Whether CUDA `cuda`'s CCCL needs `/Zc:preprocessor` from cl (unknown CUDA: no)."""
    return cuda is not None and Version(f"{cuda.major}.{cuda.minor}") >= ZC_PREPROCESSOR_FROM_CUDA


def msvc_needs_use_cuda(torch: Version | None) -> bool:
    """Whether torch `torch`'s headers need `-DUSE_CUDA` in `.cu` files under cl."""
    return torch is not None and torch.release[:2] >= USE_CUDA_FROM_TORCH.release[:2]


# --- where the toolkit keeps things ---------------------------------------------------------

#: The sub folders of a CUDA root that may hold its DLLs on Windows, in the order to search:
#: the CUDA 13 installer's `bin\x64`, the CUDA 13 PyPI wheel's `bin\x86_64`
#: (`nvidia\cu13\bin\x86_64\cudart64_13.dll`), CUDA <= 12's `bin`. Python >= 3.8 ignores PATH
#: for a .pyd's DLLs, so each must be registered with os.add_dll_directory
#: (https://docs.python.org/3/library/os.html#os.add_dll_directory). The loader shim template
#: (installing/resources/loader_shim.py) runs without flashbuild and spells the same list; a
#: test keeps the two equal.
TOOLKIT_DLL_SUBDIRS: tuple[tuple[str, ...], ...] = (("bin", "x64"), ("bin", "x86_64"), ("bin",))

#: The folder of a PyPI CUDA wheel that holds its DLLs / shared libraries besides `lib` and
#: `bin`: `nvidia/cu13/bin/x86_64` (the `cuda-toolkit` 13.x wheels for Windows).
WHEEL_DLL_SUBDIRS: tuple[tuple[str, ...], ...] = (("lib",), ("bin",), ("bin", "x86_64"))

#: CUDA 13 keeps CCCL (`cuda/std/*`, `cub/`, `thrust/`) in `<root>/include/cccl`, which nvcc
#: adds for itself (its nvcc.profile) but a host compiler given `<root>/include` does not see;
#: CUDA 12 keeps it in `include/` (checked on /usr/local/cuda-13.0 and the 13.0 wheels;
#: https://github.com/pytorch/pytorch/pull/170303).
CCCL_INCLUDE_SUBDIR = ("include", "cccl")


# --- the CUDA toolchain from PyPI -----------------------------------------------------------

#: The extras of PyPI's `cuda-toolkit` that make a whole nvcc. Name `nvvm`: without it pip takes
#: the newest `nvidia-nvvm`, whose PTX an older ptxas rejects (`ptxas fatal: Unsupported
#: .version 9.5`; checked with 13.0.2, https://pypi.org/project/cuda-toolkit/).
PYPI_TOOLKIT_EXTRAS = ("nvcc", "cudart", "cccl", "crt", "nvvm")

#: The `cuda-toolkit` release the install hints name (a whole nvcc, checked on Linux).
PYPI_TOOLKIT_RELEASE = "13.0.2"


def pypi_toolkit_requirement(extra: tuple[str, ...] = (), release: str = PYPI_TOOLKIT_RELEASE,
                             ) -> str:
    """`cuda-toolkit[nvcc,cudart,cccl,crt,nvvm]==13.0.2`, with `extra` extras appended."""
    return f"cuda-toolkit[{','.join((*PYPI_TOOLKIT_EXTRAS, *extra))}]=={release}"
