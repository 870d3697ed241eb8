// Fused residual add + RMSNorm (+ FP8 E4M3 quantize): one read of x and residual, one write of
// the new residual and of the normalised output, instead of the 5+ kernels and extra round
// trips of the torch sequence (x + r; rms_norm; / scale; clamp; to(float8)).
// Rounding follows that sequence: h is rounded to T before it is normalised, and the norm
// output is rounded to T before it is scaled and quantised.
#include <stdexcept>

#include "common.cuh"
#include "norm.h"
#include "rowplan.cuh"

namespace fk {


__device__ __forceinline__ float fused_scale_inv(float scale, const float* scale_ptr) {
  return 1.0f / (scale_ptr != nullptr ? __ldg(scale_ptr) : scale);
}

// OutT is T (plain output) or __nv_fp8_storage_t (E4M3 output, multiplied by inv_scale).
template <typename T, typename OutT>
__device__ __forceinline__ OutT fused_out(float y, float inv_scale) {
  if constexpr (sizeof(OutT) == 1) {
    return to_fp8_e4m3(to_float(from_float<T>(y)) * inv_scale);
  } else {
    return from_float<T>(y);
  }
}

// residual and residual_out may alias (in-place residual update), so they are not restrict.
// Shape measured on an H200 (bench/tune_fused.cu, bench/sweep_memory.cu; csrc/README.md): h is
// stored as soon as it is computed, the weight is loaded after the reduction (loading it before
// cost registers and was 1-6 % slower), and a row is split into one vector a thread on up to
// 1024 threads (fused_plan): 1.03-1.10x torch.compile at 4096-16384 rows x 4096/8192.
// 8 vectors a thread only on <= kRowThreads threads (fused_plan): at kLoopThreads the
// register cap (128) made the bf16 variant spill on sm_120.
template <typename T, typename OutT, int VPT>
__global__ void __launch_bounds__(VPT == 1 ? 1024 : VPT >= 8 ? kRowThreads : kLoopThreads) fused_add_rms_norm_kernel(
    OutT* __restrict__ out, T* residual_out, const T* __restrict__ x, const T* residual,
    const T* __restrict__ weight, int64_t hidden, float eps, float scale,
    const float* __restrict__ scale_ptr) {
  constexpr int N = Vec<T>::N;
  __shared__ float scratch[32];
  const int64_t nvec = hidden / N;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * hidden;
  // h stays packed in T (it is rounded to T anyway): half the registers of fp32 copies.
  Vec<T> hv[VPT];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < nvec) {
      hv[j] = Vec<T>::load_stream(x + row + i * N);
      if (residual != nullptr) {
        const Vec<T> vr = Vec<T>::load_stream(residual + row + i * N);
#pragma unroll
        for (int e = 0; e < N; ++e) hv[j].v[e] = from_float<T>(to_float(hv[j].v[e]) + to_float(vr.v[e]));
        hv[j].store_stream(residual_out + row + i * N);
      }
#pragma unroll
      for (int e = 0; e < N; ++e) ss += to_float(hv[j].v[e]) * to_float(hv[j].v[e]);
    }
  }
  const float rstd = rsqrtf(block_sum(ss, scratch) / static_cast<float>(hidden) + eps);
  const float inv_scale = sizeof(OutT) == 1 ? fused_scale_inv(scale, scale_ptr) : 1.0f;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < nvec) {
      const Vec<T> w = Vec<T>::load(weight + i * N);
      Pack<OutT, N> o;
#pragma unroll
      for (int e = 0; e < N; ++e) o.v[e] = fused_out<T, OutT>(to_float(hv[j].v[e]) * rstd * to_float(w.v[e]), inv_scale);
      o.store(out + row + i * N);
    }
  }
}
template __global__ void fused_add_rms_norm_kernel<__half, __nv_fp8_storage_t, 2>(__nv_fp8_storage_t*, __half*, const __half*, const __half*, const __half*, int64_t, float, float, const float*);
template __global__ void fused_add_rms_norm_kernel<__half, __nv_fp8_storage_t, 4>(__nv_fp8_storage_t*, __half*, const __half*, const __half*, const __half*, int64_t, float, float, const float*);
template __global__ void fused_add_rms_norm_kernel<__nv_bfloat16, __nv_fp8_storage_t, 2>(__nv_fp8_storage_t*, __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int64_t, float, float, const float*);
template __global__ void fused_add_rms_norm_kernel<__nv_bfloat16, __nv_fp8_storage_t, 4>(__nv_fp8_storage_t*, __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int64_t, float, float, const float*);

