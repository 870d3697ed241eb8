"""flashkern: fast memory-bound CUDA kernels over raw device pointers.

Every kernel takes device pointers as integers (``tensor.data_ptr()``), sizes, a dtype name
(``"float32"``, ``"float16"``, ``"bfloat16"``; ``"torch.float16"`` is accepted too) and a
CUDA stream as an integer (``torch.cuda.current_stream().cuda_stream``; 0 is the legacy
default stream). Buffers must be contiguous. Launches are asynchronous on that stream.
"""

from __future__ import annotations

from pathlib import Path

from flashkern import _C

__all__ = [
    "attention_forward",
    "bias_add",
    "built_archs",
    "cast",
    "copy",
    "copy_impl",
    "default_plugin_path",
    "dequantize_fp8",
    "fused_add_rms_norm",
    "fused_add_rms_norm_fp8",
    "gelu_tanh",
    "has_attention_plugin",
    "kernel_smem_bytes",
    "layer_norm",
    "load_attention_plugin",
    "quantize_fp8",
    "residual_add",
    "rms_norm",
    "rope",
    "silu",
    "sm_version",
    "softmax",
    "unload_attention_plugin",
]

#: File name of the attention plugin built next to this package.
PLUGIN_FILENAME = "libflashkern_attn.so"


