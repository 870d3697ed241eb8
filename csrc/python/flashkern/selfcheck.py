"""flashkern's own GPU self-check: every kernel and dtype against a torch reference.

    python -m flashkern.selfcheck [--bench] [--json]

Runs from the installed package (it needs nothing from the source tree): odd sizes (not
multiples of the 128-bit vector width), misaligned pointers (views that start one element into
a buffer), the FP8 round trip, RoPE, the fused kernels, the tiled softmax and its shared-memory
request against the device's opt-in limit, and the attention plugin through the dispatcher
against ``scaled_dot_product_attention`` when the plugin lies next to the package. Tolerances
are those of the repository's ``tests/gpu/test_kernels.py`` (which keeps its own, wider set of
cases). ``--bench`` adds a short bandwidth table: each memory-bound kernel's achieved bytes per
second as a fraction of torch's device-to-device copy, 64 MB per tensor, warm-up then the
median of CUDA-event timings.

Output: a table for people, or with ``--json`` one JSON document on stdout::

    {"schema_version": 1, "device": "NVIDIA H100 80GB HBM3", "capability": "9.0",
     "checks": [{"name": ..., "dtype": ..., "ok": ..., "max_abs_err": ..., "tol": ...,
                 "rtol": ..., "detail": ...}, ...],
     "skipped": [{"name": ..., "reason": ...}], "bench": [...] | null, "ok": true,
     "error": null}

``max_abs_err`` is the largest |got - want| (null when not numeric or not finite); a value
passes when |got - want| <= tol + rtol * |want|, as ``torch.testing.assert_close`` decides.
Exit status: 0 when every check passes, 1 when one fails, 2 when there is no torch or no CUDA
device (``error`` says which; ``checks`` is empty).

Importing this module needs neither torch nor the compiled extension: both are imported in
:func:`main`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

SCHEMA_VERSION = 1
EXIT_OK, EXIT_FAILED, EXIT_UNAVAILABLE = 0, 1, 2

DTYPES = ("float32", "float16", "bfloat16")
#: (atol, rtol) for a value of this dtype that went through fp32 math and one final rounding
#: (the same table as tests/gpu/test_kernels.py).
TOL = {"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}
#: FP8 E4M3 results may differ by one step (3 mantissa bits) where x/scale rounds differently.
FP8_ATOL, FP8_RTOL = 2.0**-9, 2.0**-3
NO_DTYPE = "-"
BENCH_BYTES = 64 << 20
EPS_RMS, EPS_LN = 1e-6, 1e-5


@dataclass(frozen=True)
class CheckResult:
    """One kernel case against its reference."""

    name: str
    dtype: str
    ok: bool
    #: Largest |got - want| over the outputs; None when not numeric or not finite.
    max_abs_err: float | None
    #: Absolute tolerance (None when not numeric); rtol is the relative part.
    tol: float | None
    rtol: float | None = None
    #: Why it failed (or what was compared, for non-numeric checks).
    detail: str = ""


@dataclass(frozen=True)
class Skipped:
    name: str
    reason: str


@dataclass(frozen=True)
class BenchRow:
    """Achieved bandwidth of one kernel: (bytes read + written) / median time."""

    kernel: str
    bytes: int
    ms: float | None
    tb_s: float | None
    fraction_of_copy: float | None
    error: str = ""


@dataclass(frozen=True)
class _Measure:
    ok: bool
    max_abs_err: float | None
    tol: float | None
    rtol: float | None
    detail: str = ""

    def __and__(self, other: _Measure) -> _Measure:
        """Both must pass; the error and tolerance shown are those of the part closest to
        failing (largest error over its tolerance), failure details are joined."""
        detail = "; ".join(d for d in (self.detail, other.detail) if d)
        worst = max((self, other), key=_Measure.closeness)
        return _Measure(self.ok and other.ok, worst.max_abs_err, worst.tol, worst.rtol, detail)

    def closeness(self) -> float:
        """max_abs_err / tol: > 1 fails on the absolute part alone; -1 when not numeric."""
        if self.tol is None:
            return -1.0
        if self.max_abs_err is None:  # not finite
            return math.inf
        if self.tol == 0:
            return math.inf if self.max_abs_err > 0 else 0.0
        return self.max_abs_err / self.tol


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


class _Checker:
    """Runs cases on `device`, each isolated: an exception fails that case only (a sticky CUDA
    error will fail the ones after it too, which the report then shows)."""

    def __init__(self, torch: Any, fk: Any, device: str = "cuda") -> None:
        self.torch = torch
        self.fk = fk
        self.device = device
        self.results: list[CheckResult] = []
        self.skipped: list[Skipped] = []

    # ---- helpers -------------------------------------------------------------------------

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def stream(self) -> int:
        if self.device != "cuda":
            return 0
        return int(self.torch.cuda.current_stream().cuda_stream)

    def rand(self, shape: tuple[int, ...], dtype: str, *, offset: int = 0,
             scale: float = 1.0) -> Any:
        """A contiguous tensor; offset > 0 starts it `offset` elements into a buffer, so its
        pointer is not 16-byte aligned (the kernels' scalar path)."""
        torch = self.torch
        n = math.prod(shape)
        buf = torch.randn(n + offset, device=self.device, dtype=torch.float32) * scale
        return buf.to(getattr(torch, dtype))[offset:].view(shape)

    def empty_at(self, ref: Any, offset: int = 0, dtype: Any = None) -> Any:
        buf = self.torch.empty(ref.numel() + offset, device=self.device,
                               dtype=ref.dtype if dtype is None else dtype)
        return buf[offset:].view(ref.shape)

    def close(self, got: Any, want: Any, atol: float, rtol: float) -> _Measure:
        """`torch.testing.assert_close`'s rule (NaN never equal, equal infinities pass),
        measured instead of asserted."""
        self.sync()
        g = got.detach().float().flatten()
        w = want.detach().float().flatten()
        diff = (g - w).abs()
        exact = g == w
        bad = ~(exact | (diff <= atol + rtol * w.abs()))
        inexact = diff[~exact]
        worst = float(inexact.max().item()) if inexact.numel() else 0.0
        nbad = int(bad.sum().item())
        detail = ""
        if nbad:
            i = int(bad.nonzero()[0, 0].item())
            detail = (f"{nbad} of {g.numel()} values outside tolerance; first at index {i}: "
                      f"got {float(g[i].item())!r}, want {float(w[i].item())!r}")
        return _Measure(nbad == 0, _finite(worst), atol, rtol, detail)

    def close_dtype(self, got: Any, want: Any, dtype: str, factor: float = 1.0) -> _Measure:
        atol, rtol = TOL[dtype]
        return self.close(got, want, atol * factor, rtol * factor)

    def exact(self, got: Any, want: Any) -> _Measure:
        return self.close(got, want, 0.0, 0.0)

    def fp8_close(self, got: Any, want: Any, max_mismatch: float) -> _Measure:
        torch = self.torch
        m = self.close(got, want, FP8_ATOL, FP8_RTOL)
        mismatched = float((got.view(torch.uint8) != want.view(torch.uint8)).float().mean()
                           .item())
        if mismatched >= max_mismatch:
            m = m & _Measure(False, None, None, None,
                             f"{mismatched:.2%} of FP8 bytes differ (limit {max_mismatch:.2%})")
        return m

    def fact(self, ok: bool, detail: str) -> _Measure:
        return _Measure(ok, None, None, None, detail)

    def run(self, name: str, dtype: str, body: Callable[[], _Measure]) -> None:
        try:
            m = body()
        except Exception as exc:  # a failed launch is a failed case, not a crash
            self.results.append(CheckResult(name, dtype, False, None, None, None,
                                            f"{type(exc).__name__}: {exc}"))
            return
        self.results.append(CheckResult(name, dtype, m.ok, m.max_abs_err, m.tol, m.rtol,
                                         m.detail))

    # ---- references ----------------------------------------------------------------------

    def rms_ref(self, x: Any, w: Any, eps: float) -> Any:
        xf = x.float()
        return (xf * self.torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
                * w.float()).to(x.dtype)

    def fp8_ref(self, x: Any, scale: float) -> Any:
        return (x.float() / scale).clamp(-448.0, 448.0).to(self.torch.float8_e4m3fn)

    def rope_ref(self, x: Any, cos: Any, sin: Any) -> Any:
        half = x.shape[-1] // 2
        xf = x.float()
        x1, x2 = xf[..., :half], xf[..., half:]
        c, s = cos[:, None, :], sin[:, None, :]
        return self.torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)

    # ---- the cases -----------------------------------------------------------------------

    def all(self) -> None:
        self.capability()
        for dtype in DTYPES:
            self.norms(dtype)
            self.activations(dtype)
            self.fp8(dtype)
            self.elementwise(dtype)
            self.rope(dtype)
            self.fused(dtype)
            self.softmax(dtype)
        self.casts()
        self.copies()
        self.attention()

    def capability(self) -> None:
        torch, fk = self.torch, self.fk
        major, minor = torch.cuda.get_device_capability()

        def sm() -> _Measure:
            got = fk.sm_version()
            return self.fact(got == major * 10 + minor,
                             f"sm_version() = {got}, device capability {major}.{minor}")

        def archs() -> _Measure:
            built = list(fk.built_archs())
            # `a` (arch-specific) and `f` (family) builds of this SM both run here.
            codes = [a.split("-")[0].rstrip("af") for a in built]
            return self.fact(f"{major}{minor}" in codes,
                             f"built_archs() = {built}, device sm_{major}{minor}")

        def smem() -> _Measure:
            limit = int(torch.cuda.get_device_properties(0).shared_memory_per_block_optin)
            asks = fk.kernel_smem_bytes()
            over = {k: v for k, v in asks.items() if v > limit}
            listed = ", ".join(f"{k} {v} B" for k, v in sorted(asks.items()))
            return self.fact(not over and bool(asks),
                             f"{listed or 'no tiled kernels'}; opt-in limit per block "
                             f"{limit} B" + (f"; over the limit: {', '.join(over)}"
                                             if over else ""))

        self.run("sm_version", NO_DTYPE, sm)
        self.run("built_archs", NO_DTYPE, archs)
        self.run("kernel_smem_bytes <= opt-in limit", NO_DTYPE, smem)

    def norms(self, dtype: str) -> None:
        fk = self.fk
        for rows, hidden, offset in ((1, 4096, 0), (7, 1000, 1), (3, 65544, 0), (5, 24, 1)):
            def rms(rows: int = rows, hidden: int = hidden, offset: int = offset) -> _Measure:
                x = self.rand((rows, hidden), dtype, offset=offset)
                w = self.rand((hidden,), dtype)
                out = self.empty_at(x, offset)
                fk.rms_norm(out.data_ptr(), x.data_ptr(), w.data_ptr(), rows, hidden, EPS_RMS,
                            dtype, self.stream())
                return self.close_dtype(out, self.rms_ref(x, w, EPS_RMS), dtype, factor=4.0)

            self.run(f"rms_norm {rows}x{hidden}{_mis(offset)}", dtype, rms)

        for rows, hidden, affine in ((1, 4096, True), (7, 1000, True), (3, 65544, False)):
            def ln(rows: int = rows, hidden: int = hidden, affine: bool = affine) -> _Measure:
                x = self.rand((rows, hidden), dtype) + 3.0  # an offset mean checks the centring
                w = self.rand((hidden,), dtype) if affine else None
                b = self.rand((hidden,), dtype) if affine else None
                out = self.torch.empty_like(x)
                fk.layer_norm(out.data_ptr(), x.data_ptr(), w.data_ptr() if w is not None else 0,
                              b.data_ptr() if b is not None else 0, rows, hidden, EPS_LN, dtype,
                              self.stream())
                want = self.torch.nn.functional.layer_norm(
                    x.float(), (hidden,), w.float() if w is not None else None,
                    b.float() if b is not None else None, EPS_LN).to(x.dtype)
                return self.close_dtype(out, want, dtype, factor=4.0)

            self.run(f"layer_norm {rows}x{hidden}{'' if affine else ' no-affine'}", dtype, ln)

    def activations(self, dtype: str) -> None:
        torch, fk = self.torch, self.fk
        for act in ("gelu_tanh", "silu"):
            for n, offset, inplace in ((7, 0, False), (4099, 1, False), (1 << 20, 1, True)):
                def body(act: str = act, n: int = n, offset: int = offset,
                         inplace: bool = inplace) -> _Measure:
                    x = self.rand((n,), dtype, offset=offset, scale=3.0)
                    if act == "gelu_tanh":
                        want = torch.nn.functional.gelu(x.float(), approximate="tanh")
                    else:
                        want = torch.nn.functional.silu(x.float())
                    want = want.to(x.dtype)
                    out = x if inplace else self.empty_at(x, offset)
                    getattr(fk, act)(out.data_ptr(), x.data_ptr(), n, dtype, self.stream())
                    return self.close_dtype(out, want, dtype, factor=2.0)

                self.run(f"{act} n={n}{_mis(offset)}{' in-place' if inplace else ''}", dtype,
                         body)

    def fp8(self, dtype: str) -> None:
        torch, fk = self.torch, self.fk
        scale = 0.37
        for n, offset, device_scale in ((13, 0, False), (4097, 3, False), (1 << 20, 3, True)):
            state: dict[str, Any] = {}
            label = f"n={n}{_mis(offset)}{' scale_ptr' if device_scale else ''}"

            def quant(n: int = n, offset: int = offset, device_scale: bool = device_scale,
                      state: dict[str, Any] = state) -> _Measure:
                x = self.rand((n,), dtype, offset=offset, scale=100.0)
                x[0] = 1e6  # saturates to 448 * scale, never inf/nan
                q = torch.empty(n + offset, device=self.device,
                                dtype=torch.float8_e4m3fn)[offset:]
                # The scale tensor stays referenced in `state` while kernels read it.
                scale_t = torch.tensor([scale], device=self.device, dtype=torch.float32)
                kwargs = {"scale_ptr": scale_t.data_ptr()} if device_scale else {"scale": scale}
                fk.quantize_fp8(q.data_ptr(), x.data_ptr(), n, dtype, stream=self.stream(),
                                **kwargs)
                want = self.fp8_ref(x, scale)
                state.update(x=x, q=q, want=want, scale_t=scale_t, kwargs=kwargs)
                m = self.fp8_close(q, want, 1e-3)
                first = float(q[0].float().item())
                return m & self.fact(first == 448.0, "" if first == 448.0 else
                                     f"1e6 quantized to {first}, want saturation at 448")

            def dequant(n: int = n, offset: int = offset,
                        state: dict[str, Any] = state) -> _Measure:
                if "q" not in state:
                    return self.fact(False, "quantize_fp8 did not run")
                x, q, want = state["x"], state["q"], state["want"]
                back = self.empty_at(x, offset)
                fk.dequantize_fp8(back.data_ptr(), q.data_ptr(), n, dtype, stream=self.stream(),
                                  **state["kwargs"])
                state["back"] = back
                return self.close_dtype(back, (want.float() * scale).to(x.dtype), dtype)

            def round_trip(state: dict[str, Any] = state) -> _Measure:
                if "back" not in state:
                    return self.fact(False, "dequantize_fp8 did not run")
                x, back = state["x"], state["back"]
                self.sync()
                # Within half an E4M3 step of the input wherever the input is in range.
                inrange = x.float().abs() <= 448 * scale
                err = (back.float() - x.float()).abs()[inrange]
                bound = x.float().abs()[inrange] * 2.0**-4 + scale * 2.0**-9 + TOL[dtype][0]
                over = err > bound * 1.01
                worst = float(err.max().item()) if err.numel() else 0.0
                nover = int(over.sum().item())
                return _Measure(nover == 0, _finite(worst), scale * 2.0**-9 + TOL[dtype][0],
                                2.0**-4, f"{nover} values beyond half an E4M3 step" if nover
                                else "")

            self.run(f"quantize_fp8 {label}", dtype, quant)
            self.run(f"dequantize_fp8 {label}", dtype, dequant)
            self.run(f"fp8 round trip {label}", dtype, round_trip)

    def elementwise(self, dtype: str) -> None:
        fk = self.fk
        for n, offset in ((9, 0), (4101, 1), ((1 << 22) + 3, 0)):
            def add(n: int = n, offset: int = offset) -> _Measure:
                a = self.rand((n,), dtype, offset=offset)
                b = self.rand((n,), dtype)
                out = self.empty_at(a, offset)
                fk.residual_add(out.data_ptr(), a.data_ptr(), b.data_ptr(), n, dtype,
                                self.stream())
                return self.close_dtype(out, (a.float() + b.float()).to(a.dtype), dtype)

            self.run(f"residual_add n={n}{_mis(offset)}", dtype, add)
        for rows, cols, offset in ((1, 8, 0), (5, 1001, 1), (33, 4096, 0)):
            def bias(rows: int = rows, cols: int = cols, offset: int = offset) -> _Measure:
                x = self.rand((rows, cols), dtype, offset=offset)
                b = self.rand((cols,), dtype)
                out = self.empty_at(x, offset)
                fk.bias_add(out.data_ptr(), x.data_ptr(), b.data_ptr(), rows, cols, dtype,
                            self.stream())
                return self.close_dtype(out, (x.float() + b.float()).to(x.dtype), dtype)

            self.run(f"bias_add {rows}x{cols}{_mis(offset)}", dtype, bias)

    def casts(self) -> None:
        torch, fk = self.torch, self.fk
        for src in DTYPES:
            for dst in DTYPES:
                def cast(src: str = src, dst: str = dst) -> _Measure:
                    m = self.fact(True, "")
                    for n, offset in ((15, 0), (4103, 1)):
                        x = self.rand((n,), src, offset=offset, scale=10.0)
                        out = self.empty_at(x, offset, dtype=getattr(torch, dst))
                        fk.cast(out.data_ptr(), dst, x.data_ptr(), src, n, self.stream())
                        m = m & self.exact(out, x.to(getattr(torch, dst)))
                    return m

                self.run("cast n=15,4103 (one misaligned)", f"{src}->{dst}", cast)

    def copies(self) -> None:
        torch, fk = self.torch, self.fk
        for nbytes, offset in ((17, 0), ((1 << 20) + 5, 1), (16 << 20, 0)):
            def copy(nbytes: int = nbytes, offset: int = offset) -> _Measure:
                src = torch.randint(0, 256, (nbytes + offset,), device=self.device,
                                    dtype=torch.uint8)[offset:]
                dst = torch.zeros(nbytes + offset, device=self.device, dtype=torch.uint8)[offset:]
                fk.copy(dst.data_ptr(), src.data_ptr(), nbytes, self.stream())
                return self.exact(dst, src)

            self.run(f"copy {nbytes} B{_mis(offset)} ({fk.copy_impl()})", "uint8", copy)

    def rope(self, dtype: str) -> None:
        torch, fk = self.torch, self.fk
        for tokens, hq, hk, hd, offset in ((1, 32, 8, 128, 0), (5, 3, 1, 6, 1),
                                           (77, 8, 2, 64, 1), (300, 4, 4, 80, 0)):
            def body(tokens: int = tokens, hq: int = hq, hk: int = hk, hd: int = hd,
                     offset: int = offset) -> _Measure:
                q = self.rand((tokens, hq, hd), dtype, offset=offset)
                k = self.rand((tokens, hk, hd), dtype, offset=offset)
                pos = torch.arange(tokens, device=self.device, dtype=torch.float32)[:, None]
                inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=self.device).float()
                                         / hd))
                cos = torch.cos(pos * inv).contiguous()
                sin = torch.sin(pos * inv).contiguous()
                want_q, want_k = self.rope_ref(q, cos, sin), self.rope_ref(k, cos, sin)
                fk.rope(q.data_ptr(), k.data_ptr(), cos.data_ptr(), sin.data_ptr(), tokens, hq,
                        hk, hd, dtype, self.stream())
                return (self.close_dtype(q, want_q, dtype, factor=2.0)
                        & self.close_dtype(k, want_k, dtype, factor=2.0))

            self.run(f"rope tokens={tokens} heads={hq}/{hk} dim={hd}{_mis(offset)}", dtype, body)

    def fused(self, dtype: str) -> None:
        torch, fk = self.torch, self.fk
        for rows, hidden, inplace in ((1, 4096, False), (7, 1000, True), (3, 65544, False)):
            def add_norm(rows: int = rows, hidden: int = hidden,
                         inplace: bool = inplace) -> _Measure:
                x = self.rand((rows, hidden), dtype)
                r = self.rand((rows, hidden), dtype)
                w = self.rand((hidden,), dtype)
                h = (x.float() + r.float()).to(x.dtype)
                want = self.rms_ref(h, w, EPS_RMS)
                out = torch.empty_like(x)
                r_out = r if inplace else torch.empty_like(r)
                fk.fused_add_rms_norm(out.data_ptr(), r_out.data_ptr(), x.data_ptr(),
                                      r.data_ptr(), w.data_ptr(), rows, hidden, EPS_RMS, dtype,
                                      self.stream())
                return (self.close_dtype(r_out, h, dtype)
                        & self.close_dtype(out, want, dtype, factor=4.0))

            self.run(f"fused_add_rms_norm {rows}x{hidden}"
                     f"{' residual in-place' if inplace else ''}", dtype, add_norm)

        def no_residual() -> _Measure:
            x = self.rand((9, 4096), dtype)
            w = self.rand((4096,), dtype)
            out = torch.empty_like(x)
            fk.fused_add_rms_norm(out.data_ptr(), 0, x.data_ptr(), 0, w.data_ptr(), 9, 4096,
                                  EPS_RMS, dtype, self.stream())
            return self.close_dtype(out, self.rms_ref(x, w, EPS_RMS), dtype, factor=4.0)

        self.run("fused_add_rms_norm 9x4096 residual=0", dtype, no_residual)

        for rows, hidden, device_scale in ((1, 4096, False), (7, 1000, True), (16, 8192, False)):
            def add_norm_fp8(rows: int = rows, hidden: int = hidden,
                             device_scale: bool = device_scale) -> _Measure:
                x = self.rand((rows, hidden), dtype)
                r = self.rand((rows, hidden), dtype)
                w = self.rand((hidden,), dtype, scale=4.0)
                scale = 0.02
                h = (x.float() + r.float()).to(x.dtype)
                want = self.fp8_ref(self.rms_ref(h, w, EPS_RMS), scale)
                out = torch.empty((rows, hidden), device=self.device, dtype=torch.float8_e4m3fn)
                r_out = torch.empty_like(r)
                scale_t = torch.tensor([scale], device=self.device, dtype=torch.float32)
                kwargs: dict[str, Any] = ({"scale_ptr": scale_t.data_ptr()} if device_scale
                                          else {"scale": scale})
                fk.fused_add_rms_norm_fp8(out.data_ptr(), r_out.data_ptr(), x.data_ptr(),
                                          r.data_ptr(), w.data_ptr(), rows, hidden, EPS_RMS,
                                          dtype, stream=self.stream(), **kwargs)
                return self.close_dtype(r_out, h, dtype) & self.fp8_close(out, want, 5e-3)

            self.run(f"fused_add_rms_norm_fp8 {rows}x{hidden}"
                     f"{' scale_ptr' if device_scale else ''}", dtype, add_norm_fp8)

    def softmax(self, dtype: str) -> None:
        torch, fk = self.torch, self.fk
        for rows, cols, offset in ((1, 1, 0), (3, 1000, 1), (2, 65539, 0), (1, 200000, 1)):
            def body(rows: int = rows, cols: int = cols, offset: int = offset) -> _Measure:
                x = self.rand((rows, cols), dtype, offset=offset, scale=4.0)
                out = self.empty_at(x, offset)
                fk.softmax(out.data_ptr(), x.data_ptr(), rows, cols, dtype, self.stream())
                want = torch.softmax(x.float(), dim=-1).to(x.dtype)
                atol, rtol = TOL[dtype]
                sums = self.close(out.float().sum(-1),
                                  torch.ones(rows, device=self.device), 1e-2, 0.0)
                return self.close(out, want, atol / 10, rtol * 4) & sums

            self.run(f"softmax {rows}x{cols}{_mis(offset)}", dtype, body)

    def attention(self) -> None:
        torch, fk = self.torch, self.fk
        path = fk.default_plugin_path()
        if not path.is_file():
            self.skipped.append(Skipped("attention_forward",
                                        f"no attention plugin next to the package ({path})"))
            return

        def load() -> _Measure:
            if not fk.has_attention_plugin():
                fk.load_attention_plugin(path)
            return self.fact(fk.has_attention_plugin(), f"loaded {path}")

        self.run("attention plugin loads", NO_DTYPE, load)
        if not self.results[-1].ok:
            return
        for dtype in DTYPES:
            for b, h, sq, sk, hd, causal in ((2, 4, 128, 128, 64, False),
                                             (1, 2, 77, 77, 128, True),
                                             (1, 3, 5, 200, 80, True),
                                             (2, 1, 1, 33, 32, False)):
                def body(*, dtype: str = dtype, b: int = b, h: int = h, sq: int = sq, sk: int = sk,
                         hd: int = hd, causal: bool = causal) -> _Measure:
                    q = self.rand((b, h, sq, hd), dtype)
                    k = self.rand((b, h, sk, hd), dtype)
                    v = self.rand((b, h, sk, hd), dtype)
                    out = torch.empty_like(q)
                    fk.attention_forward(out.data_ptr(), q.data_ptr(), k.data_ptr(),
                                         v.data_ptr(), b, h, sq, sk, hd, dtype, causal=causal,
                                         stream=self.stream())
                    want = torch.nn.functional.scaled_dot_product_attention(
                        q.float(), k.float(), v.float(), is_causal=causal).to(q.dtype)
                    return self.close_dtype(out, want, dtype, factor=4.0)

                self.run(f"attention_forward vs sdpa {b}x{h}x{sq}x{sk}x{hd}"
                         f"{' causal' if causal else ''}", dtype, body)


