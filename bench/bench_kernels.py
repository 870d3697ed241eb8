"""flashkern benchmark: memory-bound kernels against a device-to-device copy, the fused
residual + RMSNorm + FP8 kernel against the torch sequence it replaces, and small
(launch-bound) shapes with the Python call overhead split out.

    python bench/bench_kernels.py --build --out results.json

CUDA events, warm-up, median of per-call times. Prints Markdown tables; --out writes JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[1]
DEVBUILD = ROOT / "csrc" / "python" / "flashkern" / "_devbuild.py"
EPS = 1e-6
FP8_SCALE = 0.05


def load_flashkern(build: bool, torch: Any) -> Any:
    if build:
        spec = importlib.util.spec_from_file_location("flashkern_devbuild", DEVBUILD)
        assert spec is not None and spec.loader is not None
        devbuild = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = devbuild
        spec.loader.exec_module(devbuild)
        major, minor = torch.cuda.get_device_capability()
        work = Path(tempfile.mkdtemp(prefix="flashkern-bench-"))
        result = devbuild.build(work, devbuild.arch_for_capability(major, minor))
        sys.path.insert(0, str(result.python_dir))
    import flashkern

    return flashkern


def gpu_ms(torch: Any, fn: Callable[[], object], *, warmup: int = 10, iters: int = 50,
           synced: bool = False) -> float:
    """Median GPU time of one call (ms), each call between its own pair of CUDA events.

    By default the calls are queued back to back and synchronised once at the end: while the
    host stays ahead of the GPU (any call longer than its ~10 µs of Python launch overhead,
    i.e. every bandwidth case here), each event pair brackets the kernel alone. With
    ``synced=True`` every call waits for the previous one (the method of the first table in
    csrc/README.md): the GPU is idle when the start event is recorded, so the interval also
    holds the host's launch latency of that call (Python wrapper, stream lookup, launch).
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        if synced:
            end.synchronize()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return float(statistics.median(start.elapsed_time(end) for start, end in pairs))


def host_us(torch: Any, fn: Callable[[], object], iters: int = 2000) -> float:
    """Host time per call (µs) of back-to-back calls, synchronised once at the end."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e6


def graph_us(torch: Any, fn: Callable[[], object], launches: int = 100) -> float:
    """GPU time per launch (µs) replaying a CUDA graph of `launches` calls: no Python."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    return gpu_ms(torch, graph.replay, warmup=3, iters=20) * 1e3 / launches


