"""The kernels of trees built by bench/gpu_unseen_trees.sh, against torch on the GPU.

    python bench/unseen_checks.py megablocks | grouped_gemm | torch_scatter

Each check imports the installed package from outside its tree, runs a few of its CUDA ops
on random data and compares them with the same computation in plain torch; it prints one
line per case and exits non-zero on the first mismatch.
"""

from __future__ import annotations

import sys

import torch


def _same(name: str, got: torch.Tensor, want: torch.Tensor, *, atol: float = 0.0,
          rtol: float = 0.0) -> None:
    ok = torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol)
    err = (got.float() - want.float()).abs().max().item() if got.numel() else 0.0
    print(f"{name}: {'ok' if ok else 'MISMATCH'} (max abs diff {err:.3g}, {tuple(got.shape)})")
    if not ok:
        raise SystemExit(1)


def megablocks() -> None:
    import megablocks_ops as ops  # the extension megablocks' own Python imports

    for rows, cols in ((1, 1000), (8, 4096), (32, 333)):
        x = torch.randint(0, 50, (rows, cols), dtype=torch.int32, device="cuda")
        inc = torch.empty_like(x)
        ops.inclusive_cumsum(x, 1, inc)
        _same(f"inclusive_cumsum {rows}x{cols}", inc, torch.cumsum(x, 1))
        exc = torch.empty_like(x)
        ops.exclusive_cumsum(x, 1, exc)
        _same(f"exclusive_cumsum {rows}x{cols}", exc, torch.cumsum(x, 1) - x)
    x = torch.randint(0, 64, (10000,), dtype=torch.int32, device="cuda")
    _same("histogram 64 bins", ops.histogram(x, 64), torch.bincount(x, minlength=64))


def grouped_gemm() -> None:
    from grouped_gemm import ops

    experts, k, n = 4, 256, 384
    sizes = torch.tensor([64, 0, 192, 128], dtype=torch.int64)
    a = torch.randn(int(sizes.sum()), k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(experts, k, n, dtype=torch.bfloat16, device="cuda")
    got = ops.gmm(a, b, sizes)
    parts, start = [], 0
    for e, size in enumerate(sizes.tolist()):
        parts.append(a[start:start + size].float() @ b[e].float())
        start += size
    _same(f"gmm {experts} experts, k={k}, n={n}", got, torch.cat(parts), atol=0.5, rtol=2e-2)


def torch_scatter() -> None:
    from torch_scatter import scatter_max, scatter_sum, segment_csr

    src = torch.randn(5000, 16, device="cuda")
    index = torch.randint(0, 300, (5000,), device="cuda")
    want = torch.zeros(300, 16, device="cuda").index_add_(0, index, src)
    _same("scatter_sum", scatter_sum(src, index, dim=0, dim_size=300), want,
          atol=1e-4, rtol=1e-4)
    got, _arg = scatter_max(src, index, dim=0, dim_size=300)
    ref = torch.full((300, 16), float("-inf"), device="cuda").scatter_reduce(
        0, index[:, None].expand(-1, 16), src, reduce="amax")
    ref[torch.isinf(ref)] = 0.0  # torch_scatter leaves empty segments at 0
    _same("scatter_max", got, ref)
    ptr = torch.tensor([0, 100, 100, 2500, 5000], device="cuda")
    parts = [src[s:e].sum(0) if e > s else torch.zeros(16, device="cuda")
             for s, e in zip(ptr[:-1].tolist(), ptr[1:].tolist(), strict=True)]
    _same("segment_csr sum", segment_csr(src, ptr, reduce="sum"), torch.stack(parts),
          atol=1e-3, rtol=1e-4)


if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name())
    {"megablocks": megablocks, "grouped_gemm": grouped_gemm,
     "torch_scatter": torch_scatter}[sys.argv[1]]()