def _dt(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")


def built_archs() -> list[str]:
    """GPU architectures compiled into the module, e.g. ``["90a"]``."""
    return list(_C.built_archs())


def sm_version() -> int:
    """SM version of the current CUDA device, e.g. 90 for an H100."""
    return int(_C.sm_version())


def kernel_smem_bytes() -> dict[str, int]:
    """Dynamic shared memory (bytes per block) each tiled kernel requests on this device."""
    return {str(k): int(v) for k, v in _C.kernel_smem_bytes().items()}


def rms_norm(out: int, x: int, weight: int, rows: int, hidden: int, eps: float,
             dtype: object, stream: int = 0) -> None:
    """RMSNorm over rows of ``hidden`` elements: ``x / sqrt(mean(x^2) + eps) * weight``."""
    _C.rms_norm(out, x, weight, rows, hidden, eps, _dt(dtype), stream)


def layer_norm(out: int, x: int, weight: int, bias: int, rows: int, hidden: int, eps: float,
               dtype: object, stream: int = 0) -> None:
    """LayerNorm per row; ``weight = bias = 0`` for no affine transform."""
    _C.layer_norm(out, x, weight, bias, rows, hidden, eps, _dt(dtype), stream)


def gelu_tanh(out: int, x: int, n: int, dtype: object, stream: int = 0) -> None:
    """GELU, tanh approximation; ``out == x`` works in place."""
    _C.gelu_tanh(out, x, n, _dt(dtype), stream)


def silu(out: int, x: int, n: int, dtype: object, stream: int = 0) -> None:
    """SiLU (``x * sigmoid(x)``); ``out == x`` works in place."""
    _C.silu(out, x, n, _dt(dtype), stream)


def quantize_fp8(out: int, x: int, n: int, dtype: object, scale: float = 1.0,
                 scale_ptr: int = 0, stream: int = 0) -> None:
    """FP8 E4M3 quantize, ``saturate(x / scale)``; ``scale_ptr`` (device fp32) wins if set."""
    _C.quantize_fp8(out, x, n, scale, scale_ptr, _dt(dtype), stream)


def dequantize_fp8(out: int, q: int, n: int, dtype: object, scale: float = 1.0,
                   scale_ptr: int = 0, stream: int = 0) -> None:
    """FP8 E4M3 dequantize into ``dtype``: ``float(q) * scale``."""
    _C.dequantize_fp8(out, q, n, scale, scale_ptr, _dt(dtype), stream)


def residual_add(out: int, a: int, b: int, n: int, dtype: object, stream: int = 0) -> None:
    """``out = a + b`` over ``n`` elements."""
    _C.residual_add(out, a, b, n, _dt(dtype), stream)


def bias_add(out: int, x: int, bias: int, rows: int, cols: int, dtype: object,
             stream: int = 0) -> None:
    """``out[r, c] = x[r, c] + bias[c]``."""
    _C.bias_add(out, x, bias, rows, cols, _dt(dtype), stream)


def cast(out: int, out_dtype: object, x: int, in_dtype: object, n: int, stream: int = 0) -> None:
    """Convert ``n`` elements between float32, float16 and bfloat16."""
    _C.cast(out, _dt(out_dtype), x, _dt(in_dtype), n, stream)


def rope(q: int, k: int, cos: int, sin: int, tokens: int, heads_q: int, heads_k: int,
         head_dim: int, dtype: object, stream: int = 0) -> None:
    """Rotary embedding (rotate-half), in place on q ``[tokens, heads_q, head_dim]`` and
    k ``[tokens, heads_k, head_dim]`` (``k = 0`` with ``heads_k = 0`` for q only);
    cos/sin are fp32 ``[tokens, head_dim // 2]``."""
    _C.rope(q, k, cos, sin, tokens, heads_q, heads_k, head_dim, _dt(dtype), stream)


def fused_add_rms_norm(out: int, residual_out: int, x: int, residual: int, weight: int,
                       rows: int, hidden: int, eps: float, dtype: object,
                       stream: int = 0) -> None:
    """``h = x + residual``; ``residual_out = h``; ``out = rms_norm(h) * weight`` in one pass.
    ``residual_out`` may equal ``residual``; ``residual = 0`` gives a plain RMSNorm."""
    _C.fused_add_rms_norm(out, residual_out, x, residual, weight, rows, hidden, eps,
                          _dt(dtype), stream)


def fused_add_rms_norm_fp8(out: int, residual_out: int, x: int, residual: int, weight: int,
                           rows: int, hidden: int, eps: float, dtype: object,
                           scale: float = 1.0, scale_ptr: int = 0, stream: int = 0) -> None:
    """As :func:`fused_add_rms_norm`, with an FP8 E4M3 output ``saturate(norm / scale)``."""
    _C.fused_add_rms_norm_fp8(out, residual_out, x, residual, weight, rows, hidden, eps,
                              scale, scale_ptr, _dt(dtype), stream)


def softmax(out: int, x: int, rows: int, cols: int, dtype: object, stream: int = 0) -> None:
    """Row softmax, shared-memory tiled for long rows."""
    _C.softmax(out, x, rows, cols, _dt(dtype), stream)


def copy(dst: int, src: int, nbytes: int, stream: int = 0) -> None:
    """Device-to-device copy (TMA bulk copies on sm_90a builds running on sm_90)."""
    _C.copy(dst, src, nbytes, stream)


def copy_impl() -> str:
    """``"sm90_tma"`` or ``"portable"``: the path :func:`copy` takes on this device."""
    return str(_C.copy_impl())


def default_plugin_path() -> Path:
    """The attention plugin built next to this package."""
    return Path(__file__).resolve().parent / PLUGIN_FILENAME


def load_attention_plugin(path: str | Path | None = None) -> None:
    """Load the attention plugin (default: :func:`default_plugin_path`); raises
    RuntimeError with the loader's message when it cannot be loaded."""
    _C.load_attention_plugin(str(path if path is not None else default_plugin_path()))


def unload_attention_plugin() -> None:
    """Unload the attention plugin, if one is loaded."""
    _C.unload_attention_plugin()


def has_attention_plugin() -> bool:
    """Whether an attention plugin is loaded."""
    return bool(_C.has_attention_plugin())


def attention_forward(out: int, q: int, k: int, v: int, batch: int, heads: int, seq_q: int,
                      seq_k: int, head_dim: int, dtype: object, causal: bool = False,
                      scale: float = 0.0, stream: int = 0) -> None:
    """Scaled-dot-product attention through the plugin; tensors are contiguous
    ``[batch, heads, seq, head_dim]``, ``head_dim <= 128``; ``scale <= 0`` means
    ``1/sqrt(head_dim)``; ``causal`` masks keys after the query (top-left aligned)."""
    _C.attention_forward(out, q, k, v, batch, heads, seq_q, seq_k, head_dim, _dt(dtype),
                         causal, scale, stream)
