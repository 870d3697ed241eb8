"""Time the variants of bench/sweep_memory.cu side by side with torch.compile (GPU machine).

For each large shape (rows x hidden, bf16) and each op -- rms_norm, fused residual add +
RMSNorm, the same with an FP8 E4M3 output -- every variant that covers the hidden size is
checked against torch eager and timed in the same process as torch.compile of the code a model
runs (bench/bench_kernels.py's functions), interleaved: each round times every contender once
(20 calls queued back to back between two CUDA events), in a new random order, and the median
over the rounds is reported. Element-wise: copy and gelu_tanh variants against torch's copy_
and torch.compile of F.gelu(approximate="tanh") on 64 Mi elements.

    nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -shared -Xcompiler -fPIC \
        -I csrc bench/sweep_memory.cu -o /tmp/sweep_memory.so
    python bench/sweep_memory.py /tmp/sweep_memory.so --out sweep.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# bench/ is not a package; the model code, constants and timing of the kernel benchmark
from bench_kernels import EPS, FP8_SCALE, interleaved_us, model_norms

ROUNDS = 25
CALLS = 20
SHAPES = [(4096, 4096), (16384, 4096), (4096, 8192), (16384, 8192)]
KINDS = ["rms_norm", "fused_add_rms_norm", "fused_add_rms_norm_fp8", "copy", "gelu_tanh"]


def load(path: Path) -> tuple[Any, list[tuple[int, int, int, str]]]:
    lib = ctypes.CDLL(str(path))
    lib.sweep_run.restype = ctypes.c_int
    lib.sweep_run.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 5 + [
        ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_float, ctypes.c_void_p]
    variants = []
    buf = ctypes.create_string_buffer(256)
    for i in range(lib.sweep_count()):
        lib.sweep_describe(i, buf, 256)
        kind, hidden, name = buf.value.decode().split(" ", 2)
        variants.append((i, int(kind), int(hidden), name))
    return lib, variants


def runner(lib: Any, i: int, ptrs: tuple[int, int, int, int, int], rows: int, hidden: int,
           inv_scale: float, stream: Callable[[], int]) -> Callable[[], int]:
    """A call of variant i on fixed buffers (out, residual_out, x, residual, weight)."""

    def call() -> int:
        return int(lib.sweep_run(i, *ptrs, rows, hidden, EPS, inv_scale, stream()))

    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lib", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help=f"comma-separated subset of {','.join(KINDS)}")
    args = ap.parse_args()
    import torch

    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 1024)
    lib, variants = load(args.lib)
    wanted = {KINDS.index(k) for k in args.kinds.split(",")}
    dt, f8 = torch.bfloat16, torch.float8_e4m3fn

    def stream() -> int:
        return int(torch.cuda.current_stream().cuda_stream)

    add_rms_fp8, add_rms, rms = model_norms(torch)

    def gelu(x: Any) -> Any:
        return torch.nn.functional.gelu(x, approximate="tanh")

    refs = {0: rms, 1: add_rms, 2: add_rms_fp8}
    compiled = {k: torch.compile(f, dynamic=False) for k, f in refs.items()}
    moved = {0: 4, 1: 8, 2: 7, 3: 4, 4: 4}  # bytes per element, read + written
    results: list[dict[str, Any]] = []
    gpu = torch.cuda.get_device_name()
    print(f"# {gpu}, torch {torch.__version__}", flush=True)

    def report(kind: int, rows: int, hidden: int, times: dict[str, float], base: str) -> None:
        nbytes = moved[kind] * rows * hidden
        print(f"\n## {KINDS[kind]} {rows}x{hidden} (vs {base})", flush=True)
        for name, us in sorted(times.items(), key=lambda kv: kv[1]):
            tbs = nbytes / us / 1e6
            print(f"  {us:8.1f} µs  {tbs:5.2f} TB/s  {times[base] / us:5.3f}x  {name}", flush=True)
            results.append({"kind": KINDS[kind], "rows": rows, "hidden": hidden, "name": name,
                            "us": us, "tb_s": tbs, "vs_base": times[base] / us, "base": base})

    for rows, hidden in SHAPES:
        x = torch.randn(rows, hidden, device="cuda", dtype=dt)
        r = torch.randn(rows, hidden, device="cuda", dtype=dt)
        w = torch.randn(hidden, device="cuda", dtype=dt)
        o = torch.empty_like(x)
        r_out = torch.empty_like(x)
        q8 = torch.empty(rows, hidden, device="cuda", dtype=f8)
        for kind in sorted(wanted & {0, 1, 2}):
            a = (x, w) if kind == 0 else (x, r, w)
            want = refs[kind](*a)
            compiled[kind](*a)
            out = q8 if kind == 2 else o
            contenders: dict[str, Callable[[], object]] = {
                "torch.compile": lambda c=compiled[kind], a=a: c(*a)}
            for i, k, h, name in variants:
                if k != kind or h != hidden:
                    continue
                o.zero_()
                r_out.zero_()
                q8.zero_()
                ptrs = (out.data_ptr(), r_out.data_ptr(), x.data_ptr(), r.data_ptr(),
                        w.data_ptr())
                call = runner(lib, i, ptrs, rows, hidden, 1.0 / FP8_SCALE, stream)
                if call() != 0:
                    print(f"  launch failed: {name}", file=sys.stderr)
                    continue
                torch.cuda.synchronize()
                y = want[0] if kind else want
                got = out.float()
                bad = (got - y.float()).abs() > 0.02 + 0.13 * y.float().abs()
                if kind:
                    bad |= (r_out != want[1])
                if bad.float().mean().item() > 1e-4:
                    print(f"  WRONG ({bad.float().mean().item():.2e} off): {name}",
                          file=sys.stderr)
                    continue
                contenders[name] = call
            times = interleaved_us(torch, contenders, rounds=ROUNDS, calls=CALLS)
            report(kind, rows, hidden, times, "torch.compile")

    n = 64 * 1024 * 1024
    x = torch.randn(n, device="cuda", dtype=dt)
    o = torch.empty_like(x)
    cgelu = torch.compile(gelu, dynamic=False)
    cgelu(x)
    want = gelu(x)
    for kind in sorted(wanted & {3, 4}):
        contenders = {"torch copy_": lambda: o.copy_(x)}
        if kind == 4:
            contenders["torch.compile gelu"] = lambda: cgelu(x)
        for i, k, _h, name in variants:
            if k != kind:
                continue
            call = runner(lib, i, (o.data_ptr(), 0, x.data_ptr(), 0, 0), n // 4096, 4096, 1.0,
                          stream)
            o.zero_()
            if call() != 0:
                continue
            torch.cuda.synchronize()
            ref = x if kind == 3 else want
            if not torch.allclose(o.float(), ref.float(), rtol=2e-2, atol=2e-2):
                print(f"  WRONG: {name}", file=sys.stderr)
                continue
            contenders[name] = call
        times = interleaved_us(torch, contenders, rounds=ROUNDS, calls=CALLS)
        report(kind, n // 4096, 4096, times, "torch copy_")
    if args.out:
        args.out.write_text(json.dumps({"gpu": gpu, "torch": torch.__version__,
                                        "rows": results}, indent=1))


if __name__ == "__main__":
    main()