// Any alignment, any length: pass 1 writes h to residual_out, pass 2 re-reads it (L2-hot).
template <typename T, typename OutT>
__global__ void fused_add_rms_norm_loop_kernel(OutT* __restrict__ out, T* residual_out,
                                               const T* __restrict__ x, const T* residual,
                                               const T* __restrict__ weight, int64_t hidden,
                                               float eps, float scale,
                                               const float* __restrict__ scale_ptr) {
  __shared__ float scratch[32];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * hidden;
  const T* src = residual != nullptr ? residual_out : x;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float h = to_float(x[row + i]);
    if (residual != nullptr) {
      const T hr = from_float<T>(h + to_float(residual[row + i]));
      residual_out[row + i] = hr;
      h = to_float(hr);
    }
    ss += h * h;
  }
  const float rstd = rsqrtf(block_sum(ss, scratch) / static_cast<float>(hidden) + eps);
  const float inv_scale = sizeof(OutT) == 1 ? fused_scale_inv(scale, scale_ptr) : 1.0f;
  // Each thread re-reads only the elements it wrote itself, so no barrier is needed.
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
    out[row + i] = fused_out<T, OutT>(to_float(src[row + i]) * rstd * to_float(weight[i]), inv_scale);
}

namespace {

// One 16-byte vector per thread for rows of up to kFusedOneVector vectors (bf16 8192), else two
// per thread on as many threads as that takes (at most kLoopThreads), more only for longer rows.
// Side by side with torch.compile on an H200 (bench/sweep_memory.py), bf16, FP8 output:
// 16384 x 4096 512 x 1 1.07x, 256 x 2 1.06x, 128 x 4 1.05x; 16384 x 8192 1024 x 1 1.10x,
// 512 x 2 1.09x; plain output 1.03-1.05x for 1024 x 1 at 8192. Unaligned or odd rows plan as
// plan_row (the looped kernel).
constexpr int64_t kFusedOneVector = 1024;
template <typename T>
RowPlan fused_plan(int64_t hidden, bool pointers_aligned) {
  constexpr int N = VecWidth<T>::value;
  const RowPlan p = plan_row<T>(hidden, pointers_aligned);
  if (!p.vectorised) return p;
  const int64_t units = hidden / N;
  if (units <= kFusedOneVector) return spread_row(p, units, 1, kFusedOneVector);
  const RowPlan two = spread_row(p, units, 2, kLoopThreads);
  // Very long rows: 8 vectors a thread on kRowThreads threads (the kernel's bound for VPT 8).
  return two.vpt == 0 || two.vpt == 8 ? spread_row(p, units, 1, kRowThreads) : two;
}

template <typename T, typename OutT>
void fused_typed(void* out, void* residual_out, const void* x, const void* residual,
                 const void* weight, int64_t rows, int64_t hidden, float eps, float scale,
                 const float* scale_ptr, cudaStream_t s) {
  auto* o = static_cast<OutT*>(out);
  auto* ro = static_cast<T*>(residual_out);
  const auto* px = static_cast<const T*>(x);
  const auto* pr = static_cast<const T*>(residual);
  const auto* pw = static_cast<const T*>(weight);
  constexpr int N = Vec<T>::N;
  const bool out_aligned = reinterpret_cast<uintptr_t>(o) % (N * sizeof(OutT)) == 0;
  const bool aligned = out_aligned && aligned16(px) && aligned16(pw) &&
                       (pr == nullptr || (aligned16(pr) && aligned16(ro)));
  const RowPlan p = fused_plan<T>(hidden, aligned);
  const dim3 grid(static_cast<unsigned>(rows));
  switch (p.vectorised ? p.vpt : 0) {
    case 1: fused_add_rms_norm_kernel<T, OutT, 1><<<grid, p.threads, 0, s>>>(o, ro, px, pr, pw, hidden, eps, scale, scale_ptr); break;
    case 2: fused_add_rms_norm_kernel<T, OutT, 2><<<grid, p.threads, 0, s>>>(o, ro, px, pr, pw, hidden, eps, scale, scale_ptr); break;
    case 4: fused_add_rms_norm_kernel<T, OutT, 4><<<grid, p.threads, 0, s>>>(o, ro, px, pr, pw, hidden, eps, scale, scale_ptr); break;
    case 8: fused_add_rms_norm_kernel<T, OutT, 8><<<grid, p.threads, 0, s>>>(o, ro, px, pr, pw, hidden, eps, scale, scale_ptr); break;
    default: fused_add_rms_norm_loop_kernel<T, OutT><<<grid, p.threads, 0, s>>>(o, ro, px, pr, pw, hidden, eps, scale, scale_ptr); break;
  }
  check_launch(sizeof(OutT) == 1 ? "fused_add_rms_norm_fp8" : "fused_add_rms_norm");
}

void check_shape(int64_t rows, int64_t hidden, const void* residual, const void* residual_out) {
  require(rows >= 0 && hidden > 0, "fused_add_rms_norm: rows must be >= 0 and hidden > 0");
  require(rows <= 0x7fffffff, "fused_add_rms_norm: at most 2^31 - 1 rows");
  require(residual == nullptr || residual_out != nullptr,
          "fused_add_rms_norm: residual_out is required when residual is given");
}

}  // namespace

