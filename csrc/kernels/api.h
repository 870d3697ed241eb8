// Host API of the flashkern kernels: non-template wrappers over raw device pointers, in the
// style of FlashRT (pointers as integers on the Python side, a dtype tag and a stream).
// Every wrapper validates its arguments (std::invalid_argument), launches on `stream` and
// reports launch errors (std::runtime_error). Plain C++: bindings.cpp includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace fk {

enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kFloat8E4M3 = 3 };

// --- norm.cu -------------------------------------------------------------------------------
// y = x / sqrt(mean(x^2) + eps) * weight, per row of `hidden` contiguous elements.
void rms_norm(void* out, const void* x, const void* weight, int64_t rows, int64_t hidden,
              float eps, DType dtype, cudaStream_t stream);
// y = (x - mean) / sqrt(var + eps) [* weight + bias]; weight/bias may be null (no affine).
void layer_norm(void* out, const void* x, const void* weight, const void* bias, int64_t rows,
                int64_t hidden, float eps, DType dtype, cudaStream_t stream);

// --- activation.cu -------------------------------------------------------------------------
// out == x runs the in-place kernel.
void gelu_tanh(void* out, const void* x, int64_t n, DType dtype, cudaStream_t stream);
void silu(void* out, const void* x, int64_t n, DType dtype, cudaStream_t stream);

// --- quantize.cu ---------------------------------------------------------------------------
// q = saturate_e4m3(x / scale); scale from `scale_ptr` (device, fp32) when non-null.
void quantize_fp8(void* out, const void* x, int64_t n, float scale, const float* scale_ptr,
                  DType dtype, cudaStream_t stream);
// x = float(q) * scale.
void dequantize_fp8(void* out, const void* q, int64_t n, float scale, const float* scale_ptr,
                    DType dtype, cudaStream_t stream);

// --- elementwise.cu ------------------------------------------------------------------------
void residual_add(void* out, const void* a, const void* b, int64_t n, DType dtype,
                  cudaStream_t stream);
// out[r, c] = x[r, c] + bias[c]
void bias_add(void* out, const void* x, const void* bias, int64_t rows, int64_t cols,
              DType dtype, cudaStream_t stream);
void cast(void* out, DType out_dtype, const void* x, DType in_dtype, int64_t n,
          cudaStream_t stream);

// --- rope.cu -------------------------------------------------------------------------------
// In place, rotate-half. q: [tokens, heads_q, head_dim], k: [tokens, heads_k, head_dim]
// (contiguous; k may be null), cos/sin: fp32 [tokens, head_dim / 2].
void rope(void* q, void* k, const float* cos, const float* sin, int64_t tokens, int heads_q,
          int heads_k, int head_dim, DType dtype, cudaStream_t stream);

// --- fusion.cu -----------------------------------------------------------------------------
// h = x + residual; residual_out = h; out = rms_norm(h) * weight. residual_out may alias
// residual. With residual == null this is a plain RMSNorm.
void fused_add_rms_norm(void* out, void* residual_out, const void* x, const void* residual,
                        const void* weight, int64_t rows, int64_t hidden, float eps,
                        DType dtype, cudaStream_t stream);
// Same, with out = saturate_e4m3(rms_norm(h) * weight / scale) (E4M3 bytes).
void fused_add_rms_norm_fp8(void* out, void* residual_out, const void* x, const void* residual,
                            const void* weight, int64_t rows, int64_t hidden, float eps,
                            float scale, const float* scale_ptr, DType dtype,
                            cudaStream_t stream);

// --- arch/softmax_tiled.cu -----------------------------------------------------------------
// Row softmax; rows that fit the arch's shared-memory tile are read from global memory once.
void softmax(void* out, const void* x, int64_t rows, int64_t cols, DType dtype,
             cudaStream_t stream);
// Dynamic shared memory the tiled softmax requests on the current device (its traits).
int64_t softmax_smem_bytes();

// --- sm90/ or portable/ --------------------------------------------------------------------
void copy(void* dst, const void* src, int64_t nbytes, cudaStream_t stream);
// "sm90_tma" when the Hopper bulk-copy kernel runs on this device, else "portable".
std::string copy_impl();

// --- launch.cpp ----------------------------------------------------------------------------
int current_sm_version();       // e.g. 90 for an H100
int current_sm_count();
void check_launch(const char* what);  // throws std::runtime_error on a pending CUDA error
void require(bool ok, const char* message);  // throws std::invalid_argument
int dtype_size(DType dtype);

}  // namespace fk