def _mis(offset: int) -> str:
    return " misaligned" if offset else ""


# ---- bandwidth ---------------------------------------------------------------------------


def gpu_ms(torch: Any, fn: Callable[[], object], *, warmup: int = 5, iters: int = 20) -> float:
    """Median GPU time of one call (ms), each call between its own pair of CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times: list[float] = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(statistics.median(times))


def bench(torch: Any, fk: Any) -> list[BenchRow]:
    """Memory-bound kernels at 64 MB per tensor (bf16) against torch's D2D copy."""
    def s() -> int:
        return int(torch.cuda.current_stream().cuda_stream)

    dt, name = torch.bfloat16, "bfloat16"
    nbytes = BENCH_BYTES
    n = nbytes // 2
    hidden = 4096
    rows = n // hidden
    a = torch.randn(n, device="cuda", dtype=dt)
    b = torch.randn(n, device="cuda", dtype=dt)
    o = torch.empty_like(a)
    f32 = torch.randn(n, device="cuda", dtype=torch.float32)
    q8 = torch.empty(n, device="cuda", dtype=torch.float8_e4m3fn)
    w = torch.randn(hidden, device="cuda", dtype=dt)
    hq, hk, hd = 32, 8, 128
    tokens = n // (hq * hd)
    q = torch.randn(tokens, hq, hd, device="cuda", dtype=dt)
    k = torch.randn(tokens, hk, hd, device="cuda", dtype=dt)
    cos = torch.randn(tokens, hd // 2, device="cuda")
    sin = torch.randn(tokens, hd // 2, device="cuda")
    scols = 8192
    srows = n // scols
    scale = 0.05

    copy_ms = gpu_ms(torch, lambda: o.copy_(a))
    copy_tb_s = 2 * nbytes / copy_ms / 1e9  # bytes / ms / 1e9 = TB/s
    rope_bytes = 2 * (q.numel() + k.numel()) * 2 + 2 * tokens * hd // 2 * 4
    cases: list[tuple[str, int, Callable[[], object]]] = [
        ("flashkern.copy", 2 * nbytes,
         lambda: fk.copy(o.data_ptr(), a.data_ptr(), nbytes, s())),
        ("residual_add", 3 * nbytes,
         lambda: fk.residual_add(o.data_ptr(), a.data_ptr(), b.data_ptr(), n, name, s())),
        ("bias_add", 2 * nbytes,
         lambda: fk.bias_add(o.data_ptr(), a.data_ptr(), w.data_ptr(), rows, hidden, name, s())),
        ("gelu_tanh", 2 * nbytes, lambda: fk.gelu_tanh(o.data_ptr(), a.data_ptr(), n, name, s())),
        ("silu", 2 * nbytes, lambda: fk.silu(o.data_ptr(), a.data_ptr(), n, name, s())),
        ("cast fp32->bf16", n * 4 + nbytes,
         lambda: fk.cast(o.data_ptr(), name, f32.data_ptr(), "float32", n, s())),
        ("quantize_fp8", nbytes + n,
         lambda: fk.quantize_fp8(q8.data_ptr(), a.data_ptr(), n, name, scale, 0, s())),
        ("dequantize_fp8", n + nbytes,
         lambda: fk.dequantize_fp8(o.data_ptr(), q8.data_ptr(), n, name, scale, 0, s())),
        ("rms_norm", 2 * nbytes,
         lambda: fk.rms_norm(o.data_ptr(), a.data_ptr(), w.data_ptr(), rows, hidden, EPS_RMS,
                             name, s())),
        ("layer_norm", 2 * nbytes,
         lambda: fk.layer_norm(o.data_ptr(), a.data_ptr(), w.data_ptr(), w.data_ptr(), rows,
                               hidden, EPS_LN, name, s())),
        ("fused_add_rms_norm", 4 * nbytes,
         lambda: fk.fused_add_rms_norm(o.data_ptr(), b.data_ptr(), a.data_ptr(), b.data_ptr(),
                                       w.data_ptr(), rows, hidden, EPS_RMS, name, s())),
        ("fused_add_rms_norm_fp8", 3 * nbytes + n,
         lambda: fk.fused_add_rms_norm_fp8(q8.data_ptr(), b.data_ptr(), a.data_ptr(),
                                           b.data_ptr(), w.data_ptr(), rows, hidden, EPS_RMS,
                                           name, scale, 0, s())),
        ("rope", rope_bytes,
         lambda: fk.rope(q.data_ptr(), k.data_ptr(), cos.data_ptr(), sin.data_ptr(), tokens, hq,
                         hk, hd, name, s())),
        ("softmax", 2 * srows * scols * 2,
         lambda: fk.softmax(o.data_ptr(), a.data_ptr(), srows, scols, name, s())),
    ]
    out = [BenchRow("torch copy_ (reference)", 2 * nbytes, copy_ms, copy_tb_s, 1.0)]
    for label, moved, fn in cases:
        try:
            ms = gpu_ms(torch, fn)
        except Exception as exc:  # report the row, keep the table
            out.append(BenchRow(label, moved, None, None, None, f"{type(exc).__name__}: {exc}"))
            continue
        tb_s = moved / ms / 1e9
        out.append(BenchRow(label, moved, ms, tb_s, tb_s / copy_tb_s))
    return out


# ---- output ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    device: str | None
    capability: str | None
    checks: tuple[CheckResult, ...]
    skipped: tuple[Skipped, ...]
    bench: tuple[BenchRow, ...] | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return EXIT_UNAVAILABLE
        return EXIT_OK if self.ok else EXIT_FAILED

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "device": self.device,
            "capability": self.capability,
            "checks": [asdict(c) for c in self.checks],
            "skipped": [asdict(s) for s in self.skipped],
            "bench": None if self.bench is None else [asdict(r) for r in self.bench],
            "ok": self.ok,
            "error": self.error,
        }

    def dumps(self) -> str:
        """One line of strict JSON (no NaN/Infinity: non-finite numbers are already None)."""
        return json.dumps(self.to_json(), allow_nan=False)

    def table(self) -> str:
        if self.error is not None:
            return f"flashkern self-check cannot run: {self.error}"
        lines = [f"flashkern self-check on {self.device} (capability {self.capability})", ""]
        width = max([len(c.name) for c in self.checks] + [5])
        dwidth = max([len(c.dtype) for c in self.checks] + [5])
        lines.append(f"{'':4}  {'check':<{width}}  {'dtype':<{dwidth}}  {'max |err|':>10}  "
                     f"{'tol':>9}")
        for c in self.checks:
            err = "" if c.max_abs_err is None else f"{c.max_abs_err:.3g}"
            tol = "" if c.tol is None else f"{c.tol:.3g}"
            mark = "ok" if c.ok else "FAIL"
            lines.append(f"{mark:<4}  {c.name:<{width}}  {c.dtype:<{dwidth}}  {err:>10}  "
                         f"{tol:>9}")
            if not c.ok and c.detail:
                lines.append(f"{'':6}{c.detail}")
        for s in self.skipped:
            lines.append(f"skip  {s.name}: {s.reason}")
        if self.bench is not None:
            lines += ["", f"bandwidth (bf16, {BENCH_BYTES >> 20} MB per tensor; median of "
                      "CUDA-event timings)", f"{'kernel':<26}  {'TB/s':>6}  {'of copy':>7}"]
            for r in self.bench:
                if r.tb_s is None or r.fraction_of_copy is None:
                    lines.append(f"{r.kernel:<26}  failed: {r.error}")
                else:
                    lines.append(f"{r.kernel:<26}  {r.tb_s:>6.2f}  "
                                 f"{r.fraction_of_copy * 100:>6.0f}%")
        failed = sum(not c.ok for c in self.checks)
        lines += ["", f"{len(self.checks) - failed} of {len(self.checks)} checks passed"
                  + (f", {failed} FAILED" if failed else "")]
        return "\n".join(lines)


def run(torch: Any, fk: Any, *, with_bench: bool = False) -> Report:
    """Every check (and the bandwidth table) on the current CUDA device."""
    major, minor = torch.cuda.get_device_capability()
    checker = _Checker(torch, fk)
    torch.manual_seed(0)
    checker.all()
    table: tuple[BenchRow, ...] | None = None
    if with_bench:
        try:
            table = tuple(bench(torch, fk))
        except Exception as exc:  # e.g. a sticky CUDA error from a failed case: keep the report
            table = (BenchRow("setup", 0, None, None, None, f"{type(exc).__name__}: {exc}"),)
    return Report(device=str(torch.cuda.get_device_name()), capability=f"{major}.{minor}",
                  checks=tuple(checker.results), skipped=tuple(checker.skipped), bench=table)


def _unavailable() -> str | None:
    """Why the self-check cannot run here, or None."""
    try:
        import torch
    except ImportError as exc:
        return f"torch is not importable ({exc}); install a CUDA build of torch"
    if not torch.cuda.is_available():
        return (f"torch {torch.__version__} sees no CUDA device (torch CUDA "
                f"{torch.version.cuda or 'none: a CPU-only build'})")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flashkern.selfcheck",
        description="Check every flashkern kernel against torch on this GPU.")
    parser.add_argument("--bench", action="store_true",
                        help="also measure bandwidth against a device-to-device copy")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout instead of a table")
    args = parser.parse_args(argv)
    why = _unavailable()
    if why is not None:
        report = Report(None, None, (), (), None, error=why)
    else:
        import torch

        import flashkern

        report = run(torch, flashkern, with_bench=args.bench)
    if args.json:
        print(report.dumps())  # noqa: T201 - the machine-readable result is the output
    else:
        print(report.table(), file=sys.stdout if why is None else sys.stderr)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
