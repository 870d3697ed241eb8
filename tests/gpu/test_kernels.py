"""Every flashkern kernel, every dtype, against torch on a real GPU: odd sizes (not multiples
of the 128-bit vector width), one row, very long rows, misaligned pointers (offset views)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from types import ModuleType

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "float16", "bfloat16"]
# (atol, rtol) for a value of this dtype that went through fp32 math and one final rounding.
TOL = {"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}
NORM_SHAPES = [(1, 4096), (16, 8192), (7, 1000), (3, 65544), (5, 24), (2, 8), (4, 16384)]


def tdt(torch: ModuleType, name: str) -> Any:
    return getattr(torch, name)


def stream(torch: ModuleType) -> int:
    return int(torch.cuda.current_stream().cuda_stream)


def rand(torch: ModuleType, shape: tuple[int, ...], dtype: str, *, offset: int = 0,
         scale: float = 1.0) -> Any:
    """A contiguous tensor; offset > 0 makes it start `offset` elements into a buffer, so its
    pointer is not 16-byte aligned."""
    n = math.prod(shape)
    buf = torch.randn(n + offset, device="cuda", dtype=torch.float32) * scale
    return buf.to(tdt(torch, dtype))[offset:].view(shape)


def empty_like_at(torch: ModuleType, ref: Any, offset: int = 0) -> Any:
    buf = torch.empty(ref.numel() + offset, device="cuda", dtype=ref.dtype)
    return buf[offset:].view(ref.shape)


def close(torch: ModuleType, got: Any, want: Any, dtype: str, factor: float = 1.0) -> None:
    atol, rtol = TOL[dtype]
    torch.cuda.synchronize()
    torch.testing.assert_close(got.float(), want.float(), atol=atol * factor, rtol=rtol * factor)


def rms_ref(torch: ModuleType, x: Any, w: Any, eps: float) -> Any:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


# ---- capability queries ------------------------------------------------------------------


def test_built_archs_and_sm_version(fk: ModuleType, torch: ModuleType) -> None:
    major, minor = torch.cuda.get_device_capability()
    assert fk.sm_version() == major * 10 + minor
    archs = [a.removesuffix("a") for a in fk.built_archs()]
    assert f"{major}{minor}" in archs


def test_tiled_kernel_smem_fits_device(fk: ModuleType, torch: ModuleType) -> None:
    smem = fk.kernel_smem_bytes()
    limit = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    assert smem["softmax_tiled"] > 48 * 1024  # it really is a big-tile kernel
    assert smem["softmax_tiled"] <= limit


def test_copy_impl_on_hopper(fk: ModuleType, torch: ModuleType) -> None:
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the TMA copy path is for sm_90")
    assert fk.copy_impl() == "sm90_tma"


# ---- norms -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "hidden"), NORM_SHAPES)
@pytest.mark.parametrize("offset", [0, 1])
def test_rms_norm(fk: ModuleType, torch: ModuleType, dtype: str, rows: int, hidden: int,
                  offset: int) -> None:
    x = rand(torch, (rows, hidden), dtype, offset=offset)
    w = rand(torch, (hidden,), dtype)
    out = empty_like_at(torch, x, offset)
    fk.rms_norm(out.data_ptr(), x.data_ptr(), w.data_ptr(), rows, hidden, 1e-6, dtype,
                stream(torch))
    close(torch, out, rms_ref(torch, x, w, 1e-6), dtype, factor=4.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "hidden"), NORM_SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(fk: ModuleType, torch: ModuleType, dtype: str, rows: int, hidden: int,
                    affine: bool) -> None:
    x = rand(torch, (rows, hidden), dtype) + 3.0  # an offset mean: checks the centring
    w = rand(torch, (hidden,), dtype) if affine else None
    b = rand(torch, (hidden,), dtype) if affine else None
    out = torch.empty_like(x)
    fk.layer_norm(out.data_ptr(), x.data_ptr(), w.data_ptr() if affine else 0,
                  b.data_ptr() if affine else 0, rows, hidden, 1e-5, dtype, stream(torch))
    want = torch.nn.functional.layer_norm(
        x.float(), (hidden,), w.float() if affine else None, b.float() if affine else None,
        1e-5).to(x.dtype)
    close(torch, out, want, dtype, factor=4.0)


def test_layer_norm_rejects_half_affine(fk: ModuleType, torch: ModuleType) -> None:
    x = rand(torch, (2, 64), "float32")
    with pytest.raises(ValueError, match="weight and bias"):
        fk.layer_norm(x.data_ptr(), x.data_ptr(), x.data_ptr(), 0, 2, 64, 1e-5, "float32")


# ---- activations -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 4099, 1 << 20])
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("act", ["gelu_tanh", "silu"])
@pytest.mark.parametrize("inplace", [False, True])
def test_activation(fk: ModuleType, torch: ModuleType, dtype: str, n: int, offset: int,
                    act: str, inplace: bool) -> None:
    x = rand(torch, (n,), dtype, offset=offset, scale=3.0)
    if act == "gelu_tanh":
        want = torch.nn.functional.gelu(x.float(), approximate="tanh").to(x.dtype)
    else:
        want = torch.nn.functional.silu(x.float()).to(x.dtype)
    out = x if inplace else empty_like_at(torch, x, offset)
    getattr(fk, act)(out.data_ptr(), x.data_ptr(), n, dtype, stream(torch))
    close(torch, out, want, dtype, factor=2.0)


# ---- FP8 ---------------------------------------------------------------------------------


def fp8_ref(torch: ModuleType, x: Any, scale: float) -> Any:
    return (x.float() / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def fp8_close(torch: ModuleType, got: Any, want: Any) -> None:
    """Equal up to one E4M3 step (3 mantissa bits) where x/scale rounds differently."""
    torch.cuda.synchronize()
    torch.testing.assert_close(got.float(), want.float(), atol=2.0**-9, rtol=2.0**-3)
    mismatched = (got.view(torch.uint8) != want.view(torch.uint8)).float().mean().item()
    assert mismatched < 1e-3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 13, 4097, 1 << 20])
@pytest.mark.parametrize("offset", [0, 3])
@pytest.mark.parametrize("device_scale", [False, True])
def test_fp8_quantize_round_trip(fk: ModuleType, torch: ModuleType, dtype: str, n: int,
                                 offset: int, device_scale: bool) -> None:
    x = rand(torch, (n,), dtype, offset=offset, scale=100.0)
    x[0] = 1e6  # saturates to 448 * scale, never inf/nan
    scale = 0.37
    scale_t = torch.tensor([scale], device="cuda", dtype=torch.float32)
    qbuf = torch.empty(n + offset, device="cuda", dtype=torch.float8_e4m3fn)
    q = qbuf[offset:]
    kwargs = {"scale_ptr": scale_t.data_ptr()} if device_scale else {"scale": scale}
    fk.quantize_fp8(q.data_ptr(), x.data_ptr(), n, dtype, stream=stream(torch), **kwargs)
    want = fp8_ref(torch, x, scale)
    fp8_close(torch, q, want)
    assert q.float()[0].item() == 448.0

    back = empty_like_at(torch, x, offset)
    fk.dequantize_fp8(back.data_ptr(), q.data_ptr(), n, dtype, stream=stream(torch), **kwargs)
    close(torch, back, (want.float() * scale).to(x.dtype), dtype)
    # Round trip: within half an E4M3 step of the input wherever the input is in range.
    inrange = x.float().abs() <= 448 * scale
    err = (back.float() - x.float()).abs()[inrange]
    bound = x.float().abs()[inrange] * 2.0**-4 + scale * 2.0**-9 + TOL[dtype][0]
    assert bool((err <= bound * 1.01).all())


# ---- elementwise -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 9, 4101, (1 << 22) + 3])
@pytest.mark.parametrize("offset", [0, 1])
def test_residual_add(fk: ModuleType, torch: ModuleType, dtype: str, n: int,
                      offset: int) -> None:
    a = rand(torch, (n,), dtype, offset=offset)
    b = rand(torch, (n,), dtype)
    out = empty_like_at(torch, a, offset)
    fk.residual_add(out.data_ptr(), a.data_ptr(), b.data_ptr(), n, dtype, stream(torch))
    close(torch, out, (a.float() + b.float()).to(a.dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "cols"), [(1, 8), (33, 4096), (5, 1001), (2, 65536)])
@pytest.mark.parametrize("offset", [0, 1])
def test_bias_add(fk: ModuleType, torch: ModuleType, dtype: str, rows: int, cols: int,
                  offset: int) -> None:
    x = rand(torch, (rows, cols), dtype, offset=offset)
    bias = rand(torch, (cols,), dtype)
    out = empty_like_at(torch, x, offset)
    fk.bias_add(out.data_ptr(), x.data_ptr(), bias.data_ptr(), rows, cols, dtype, stream(torch))
    close(torch, out, (x.float() + bias.float()).to(x.dtype), dtype)


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("dst", DTYPES)
@pytest.mark.parametrize("n", [1, 15, 4103, 1 << 20])
@pytest.mark.parametrize("offset", [0, 1])
def test_cast(fk: ModuleType, torch: ModuleType, src: str, dst: str, n: int,
              offset: int) -> None:
    x = rand(torch, (n,), src, offset=offset, scale=10.0)
    out = torch.empty(n + offset, device="cuda", dtype=tdt(torch, dst))[offset:]
    fk.cast(out.data_ptr(), dst, x.data_ptr(), src, n, stream(torch))
    torch.cuda.synchronize()
    assert torch.equal(out, x.to(tdt(torch, dst)))


@pytest.mark.parametrize("nbytes", [1, 17, 4096, (1 << 20) + 5, 64 << 20])
@pytest.mark.parametrize("offset", [0, 1])
def test_copy(fk: ModuleType, torch: ModuleType, nbytes: int, offset: int) -> None:
    src = torch.randint(0, 256, (nbytes + offset,), device="cuda", dtype=torch.uint8)[offset:]
    dst = torch.zeros(nbytes + offset, device="cuda", dtype=torch.uint8)[offset:]
    fk.copy(dst.data_ptr(), src.data_ptr(), nbytes, stream(torch))
    torch.cuda.synchronize()
    assert torch.equal(dst, src)


# ---- RoPE --------------------------------------------------------------------------------


def rope_ref(torch: ModuleType, x: Any, cos: Any, sin: Any) -> Any:
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("tokens", "heads_q", "heads_k", "head_dim"),
                         [(1, 32, 8, 128), (77, 8, 2, 64), (5, 3, 1, 6), (300, 4, 4, 80)])
@pytest.mark.parametrize("offset", [0, 1])
def test_rope(fk: ModuleType, torch: ModuleType, dtype: str, tokens: int, heads_q: int,
              heads_k: int, head_dim: int, offset: int) -> None:
    q = rand(torch, (tokens, heads_q, head_dim), dtype, offset=offset)
    k = rand(torch, (tokens, heads_k, head_dim), dtype, offset=offset)
    pos = torch.arange(tokens, device="cuda", dtype=torch.float32)[:, None]
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, device="cuda").float() / head_dim))
    cos, sin = torch.cos(pos * inv_freq).contiguous(), torch.sin(pos * inv_freq).contiguous()
    want_q, want_k = rope_ref(torch, q, cos, sin), rope_ref(torch, k, cos, sin)
    fk.rope(q.data_ptr(), k.data_ptr(), cos.data_ptr(), sin.data_ptr(), tokens, heads_q,
            heads_k, head_dim, dtype, stream(torch))
    close(torch, q, want_q, dtype, factor=2.0)
    close(torch, k, want_k, dtype, factor=2.0)


# ---- fused residual + RMSNorm (+ FP8) ----------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "hidden"), NORM_SHAPES)
@pytest.mark.parametrize("inplace", [False, True])
def test_fused_add_rms_norm(fk: ModuleType, torch: ModuleType, dtype: str, rows: int,
                            hidden: int, inplace: bool) -> None:
    x = rand(torch, (rows, hidden), dtype)
    r = rand(torch, (rows, hidden), dtype)
    w = rand(torch, (hidden,), dtype)
    h = (x.float() + r.float()).to(x.dtype)
    want = rms_ref(torch, h, w, 1e-6)
    out = torch.empty_like(x)
    r_out = r if inplace else torch.empty_like(r)
    fk.fused_add_rms_norm(out.data_ptr(), r_out.data_ptr(), x.data_ptr(), r.data_ptr(),
                          w.data_ptr(), rows, hidden, 1e-6, dtype, stream(torch))
    close(torch, r_out, h, dtype)
    close(torch, out, want, dtype, factor=4.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_without_residual_is_rms_norm(fk: ModuleType, torch: ModuleType,
                                            dtype: str) -> None:
    x = rand(torch, (9, 4096), dtype)
    w = rand(torch, (4096,), dtype)
    out = torch.empty_like(x)
    fk.fused_add_rms_norm(out.data_ptr(), 0, x.data_ptr(), 0, w.data_ptr(), 9, 4096, 1e-6,
                          dtype, stream(torch))
    close(torch, out, rms_ref(torch, x, w, 1e-6), dtype, factor=4.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "hidden"), NORM_SHAPES)
@pytest.mark.parametrize("device_scale", [False, True])
def test_fused_add_rms_norm_fp8(fk: ModuleType, torch: ModuleType, dtype: str, rows: int,
                                hidden: int, device_scale: bool) -> None:
    x = rand(torch, (rows, hidden), dtype)
    r = rand(torch, (rows, hidden), dtype)
    w = rand(torch, (hidden,), dtype, scale=4.0)
    scale = 0.02
    h = (x.float() + r.float()).to(x.dtype)
    want = fp8_ref(torch, rms_ref(torch, h, w, 1e-6), scale)
    out = torch.empty((rows, hidden), device="cuda", dtype=torch.float8_e4m3fn)
    r_out = torch.empty_like(r)
    scale_t = torch.tensor([scale], device="cuda", dtype=torch.float32)
    kwargs = {"scale_ptr": scale_t.data_ptr()} if device_scale else {"scale": scale}
    fk.fused_add_rms_norm_fp8(out.data_ptr(), r_out.data_ptr(), x.data_ptr(), r.data_ptr(),
                              w.data_ptr(), rows, hidden, 1e-6, dtype, stream=stream(torch),
                              **kwargs)
    close(torch, r_out, h, dtype)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), want.float(), atol=2.0**-9, rtol=2.0**-3)
    assert (out.view(torch.uint8) != want.view(torch.uint8)).float().mean().item() < 5e-3


# ---- tiled softmax -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (3, 1000), (64, 4096), (2, 40000),
                                            (2, 65539), (1, 200000)])
@pytest.mark.parametrize("offset", [0, 1])
def test_softmax(fk: ModuleType, torch: ModuleType, dtype: str, rows: int, cols: int,
                 offset: int) -> None:
    x = rand(torch, (rows, cols), dtype, offset=offset, scale=4.0)
    out = empty_like_at(torch, x, offset)
    fk.softmax(out.data_ptr(), x.data_ptr(), rows, cols, dtype, stream(torch))
    want = torch.softmax(x.float(), dim=-1).to(x.dtype)
    torch.cuda.synchronize()
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.float(), want.float(), atol=atol / 10, rtol=rtol * 4)
    torch.testing.assert_close(out.float().sum(-1), torch.ones(rows, device="cuda"),
                               atol=1e-2, rtol=0)


# ---- argument checks ---------------------------------------------------------------------


def test_bad_dtype_and_sizes_raise(fk: ModuleType, torch: ModuleType) -> None:
    x = rand(torch, (4,), "float32")
    with pytest.raises(ValueError, match="unknown dtype"):
        fk.silu(x.data_ptr(), x.data_ptr(), 4, "int8")
    with pytest.raises(ValueError, match="scale"):
        fk.quantize_fp8(x.data_ptr(), x.data_ptr(), 4, "float32", scale=0.0)


# ---- attention plugin through the dispatcher ---------------------------------------------


def test_attention_plugin_loading(fk: ModuleType, torch: ModuleType, tmp_path: Any) -> None:
    fk.unload_attention_plugin()
    assert not fk.has_attention_plugin()
    q = rand(torch, (1, 1, 4, 64), "float16")
    with pytest.raises(RuntimeError, match="no attention plugin"):
        fk.attention_forward(q.data_ptr(), q.data_ptr(), q.data_ptr(), q.data_ptr(), 1, 1, 4,
                             4, 64, "float16")
    with pytest.raises(RuntimeError, match="cannot load attention plugin"):
        fk.load_attention_plugin(tmp_path / "missing.so")
    bogus = tmp_path / "bogus.so"
    bogus.write_bytes(b"not an ELF file")
    with pytest.raises(RuntimeError, match="cannot load attention plugin"):
        fk.load_attention_plugin(bogus)
    assert not fk.has_attention_plugin()
    fk.load_attention_plugin()
    assert fk.has_attention_plugin()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("batch", "heads", "seq_q", "seq_k", "head_dim"),
                         [(2, 4, 128, 128, 64), (1, 2, 77, 77, 128), (1, 3, 5, 200, 80),
                          (2, 1, 1, 33, 32), (1, 2, 50, 20, 16)])
def test_attention_forward_matches_sdpa(fk: ModuleType, torch: ModuleType, dtype: str,
                                        causal: bool, batch: int, heads: int, seq_q: int,
                                        seq_k: int, head_dim: int) -> None:
    if not fk.has_attention_plugin():
        fk.load_attention_plugin()
    q = rand(torch, (batch, heads, seq_q, head_dim), dtype)
    k = rand(torch, (batch, heads, seq_k, head_dim), dtype)
    v = rand(torch, (batch, heads, seq_k, head_dim), dtype)
    out = torch.empty_like(q)
    fk.attention_forward(out.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), batch, heads,
                         seq_q, seq_k, head_dim, dtype, causal=causal, stream=stream(torch))
    want = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=causal).to(q.dtype)
    close(torch, out, want, dtype, factor=4.0)


# The tensor-core path (fp16 / bf16, head_dim 64 / 128, aligned): sequences that are not
# multiples of the 128-row query block or the 64-key tile, seq_q != seq_k both ways, and the
# shapes the benchmark times. Error bound, against fp32 SDPA on the same (rounded) inputs:
# relative Frobenius error ||out - ref|| / ||ref|| <= 1e-2 (bf16) / 2e-3 (fp16) -- P is rounded
# to the input dtype before P.V, as in FlashAttention-2 -- and every element within the
# dtype's one-rounding tolerance x 4. The output is poisoned with NaN first: every element
# must be written.
ATTN_REL_ERR = {"bfloat16": 1e-2, "float16": 2e-3}
TC_SHAPES = [(1, 1, 1, 1, 64), (2, 3, 130, 130, 64), (1, 2, 64, 300, 128),
             (1, 2, 300, 64, 128), (2, 2, 257, 193, 64), (1, 4, 1000, 1000, 128),
             (2, 16, 2048, 2048, 128), (1, 16, 4096, 4096, 64), (1, 8, 512, 512, 64)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("batch", "heads", "seq_q", "seq_k", "head_dim"), TC_SHAPES)
def test_attention_tensor_core_path(fk: ModuleType, torch: ModuleType, dtype: str,
                                    causal: bool, batch: int, heads: int, seq_q: int,
                                    seq_k: int, head_dim: int) -> None:
    if not fk.has_attention_plugin():
        fk.load_attention_plugin()
    q = rand(torch, (batch, heads, seq_q, head_dim), dtype)
    k = rand(torch, (batch, heads, seq_k, head_dim), dtype)
    v = rand(torch, (batch, heads, seq_k, head_dim), dtype)
    out = torch.full_like(q, float("nan"))
    fk.attention_forward(out.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), batch, heads,
                         seq_q, seq_k, head_dim, dtype, causal=causal, stream=stream(torch))
    torch.cuda.synchronize()
    want = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=causal)
    assert torch.isfinite(out.float()).all()
    rel = float((out.float() - want).norm() / want.norm())
    assert rel <= ATTN_REL_ERR[dtype], rel
    close(torch, out, want, dtype, factor=4.0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_attention_unaligned_takes_fallback(fk: ModuleType, torch: ModuleType,
                                            dtype: str) -> None:
    """A tensor 2 elements into its buffer is not 16-byte aligned: still right (reference
    kernel), with the explicit scale argument honoured."""
    if not fk.has_attention_plugin():
        fk.load_attention_plugin()
    shape = (1, 2, 70, 64)
    q = rand(torch, shape, dtype, offset=2)
    k = rand(torch, shape, dtype)
    v = rand(torch, shape, dtype)
    out = empty_like_at(torch, q, offset=2)
    fk.attention_forward(out.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(), 1, 2, 70, 70,
                         64, dtype, causal=True, scale=0.3, stream=stream(torch))
    want = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=True, scale=0.3)
    close(torch, out, want, dtype, factor=4.0)


def test_attention_rejects_large_head_dim(fk: ModuleType, torch: ModuleType) -> None:
    if not fk.has_attention_plugin():
        fk.load_attention_plugin()
    q = rand(torch, (1, 1, 2, 256), "float16")
    with pytest.raises(ValueError, match="head_dim"):
        fk.attention_forward(q.data_ptr(), q.data_ptr(), q.data_ptr(), q.data_ptr(), 1, 1, 2, 2,
                             256, "float16")
