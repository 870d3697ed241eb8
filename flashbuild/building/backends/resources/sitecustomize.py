"""flashbuild's build hook for setup.py trees built with torch.utils.cpp_extension.

flashbuild puts the folder holding this file first on PYTHONPATH for the build only, so every
Python process of that build (pip's PEP 517 subprocess running setup.py) imports it at start-up
as `sitecustomize`. It imports nothing heavy: it waits until the tree imports
`torch.utils.cpp_extension`, then wraps `BuildExtension.build_extensions` so that, for every
extension with CUDA sources, before torch renders its build.ninja:

- the tree's own arch flags (`-gencode`, `--generate-code`, `-arch`, `-code`, in every spelling)
  are removed from the nvcc arguments and flashbuild's `-gencode` flags for `--arch` are added:
  only the requested arch is built, whatever the setup.py hard-codes (causal-conv1d, FlashMLA
  and flash-attention list their own archs, and torch then ignores TORCH_CUDA_ARCH_LIST:
  `_get_cuda_arch_flags` returns nothing as soon as any nvcc flag contains "arch");
- the extra nvcc / C++ flags flashbuild computed (the MSVC ones on Windows) are appended;
- `build_temp` is moved to a short folder when flashbuild asks (Windows: torch puts objects
  under `build_temp/<absolute source path>`, past 260 characters for deep trees).

What it changed is appended, one JSON object per extension, to FLASHBUILD_HOOK_REPORT, which
the build reads back. The sitecustomize this file shadows (Debian's, a venv's) still runs.
Settings come from the environment as JSON: FLASHBUILD_GENCODE, FLASHBUILD_NVCC_FLAGS,
FLASHBUILD_CXX_FLAGS, FLASHBUILD_BUILD_TEMP.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys

_TARGET = "torch.utils.cpp_extension"
_HERE = os.path.dirname(os.path.abspath(__file__))
#: Flags that take the next argument as their value unless written `flag=value`.
_ARCH_FLAGS = ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code",
               "--gpu-code")
_CUDA_SUFFIXES = (".cu", ".cuh")


def _settings(name: str) -> list[str]:
    raw = os.environ.get(name, "")
    if not raw:
        return []
    value = json.loads(raw)
    return [str(v) for v in value] if isinstance(value, list) else []


def strip_arch_flags(flags: list[str]) -> tuple[list[str], list[str]]:
    """(flags without any arch selection, the removed flags)."""
    kept: list[str] = []
    removed: list[str] = []
    take_next = False
    for flag in flags:
        text = str(flag)
        if take_next:
            removed.append(text)
            take_next = False
            continue
        head = text.split(maxsplit=1)[0] if text.split() else text
        name = head.split("=", 1)[0]
        if name in _ARCH_FLAGS:
            removed.append(text)
            # `-gencode arch=...` in one string, or `-gencode=...`: the value is inside.
            take_next = "=" not in head and len(text.split()) == 1
            continue
        kept.append(text)
    return kept, removed


def _has_cuda_sources(ext: object) -> bool:
    sources = getattr(ext, "sources", None) or []
    return any(str(s).endswith(_CUDA_SUFFIXES) for s in sources)


def _declares_cuda(ext: object) -> bool:
    """torch's CUDAExtension links cudart (a CppExtension does not; ROCm builds link
    amdhip64): the setup.py said this extension holds device code."""
    return "cudart" in (getattr(ext, "libraries", None) or [])


def _rewrite(ext: object) -> dict[str, object]:
    gencode = _settings("FLASHBUILD_GENCODE")
    nvcc_extra = _settings("FLASHBUILD_NVCC_FLAGS")
    cxx_extra = _settings("FLASHBUILD_CXX_FLAGS")
    args = getattr(ext, "extra_compile_args", None)
    if isinstance(args, dict):
        cxx = list(args.get("cxx", []))
        nvcc = list(args.get("nvcc", []))
    else:  # a plain list goes to both compilers in torch's ninja build
        cxx = list(args or [])
        nvcc = list(args or [])
    nvcc, removed = strip_arch_flags(nvcc)
    ext.extra_compile_args = {  # type: ignore[attr-defined]
        **(args if isinstance(args, dict) else {}),
        "cxx": cxx + cxx_extra,
        "nvcc": nvcc + gencode + nvcc_extra,
    }
    return {"extension": getattr(ext, "name", "?"), "removed": removed, "added": gencode,
            "nvcc_extra": nvcc_extra, "cxx_extra": cxx_extra}


def _patch(module: object) -> None:
    # CUDA_HOME is the toolkit flashbuild chose. torch computes it at import only when it was
    # built with CUDA: a CPU-only torch leaves it None and every CUDAExtension raises. The
    # build refuses a CPU torch before it starts; flashbuild's own integration tests compile
    # against one (its wheel carries the CUDA headers, not the libraries) and fail at the link.
    if getattr(module, "CUDA_HOME", None) is None and os.environ.get("CUDA_HOME"):
        module.CUDA_HOME = os.environ["CUDA_HOME"]  # type: ignore[attr-defined]
    build_ext = getattr(module, "BuildExtension", None)
    if build_ext is None or getattr(build_ext, "_flashbuild_hooked", False):
        return
    original = build_ext.build_extensions

    def build_extensions(self: object) -> object:
        extensions = getattr(self, "extensions", [])
        records = [_rewrite(ext) for ext in extensions if _has_cuda_sources(ext)]
        # A CUDAExtension with no .cu source compiles no device code at all: no arch to
        # prove, and its wheel fails verify later. Reported, so the build stops here.
        records += [{"extension": getattr(ext, "name", "?"), "no_device_code": True,
                     "sources": [str(s) for s in getattr(ext, "sources", None) or []][:8]}
                    for ext in extensions if _declares_cuda(ext) and not _has_cuda_sources(ext)]
        temp = os.environ.get("FLASHBUILD_BUILD_TEMP")
        if temp:
            self.build_temp = temp  # type: ignore[attr-defined]
        report = os.environ.get("FLASHBUILD_HOOK_REPORT")
        if report:
            with open(report, "a", encoding="utf-8") as fh:
                for record in records:
                    fh.write(json.dumps(record) + "\n")
        return original(self)

    build_ext.build_extensions = build_extensions
    build_ext._flashbuild_hooked = True


class _Finder(importlib.abc.MetaPathFinder):
    """Patches torch.utils.cpp_extension right after it is imported, not before."""

    def find_spec(self, name: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: object) -> None:
            run(module)  # type: ignore[arg-type]
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _chain() -> None:
    """Run the sitecustomize this file shadows, if there is one."""
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # imported by Python at start-up, not by a test
    if os.environ.get("FLASHBUILD_GENCODE"):
        sys.meta_path.insert(0, _Finder())
    _chain()