void fused_add_rms_norm(void* out, void* residual_out, const void* x, const void* residual,
                        const void* weight, int64_t rows, int64_t hidden, float eps,
                        DType dtype, cudaStream_t stream) {
  check_shape(rows, hidden, residual, residual_out);
  if (rows == 0) return;
  if (residual == nullptr) {
    // No residual: a plain RMSNorm through norm.cu's host template (instantiated there).
    switch (dtype) {
      case DType::kFloat32:
        return launch_rms_norm<float>(static_cast<float*>(out), static_cast<const float*>(x),
                                      static_cast<const float*>(weight), rows, hidden, eps, stream);
      case DType::kFloat16:
        return launch_rms_norm<__half>(static_cast<__half*>(out), static_cast<const __half*>(x),
                                       static_cast<const __half*>(weight), rows, hidden, eps, stream);
      case DType::kBFloat16:
        return launch_rms_norm<__nv_bfloat16>(
            static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(x),
            static_cast<const __nv_bfloat16*>(weight), rows, hidden, eps, stream);
      default: break;
    }
  } else {
    switch (dtype) {
      case DType::kFloat32: return fused_typed<float, float>(out, residual_out, x, residual, weight, rows, hidden, eps, 1.0f, nullptr, stream);
      case DType::kFloat16: return fused_typed<__half, __half>(out, residual_out, x, residual, weight, rows, hidden, eps, 1.0f, nullptr, stream);
      case DType::kBFloat16: return fused_typed<__nv_bfloat16, __nv_bfloat16>(out, residual_out, x, residual, weight, rows, hidden, eps, 1.0f, nullptr, stream);
      default: break;
    }
  }
  throw std::invalid_argument("flashkern: fused_add_rms_norm supports float32, float16, bfloat16");
}

void fused_add_rms_norm_fp8(void* out, void* residual_out, const void* x, const void* residual,
                            const void* weight, int64_t rows, int64_t hidden, float eps,
                            float scale, const float* scale_ptr, DType dtype,
                            cudaStream_t stream) {
  check_shape(rows, hidden, residual, residual_out);
  require(scale_ptr != nullptr || scale > 0.0f, "fused_add_rms_norm_fp8: the scale must be > 0");
  if (rows == 0) return;
  using F8 = __nv_fp8_storage_t;
  switch (dtype) {
    case DType::kFloat32: return fused_typed<float, F8>(out, residual_out, x, residual, weight, rows, hidden, eps, scale, scale_ptr, stream);
    case DType::kFloat16: return fused_typed<__half, F8>(out, residual_out, x, residual, weight, rows, hidden, eps, scale, scale_ptr, stream);
    case DType::kBFloat16: return fused_typed<__nv_bfloat16, F8>(out, residual_out, x, residual, weight, rows, hidden, eps, scale, scale_ptr, stream);
    default: break;
  }
  throw std::invalid_argument("flashkern: fused_add_rms_norm_fp8 supports float32, float16, bfloat16 inputs");
}

}  // namespace fk
