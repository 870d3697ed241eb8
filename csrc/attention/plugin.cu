// The attention plugin: a separate shared library (libflashkern_attn.so) that the dispatcher
// loads at run time. Scaled-dot-product attention forward, one warp per query row, online
// softmax in fp32 (no [seq_q, seq_k] score matrix is ever stored), head_dim <= 128.
// Exports plain extern "C" symbols; on Windows a DLL also needs __declspec(dllexport), which
// flashbuild's dynamic-loading transform adds.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <cmath>

#include "plugin_abi.h"

namespace {

constexpr int kMaxHeadDim = 128;
constexpr int kPerLane = kMaxHeadDim / 32;
constexpr int kWarpsPerBlock = 4;

template <typename T> __device__ __forceinline__ float ld(const T* p) { return static_cast<float>(*p); }
template <> __device__ __forceinline__ float ld<__half>(const __half* p) { return __half2float(*p); }
template <> __device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16* p) { return __bfloat162float(*p); }

template <typename T> __device__ __forceinline__ T st(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) sdpa_forward_kernel(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    T* __restrict__ out, int batch_heads, int seq_q, int seq_k, int head_dim, int causal,
    float scale) {
  const int lane = threadIdx.x & 31;
  const long long row = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= static_cast<long long>(batch_heads) * seq_q) return;
  const long long bh = row / seq_q;
  const int i = static_cast<int>(row % seq_q);
  const T* qr = q + row * head_dim;
  const T* kb = k + bh * seq_k * head_dim;
  const T* vb = v + bh * seq_k * head_dim;

  float qv[kPerLane], acc[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int e = lane + 32 * t;
    qv[t] = e < head_dim ? ld(qr + e) * scale : 0.0f;
    acc[t] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last = causal ? (i < seq_k - 1 ? i : seq_k - 1) : seq_k - 1;
  for (int j = 0; j <= last; ++j) {
    const T* kr = kb + static_cast<long long>(j) * head_dim;
    float s = 0.0f;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int e = lane + 32 * t;
      if (e < head_dim) s += qv[t] * ld(kr + e);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float m_new = fmaxf(m, s);
    const float corr = __expf(m - m_new);  // 0 on the first key (m = -inf)
    const float p = __expf(s - m_new);
    l = l * corr + p;
    const T* vr = vb + static_cast<long long>(j) * head_dim;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int e = lane + 32 * t;
      if (e < head_dim) acc[t] = acc[t] * corr + p * ld(vr + e);
    }
    m = m_new;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  T* orow = out + row * head_dim;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int e = lane + 32 * t;
    if (e < head_dim) orow[e] = st<T>(acc[t] * inv);
  }
}

template <typename T>
int launch(const void* q, const void* k, const void* v, void* out, int bh, int seq_q, int seq_k,
           int head_dim, int causal, float scale, cudaStream_t stream) {
  const long long rows = static_cast<long long>(bh) * seq_q;
  const unsigned grid = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  sdpa_forward_kernel<T><<<grid, kWarpsPerBlock * 32, 0, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      static_cast<T*>(out), bh, seq_q, seq_k, head_dim, causal, scale);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" int fk_attn_abi_version(void) { return FK_ATTN_ABI_VERSION; }

extern "C" const char* fk_attn_name(void) { return "flashkern reference SDPA (warp per query)"; }

extern "C" const char* fk_attn_error_string(int code) {
  switch (code) {
    case 0: return "success";
    case FK_ATTN_ERR_BAD_ARGS: return "bad arguments (sizes must be > 0, pointers non-null)";
    case FK_ATTN_ERR_HEAD_DIM: return "head_dim must be <= 128";
    case FK_ATTN_ERR_DTYPE: return "dtype must be 0 (fp32), 1 (fp16) or 2 (bf16)";
    default: return code > 0 ? cudaGetErrorString(static_cast<cudaError_t>(code)) : "unknown error";
  }
}

extern "C" int fk_attn_forward(const void* q, const void* k, const void* v, void* out, int batch,
                               int heads, int seq_q, int seq_k, int head_dim, int dtype,
                               int causal, float scale, void* stream) {
  if (q == nullptr || k == nullptr || v == nullptr || out == nullptr || batch <= 0 ||
      heads <= 0 || seq_q <= 0 || seq_k <= 0 || head_dim <= 0) {
    return FK_ATTN_ERR_BAD_ARGS;
  }
  if (head_dim > kMaxHeadDim) return FK_ATTN_ERR_HEAD_DIM;
  const float s = scale > 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int bh = batch * heads;
  auto* st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: return launch<float>(q, k, v, out, bh, seq_q, seq_k, head_dim, causal, s, st);
    case 1: return launch<__half>(q, k, v, out, bh, seq_q, seq_k, head_dim, causal, s, st);
    case 2: return launch<__nv_bfloat16>(q, k, v, out, bh, seq_q, seq_k, head_dim, causal, s, st);
    default: return FK_ATTN_ERR_DTYPE;
  }
}
