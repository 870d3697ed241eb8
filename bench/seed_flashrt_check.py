"""FlashRT after `flashbuild build`: its kernel module imports from the installed package and
one kernel (bf16 RMSNorm through the pointer-based pybind11 API) matches torch on the GPU.
Run by bench/seed_queue.sh on the GPU machine; prints one line per check, exits non-zero on
a mismatch."""

from __future__ import annotations

import sys
from typing import Any

import torch


def _kernels() -> object:
    """The module flashbuild installed into the flash_vla package. The package's own
    __init__ imports its model API (and that API's dependencies); when one of those is
    missing on this machine, the extension module is loaded from the package folder directly,
    which is said."""
    try:
        from flash_vla import flash_vla_kernels

        return flash_vla_kernels
    except ImportError as exc:
        import importlib.machinery
        import importlib.util
        from pathlib import Path

        spec = importlib.util.find_spec("flash_vla")
        assert spec is not None and spec.submodule_search_locations, "flash_vla not installed"
        folder = Path(next(iter(spec.submodule_search_locations)))
        (so,) = folder.glob("flash_vla_kernels*.so")
        print(f"the package's __init__ did not import ({exc}); loading {so.name} directly")
        loader = importlib.machinery.ExtensionFileLoader("flash_vla_kernels", str(so))
        module_spec = importlib.util.spec_from_loader("flash_vla_kernels", loader)
        assert module_spec is not None
        module = importlib.util.module_from_spec(module_spec)
        loader.exec_module(module)
        return module


def main() -> int:
    fvk: Any = _kernels()
    print(f"imported {fvk.__file__}")
    torch.manual_seed(0)
    failures = 0
    for rows, dim in ((1, 1024), (17, 2048), (256, 4096)):
        x = torch.randn(rows, dim, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(dim, device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(x)
        fvk.rms_norm(x.data_ptr(), w.data_ptr(), out.data_ptr(), rows, dim, 1e-6,
                     torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        xf = x.float()
        ref = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float())
        err = (out.float() - ref).abs().max().item()
        ok = torch.allclose(out.float(), ref, atol=0.05, rtol=0.02)
        failures += not ok
        print(f"rms_norm {rows}x{dim}: max abs error {err:.4f} {'ok' if ok else 'MISMATCH'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