def bandwidth_section(torch: Any, fk: Any) -> list[dict[str, Any]]:
    s = lambda: int(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    dt, name = torch.bfloat16, "bfloat16"
    n = 64 * 1024 * 1024  # elements: 128 MB per bf16 tensor
    a = torch.randn(n, device="cuda", dtype=dt)
    b = torch.randn(n, device="cuda", dtype=dt)
    o = torch.empty_like(a)
    f32 = torch.randn(n, device="cuda", dtype=torch.float32)
    q8 = torch.empty(n, device="cuda", dtype=torch.float8_e4m3fn)
    rows, hidden = 16384, 4096
    x2, r2, o2 = a.view(-1, hidden), b.view(-1, hidden), o.view(-1, hidden)
    w = torch.randn(hidden, device="cuda", dtype=dt)
    tokens, hq, hk, hd = 8192, 32, 8, 128
    q = torch.randn(tokens, hq, hd, device="cuda", dtype=dt)
    k = torch.randn(tokens, hk, hd, device="cuda", dtype=dt)
    cos = torch.randn(tokens, hd // 2, device="cuda")
    sin = torch.randn(tokens, hd // 2, device="cuda")
    srows, scols = 8192, 8192
    bytes_t = n * 2

    copy_ms = gpu_ms(torch, lambda: o.copy_(a))
    copy_bw = 2 * bytes_t / copy_ms / 1e9  # TB/s = bytes / ms / 1e9
    copy_synced_ms = gpu_ms(torch, lambda: o.copy_(a), synced=True)
    copy_synced_bw = 2 * bytes_t / copy_synced_ms / 1e9
    rope_bytes = 2 * (q.numel() + k.numel()) * 2 + 2 * tokens * hd // 2 * 4
    cases: list[tuple[str, int, Callable[[], object]]] = [
        ("flashkern.copy", 2 * bytes_t, lambda: fk.copy(o.data_ptr(), a.data_ptr(), bytes_t, s())),
        ("residual_add", 3 * bytes_t,
         lambda: fk.residual_add(o.data_ptr(), a.data_ptr(), b.data_ptr(), n, name, s())),
        ("bias_add", 2 * bytes_t,
         lambda: fk.bias_add(o.data_ptr(), a.data_ptr(), w.data_ptr(), rows, hidden, name, s())),
        ("gelu_tanh", 2 * bytes_t, lambda: fk.gelu_tanh(o.data_ptr(), a.data_ptr(), n, name, s())),
        ("silu", 2 * bytes_t, lambda: fk.silu(o.data_ptr(), a.data_ptr(), n, name, s())),
        ("cast fp32->bf16", n * 4 + bytes_t,
         lambda: fk.cast(o.data_ptr(), name, f32.data_ptr(), "float32", n, s())),
        ("quantize_fp8", bytes_t + n,
         lambda: fk.quantize_fp8(q8.data_ptr(), a.data_ptr(), n, name, FP8_SCALE, 0, s())),
        ("dequantize_fp8", n + bytes_t,
         lambda: fk.dequantize_fp8(o.data_ptr(), q8.data_ptr(), n, name, FP8_SCALE, 0, s())),
        ("rms_norm", 2 * bytes_t,
         lambda: fk.rms_norm(o.data_ptr(), a.data_ptr(), w.data_ptr(), n // hidden, hidden, EPS,
                             name, s())),
        ("layer_norm", 2 * bytes_t,
         lambda: fk.layer_norm(o.data_ptr(), a.data_ptr(), w.data_ptr(), w.data_ptr(),
                               n // hidden, hidden, EPS, name, s())),
        ("fused_add_rms_norm", 4 * bytes_t,
         lambda: fk.fused_add_rms_norm(o2.data_ptr(), r2.data_ptr(), x2.data_ptr(),
                                       r2.data_ptr(), w.data_ptr(), n // hidden, hidden, EPS,
                                       name, s())),
        ("fused_add_rms_norm_fp8", 3 * bytes_t + n,
         lambda: fk.fused_add_rms_norm_fp8(q8.data_ptr(), r2.data_ptr(), x2.data_ptr(),
                                           r2.data_ptr(), w.data_ptr(), n // hidden, hidden,
                                           EPS, name, FP8_SCALE, 0, s())),
        ("rope", rope_bytes,
         lambda: fk.rope(q.data_ptr(), k.data_ptr(), cos.data_ptr(), sin.data_ptr(), tokens, hq,
                         hk, hd, name, s())),
        ("softmax", 2 * srows * scols * 2,
         lambda: fk.softmax(o.data_ptr(), a.data_ptr(), srows, scols, name, s())),
    ]
    out = [{"kernel": "torch copy_ (reference)", "bytes": 2 * bytes_t, "ms": copy_ms,
            "tb_s": copy_bw, "fraction_of_copy": 1.0, "synced_ms": copy_synced_ms,
            "synced_tb_s": copy_synced_bw, "synced_fraction_of_copy": 1.0}]
    for label, moved, fn in cases:
        ms = gpu_ms(torch, fn)
        bw = moved / ms / 1e9
        synced_ms = gpu_ms(torch, fn, synced=True)
        synced_bw = moved / synced_ms / 1e9
        out.append({"kernel": label, "bytes": moved, "ms": ms, "tb_s": bw,
                    "fraction_of_copy": bw / copy_bw, "synced_ms": synced_ms,
                    "synced_tb_s": synced_bw,
                    "synced_fraction_of_copy": synced_bw / copy_synced_bw})
    return out


def fused_section(torch: Any, fk: Any) -> list[dict[str, Any]]:
    s = lambda: int(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    dt, name = torch.bfloat16, "bfloat16"
    out = []
    for hidden in (4096, 8192):
        for rows in (1, 16, 256, 4096, 16384):
            x = torch.randn(rows, hidden, device="cuda", dtype=dt)
            r = torch.randn(rows, hidden, device="cuda", dtype=dt)
            w = torch.randn(hidden, device="cuda", dtype=dt)
            q8 = torch.empty(rows, hidden, device="cuda", dtype=torch.float8_e4m3fn)
            r_out = torch.empty_like(r)

            def torch_seq(x: Any = x, r: Any = r, w: Any = w) -> Any:
                # What model code runs unfused (HF LlamaRMSNorm, then a per-tensor FP8 cast).
                h = x + r
                hf = h.float()
                y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)).to(dt) * w
                return (y.float() / FP8_SCALE).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), h

            def torch_fused_norm(x: Any = x, r: Any = r, w: Any = w, hidden: int = hidden) -> Any:
                # A stronger baseline: torch's own fused rms_norm kernel in the middle.
                h = x + r
                y = torch.nn.functional.rms_norm(h, (hidden,), w, EPS)
                return (y / FP8_SCALE).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), h

            def ours(x: Any = x, r: Any = r, w: Any = w, q8: Any = q8, r_out: Any = r_out,
                     rows: int = rows, hidden: int = hidden) -> None:
                fk.fused_add_rms_norm_fp8(q8.data_ptr(), r_out.data_ptr(), x.data_ptr(),
                                          r.data_ptr(), w.data_ptr(), rows, hidden, EPS, name,
                                          FP8_SCALE, 0, s())

            t_ms = gpu_ms(torch, torch_seq)
            tf_ms = gpu_ms(torch, torch_fused_norm)
            o_ms = gpu_ms(torch, ours)
            out.append({"rows": rows, "hidden": hidden, "torch_us": t_ms * 1e3,
                        "torch_f_rms_norm_us": tf_ms * 1e3, "flashkern_us": o_ms * 1e3,
                        "speedup": t_ms / o_ms, "speedup_vs_f_rms_norm": tf_ms / o_ms})
    return out


def small_section(torch: Any, fk: Any) -> list[dict[str, Any]]:
    # Read the stream at each call: graph capture switches torch's current stream.
    def cur() -> int:
        return int(torch.cuda.current_stream().cuda_stream)

    dt, name = torch.bfloat16, "bfloat16"
    hidden = 4096
    x = torch.randn(1, hidden, device="cuda", dtype=dt)
    r = torch.randn(1, hidden, device="cuda", dtype=dt)
    w = torch.randn(hidden, device="cuda", dtype=dt)
    o = torch.empty_like(x)
    q8 = torch.empty(1, hidden, device="cuda", dtype=torch.float8_e4m3fn)
    noop_us = host_us(torch, fk._C.noop, iters=20000)
    cases: list[tuple[str, Callable[[], object]]] = [
        ("rms_norm 1x4096 (flashkern.rms_norm)",
         lambda: fk.rms_norm(o.data_ptr(), x.data_ptr(), w.data_ptr(), 1, hidden, EPS, name,
                             cur())),
        ("rms_norm 1x4096 (_C.rms_norm direct)",
         lambda: fk._C.rms_norm(o.data_ptr(), x.data_ptr(), w.data_ptr(), 1, hidden, EPS, name,
                                cur())),
        ("fused_add_rms_norm_fp8 1x4096",
         lambda: fk.fused_add_rms_norm_fp8(q8.data_ptr(), r.data_ptr(), x.data_ptr(),
                                           r.data_ptr(), w.data_ptr(), 1, hidden, EPS, name,
                                           FP8_SCALE, 0, cur())),
        ("silu 4096",
         lambda: fk.silu(o.data_ptr(), x.data_ptr(), hidden, name, cur())),
    ]
    out = []
    for label, fn in cases:
        out.append({
            "case": label,
            "event_us": gpu_ms(torch, fn, iters=200) * 1e3,
            "host_us_per_call": host_us(torch, fn),
            "graph_us_per_launch": graph_us(torch, fn),
            "empty_pybind_call_us": noop_us,
        })
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Device: {result['device']}, torch {result['torch']}", "",
             "| kernel (bf16, >= 128 MB per tensor) | TB/s | fraction of copy "
             "| per-call synced: TB/s | fraction of copy |", "|---|---|---|---|---|"]
    lines += [f"| {r['kernel']} | {r['tb_s']:.2f} | {r['fraction_of_copy'] * 100:.0f} % "
              f"| {r['synced_tb_s']:.2f} | {r['synced_fraction_of_copy'] * 100:.0f} % |"
              for r in result["bandwidth"]]
    lines += ["", "| rows x hidden | torch eager sequence (µs) | flashkern fused (µs) | speedup "
              "| torch with F.rms_norm (µs) | speedup vs that |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['rows']} x {r['hidden']} | {r['torch_us']:.1f} | {r['flashkern_us']:.1f} "
              f"| {r['speedup']:.1f}x | {r['torch_f_rms_norm_us']:.1f} "
              f"| {r['speedup_vs_f_rms_norm']:.1f}x |" for r in result["fused"]]
    lines += ["", "| small shape | CUDA events (µs) | host per call (µs) | graph replay per launch "
              "(µs) | empty pybind call (µs) |", "|---|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['event_us']:.1f} | {r['host_us_per_call']:.1f} | "
              f"{r['graph_us_per_launch']:.1f} | {r['empty_pybind_call_us']:.2f} |"
              for r in result["small"]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true",
                        help="build csrc/ for this GPU first (as tests/gpu does)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    import torch

    fk = load_flashkern(args.build, torch)
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "copy_impl": fk.copy_impl(),
        "bandwidth": bandwidth_section(torch, fk),
        "fused": fused_section(torch, fk),
        "small": small_section(torch, fk),
    }
    print(markdown(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
