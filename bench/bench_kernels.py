"""flashkern benchmark: memory-bound kernels against a device-to-device copy; the fused
residual + RMSNorm (+ FP8) kernels and the norms against the baselines a user would pick (torch
eager and torch.compile of the same sequence, side by side); the attention plugin against
torch's scaled_dot_product_attention; and small (launch-bound) shapes with the Python call
overhead split out.

    python bench/bench_kernels.py --build --out results.json
    python bench/bench_kernels.py --sections attention,fused

CUDA events, warm-up, median of per-call times. The norm section times its contenders
interleaved (interleaved_us: every round times each once, in a new random order, so clock and
thermal drift fall on all of them alike). torch.compile runs in its default mode with static
shapes, compiled (one call) before it is timed. Prints Markdown tables; --out writes JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
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


def interleaved_us(torch: Any, contenders: dict[str, Callable[[], object]], *,
                   rounds: int = 15, calls: int = 20) -> dict[str, float]:
    """Median µs per call of each contender. Each round times every contender once (`calls`
    calls queued back to back between two CUDA events), in a new random order."""
    for fn in contenders.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {k: [] for k in contenders}
    order = list(contenders)
    rng = random.Random(0)
    for _ in range(rounds):
        rng.shuffle(order)
        pairs = []
        for name in order:
            fn = contenders[name]
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            pairs.append((name, start, end))
        torch.cuda.synchronize()
        for name, start, end in pairs:
            samples[name].append(start.elapsed_time(end) * 1e3 / calls)
    return {k: statistics.median(v) for k, v in samples.items()}


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


ROWS = (1, 16, 256, 4096, 16384)
HIDDENS = (4096, 8192)


def _compiler(torch: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """torch.compile, default mode, static shapes: one specialised kernel per shape (Inductor's
    best case). The recompile limit is raised so that no shape silently falls back to eager."""
    import torch._dynamo

    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 1024)
    return lambda fn: torch.compile(fn, dynamic=False)


def _flashkern_norm_calls(fk: Any, s: Callable[[], int], name: str, bufs: tuple[Any, ...],
                          rows: int, hidden: int) -> dict[str, Callable[[], object]]:
    x, r, w, b, o, q8, r_out = bufs
    return {
        "fused_add_rms_norm_fp8": lambda: fk.fused_add_rms_norm_fp8(
            q8.data_ptr(), r_out.data_ptr(), x.data_ptr(), r.data_ptr(), w.data_ptr(), rows,
            hidden, EPS, name, FP8_SCALE, 0, s()),
        "fused_add_rms_norm": lambda: fk.fused_add_rms_norm(
            o.data_ptr(), r_out.data_ptr(), x.data_ptr(), r.data_ptr(), w.data_ptr(), rows,
            hidden, EPS, name, s()),
        "rms_norm": lambda: fk.rms_norm(o.data_ptr(), x.data_ptr(), w.data_ptr(), rows, hidden,
                                        EPS, name, s()),
        "layer_norm": lambda: fk.layer_norm(o.data_ptr(), x.data_ptr(), w.data_ptr(),
                                            b.data_ptr(), rows, hidden, EPS, name, s()),
    }


def model_norms(torch: Any) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """What model code runs, bf16 (HF LlamaRMSNorm, then a per-tensor FP8 cast): the fused
    residual add + RMSNorm + FP8, the same without FP8, and RMSNorm alone. torch eager and
    torch.compile both run these."""
    dt, f8 = torch.bfloat16, torch.float8_e4m3fn

    def add_rms_fp8(x: Any, r: Any, w: Any) -> Any:
        h = x + r
        hf = h.float()
        y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)).to(dt) * w
        return (y.float() / FP8_SCALE).clamp(-448.0, 448.0).to(f8), h

    def add_rms(x: Any, r: Any, w: Any) -> Any:
        h = x + r
        hf = h.float()
        return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)).to(dt) * w, h

    def rms(x: Any, w: Any) -> Any:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(dt) * w

    return add_rms_fp8, add_rms, rms


def norm_section(torch: Any, fk: Any) -> list[dict[str, Any]]:
    """Each op at rows x hidden: torch eager, torch.compile of the same code, flashkern."""
    s = lambda: int(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    dt, name = torch.bfloat16, "bfloat16"
    f8 = torch.float8_e4m3fn

    add_rms_fp8, add_rms, rms = model_norms(torch)

    def layer(x: Any, w: Any, b: Any) -> Any:
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, EPS)

    compile_ = _compiler(torch)
    ops: list[tuple[str, Callable[..., Any], Callable[..., Any]]] = [
        ("fused_add_rms_norm_fp8", add_rms_fp8, compile_(add_rms_fp8)),
        ("fused_add_rms_norm", add_rms, compile_(add_rms)),
        ("rms_norm", rms, compile_(rms)),
        ("layer_norm", layer, compile_(layer)),
    ]
    out = []
    for hidden in HIDDENS:
        for rows in ROWS:
            x = torch.randn(rows, hidden, device="cuda", dtype=dt)
            r = torch.randn(rows, hidden, device="cuda", dtype=dt)
            w = torch.randn(hidden, device="cuda", dtype=dt)
            b = torch.randn(hidden, device="cuda", dtype=dt)
            o = torch.empty_like(x)
            q8 = torch.empty(rows, hidden, device="cuda", dtype=f8)
            r_out = torch.empty_like(r)
            ours = _flashkern_norm_calls(fk, s, name, (x, r, w, b, o, q8, r_out), rows, hidden)
            args: dict[str, tuple[Any, ...]] = {
                "fused_add_rms_norm_fp8": (x, r, w), "fused_add_rms_norm": (x, r, w),
                "rms_norm": (x, w), "layer_norm": (x, w, b)}
            # Bytes each op must move at least (bf16 in/out, fp8 out): for % of copy.
            moved = {"fused_add_rms_norm_fp8": 3 * 2 + 1, "fused_add_rms_norm": 4 * 2,
                     "rms_norm": 2 * 2, "layer_norm": 2 * 2}
            for op, eager, compiled in ops:
                a = args[op]
                t0 = time.perf_counter()
                compiled(*a)  # compile (or recompile for this shape) before timing
                torch.cuda.synchronize()
                compile_s = time.perf_counter() - t0
                us = interleaved_us(torch, {
                    "eager": lambda eager=eager, a=a: eager(*a),
                    "compile": lambda compiled=compiled, a=a: compiled(*a),
                    "flashkern": ours[op]})
                e_ms, c_ms, o_ms = us["eager"] / 1e3, us["compile"] / 1e3, us["flashkern"] / 1e3
                nbytes = moved[op] * rows * hidden
                print(f"  {op} {rows}x{hidden}: eager {e_ms * 1e3:.1f} µs, compile "
                      f"{c_ms * 1e3:.1f} µs, flashkern {o_ms * 1e3:.1f} µs", file=sys.stderr)
                out.append({"op": op, "rows": rows, "hidden": hidden, "eager_us": e_ms * 1e3,
                            "compile_us": c_ms * 1e3, "flashkern_us": o_ms * 1e3,
                            "vs_eager": e_ms / o_ms, "vs_compile": c_ms / o_ms,
                            "flashkern_tb_s": nbytes / o_ms / 1e9,
                            "compile_tb_s": nbytes / c_ms / 1e9, "compile_s": compile_s})
    return out


# (batch, heads, seq, head_dim, causal): the three shapes first, then more.
ATTN_SHAPES = [(1, 8, 512, 64, False), (2, 16, 2048, 128, True), (1, 16, 4096, 64, False),
               (2, 16, 2048, 128, False), (1, 16, 4096, 64, True), (4, 32, 1024, 128, False),
               (8, 16, 512, 64, True), (1, 32, 8192, 128, True)]


def attention_section(torch: Any, fk: Any) -> list[dict[str, Any]]:
    """The plugin against torch's SDPA (default backend choice) on the same bf16 tensors."""
    s = lambda: int(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    if not fk.has_attention_plugin():
        fk.load_attention_plugin()
    out = []
    for dt, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
        shapes = ATTN_SHAPES if dt is torch.bfloat16 else ATTN_SHAPES[:3]
        for batch, heads, seq, hd, causal in shapes:
            q, k, v = (torch.randn(batch, heads, seq, hd, device="cuda", dtype=dt)
                       for _ in range(3))
            o = torch.empty_like(q)

            def ours(q: Any = q, k: Any = k, v: Any = v, o: Any = o, batch: int = batch,
                     heads: int = heads, seq: int = seq, hd: int = hd,
                     causal: bool = causal, name: str = name) -> None:
                fk.attention_forward(o.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                     batch, heads, seq, seq, hd, name, causal=causal, stream=s())

            def sdpa(q: Any = q, k: Any = k, v: Any = v, causal: bool = causal) -> Any:
                return torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                        is_causal=causal)

            ours()
            ref = torch.nn.functional.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), is_causal=causal)
            rel_err = float((o.float() - ref).norm() / ref.norm())
            sdpa_err = float((sdpa().float() - ref).norm() / ref.norm())
            flops = 4 * batch * heads * seq * seq * hd / (2 if causal else 1)
            o_ms = gpu_ms(torch, ours, warmup=5, iters=30)
            t_ms = gpu_ms(torch, sdpa, warmup=5, iters=30)
            print(f"  attention {name} ({batch}, {heads}, {seq}, {hd}) causal={causal}: SDPA "
                  f"{t_ms * 1e3:.1f} µs, flashkern {o_ms * 1e3:.1f} µs, rel. error {rel_err:.1e}",
                  file=sys.stderr)
            out.append({"dtype": name, "batch": batch, "heads": heads, "seq": seq,
                        "head_dim": hd, "causal": causal, "flashkern_us": o_ms * 1e3,
                        "sdpa_us": t_ms * 1e3, "flashkern_tflops": flops / o_ms / 1e9,
                        "sdpa_tflops": flops / t_ms / 1e9, "ratio": t_ms / o_ms,
                        "rel_err": rel_err, "sdpa_rel_err": sdpa_err})
            del q, k, v, o, ref
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
    lines = [f"Device: {result['device']}, torch {result['torch']}"]
    if result.get("bandwidth"):
        lines += ["", "| kernel (bf16, >= 128 MB per tensor) | TB/s | fraction of copy "
                  "| per-call synced: TB/s | fraction of copy |", "|---|---|---|---|---|"]
        lines += [f"| {r['kernel']} | {r['tb_s']:.2f} | {r['fraction_of_copy'] * 100:.0f} % "
                  f"| {r['synced_tb_s']:.2f} | {r['synced_fraction_of_copy'] * 100:.0f} % |"
                  for r in result["bandwidth"]]
    if result.get("norms"):
        lines += ["", "| op (bf16) | rows x hidden | torch eager (µs) | torch.compile (µs) "
                  "| flashkern (µs) | vs eager | vs compile | flashkern TB/s | compile TB/s |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['op']} | {r['rows']} x {r['hidden']} | {r['eager_us']:.1f} "
                  f"| {r['compile_us']:.1f} | {r['flashkern_us']:.1f} | {r['vs_eager']:.2f}x "
                  f"| {r['vs_compile']:.2f}x | {r['flashkern_tb_s']:.2f} "
                  f"| {r['compile_tb_s']:.2f} |" for r in result["norms"]]
    if result.get("attention"):
        lines += ["", "| attention (batch, heads, seq, head_dim) | dtype | causal | SDPA (µs) "
                  "| flashkern (µs) | SDPA TFLOP/s | flashkern TFLOP/s | ratio | rel. error "
                  "(SDPA's) |", "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| ({r['batch']}, {r['heads']}, {r['seq']}, {r['head_dim']}) | {r['dtype']} "
                  f"| {'yes' if r['causal'] else 'no'} | {r['sdpa_us']:.1f} "
                  f"| {r['flashkern_us']:.1f} | {r['sdpa_tflops']:.0f} "
                  f"| {r['flashkern_tflops']:.0f} | {r['ratio']:.2f}x | {r['rel_err']:.1e} "
                  f"({r['sdpa_rel_err']:.1e}) |" for r in result["attention"]]
    if result.get("small"):
        lines += ["", "| small shape | CUDA events (µs) | host per call (µs) | graph replay "
                  "per launch (µs) | empty pybind call (µs) |", "|---|---|---|---|---|"]
        lines += [f"| {r['case']} | {r['event_us']:.1f} | {r['host_us_per_call']:.1f} | "
                  f"{r['graph_us_per_launch']:.1f} | {r['empty_pybind_call_us']:.2f} |"
                  for r in result["small"]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true",
                        help="build csrc/ for this GPU first (as tests/gpu does)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)")
    args = parser.parse_args()
    wanted = [name for name in args.sections.split(",") if name]
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s): {', '.join(unknown)}")
    import torch

    fk = load_flashkern(args.build, torch)
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "copy_impl": fk.copy_impl(),
    }
    for name, section in SECTIONS.items():  # in a fixed order, whatever --sections says
        if name in wanted:
            result[name] = section(torch, fk)
            if args.out:  # partial results survive a later section's failure or a time limit
                args.out.write_text(json.dumps(result, indent=2))
    print(markdown(result))


SECTIONS: dict[str, Callable[[Any, Any], list[dict[str, Any]]]] = {
    "bandwidth": bandwidth_section,
    "attention": attention_section,
    "norms": norm_section,  # last but one: it compiles 40 torch.compile graphs
    "small": small_section,
}


if __name__ == "__main__":
    main()
