// RMSNorm and LayerNorm: one block per row, the row held in registers as 128-bit vectors for
// hidden <= 8 * 256 vectors (8192 fp32 / 16384 fp16), fp32 accumulation, warp-shuffle
// reductions. Other rows (unaligned pointers, odd hidden, very long rows) take a looped kernel.
#include <stdexcept>

#include "common.cuh"
#include "norm.h"
#include "rowplan.cuh"

namespace fk {

// ---- RMSNorm, one block per row -----------------------------------------------------------
// The row stays packed (one 16-byte vector = 4 registers, converted to fp32 where it is used)
// and all VPT loads are issued before the first use. How a row is read -- held in registers,
// or read twice through L2 when it is long -- is rms_row's (rowplan.cuh); the plan (plan_rms)
// puts two vectors on each thread, up to kRmsThreads threads a block.
//
// How the shape was chosen: bench/sweep_memory.cu timed 100+ variants side by side with
// torch.compile of the same op (one process, interleaved rounds, NVIDIA H200, bf16):
//
//   rows x hidden   the earlier plan      this kernel                  vs Inductor's kernel
//   4096 x 4096     64 thr x 8 vec 1.05x  256 x 2, weight with row     1.25x (Inductor 21.8 us)
//   16384 x 4096    64 x 8         1.11x  256 x 2, weight with row     1.15x (Inductor 74.5 us)
//   4096 x 8192     128 x 8        1.02x  512 x 2, row read twice      1.00x (Inductor 35.8 us)
//   16384 x 8192    128 x 8        0.98x  512 x 2, row read twice      1.00x (Inductor 128 us)
//
// At 16384 x 8192 both this kernel and Inductor's move 4.18-4.20 TB/s, above torch's own
// copy_ (4.05 TB/s): level. An 8192 row held in registers was 1.04x at 4096 rows but 0.98x at
// 16384; read twice it is level at both. What did not pay: a persistent grid that prefetches
// its next row (0.88-0.90x at 16384 x 8192), two rows per block, L2::256B prefetch hints,
// plain stores for a row held in registers (0.94x), 1024 threads x 1 vector (0.73x).
template <typename T, int VPT>
__global__ void __launch_bounds__(kRmsThreads) rms_norm_kernel(
    T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight, int64_t hidden,
    float eps) {
  __shared__ float scratch[32];
  const int nvec = static_cast<int>(hidden / Vec<T>::N);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * hidden;
  rms_row<T, VPT>(out + row, x + row, weight, nvec, hidden, eps, scratch);
}
// Instantiated below for 1, 2, 4 and 8 vectors per thread in every dtype (single-line explicit
// instantiations right after the kernel, the form a Windows build has to guard or remove);
// rms_norm_dispatch picks one from plan_rms. Float rows are planned the same way (fp32 4096 is
// 1024 vectors, so it is read twice); unaligned, odd or very long rows take the looped kernel
// below, which reads x twice from global memory.
//
// The reference kernel further down is the readable definition all of these are checked
// against when debugging; it is instantiated and never launched.
template __global__ void rms_norm_kernel<float, 1>(float*, const float*, const float*, int64_t, float);
template __global__ void rms_norm_kernel<float, 2>(float*, const float*, const float*, int64_t, float);
template __global__ void rms_norm_kernel<float, 4>(float*, const float*, const float*, int64_t, float);
template __global__ void rms_norm_kernel<float, 8>(float*, const float*, const float*, int64_t, float);
template __global__ void rms_norm_kernel<__half, 1>(__half*, const __half*, const __half*, int64_t, float);
template __global__ void rms_norm_kernel<__half, 2>(__half*, const __half*, const __half*, int64_t, float);
template __global__ void rms_norm_kernel<__half, 4>(__half*, const __half*, const __half*, int64_t, float);
template __global__ void rms_norm_kernel<__half, 8>(__half*, const __half*, const __half*, int64_t, float);
template __global__ void rms_norm_kernel<__nv_bfloat16, 1>(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int64_t, float);
template __global__ void rms_norm_kernel<__nv_bfloat16, 2>(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int64_t, float);
template __global__ void rms_norm_kernel<__nv_bfloat16, 4>(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int64_t, float);
template __global__ void rms_norm_kernel<__nv_bfloat16, 8>(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int64_t, float);

// ---- RMSNorm, looped (any alignment, any length) ------------------------------------------
template <typename T, bool kVec>
__global__ void rms_norm_loop_kernel(T* __restrict__ out, const T* __restrict__ x,
                                     const T* __restrict__ weight, int64_t hidden, float eps) {
  constexpr int N = kVec ? Vec<T>::N : 1;
  __shared__ float scratch[32];
  const T* xr = x + blockIdx.x * hidden;
  T* yr = out + blockIdx.x * hidden;
  const int64_t units = hidden / N;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < units; i += blockDim.x) {
    if constexpr (kVec) {
      const Vec<T> v = Vec<T>::load(xr + i * N);
#pragma unroll
      for (int e = 0; e < N; ++e) ss += to_float(v.v[e]) * to_float(v.v[e]);
    } else {
      const float f = to_float(xr[i]);
      ss += f * f;
    }
  }
  const float rstd = rsqrtf(block_sum(ss, scratch) / static_cast<float>(hidden) + eps);
  for (int64_t i = threadIdx.x; i < units; i += blockDim.x) {
    if constexpr (kVec) {
      const Vec<T> v = Vec<T>::load(xr + i * N);
      const Vec<T> w = Vec<T>::load(weight + i * N);
      Vec<T> o;
#pragma unroll
      for (int e = 0; e < N; ++e) o.v[e] = from_float<T>(to_float(v.v[e]) * rstd * vec_float(w, e));
      o.store(yr + i * N);
    } else {
      yr[i] = from_float<T>(to_float(xr[i]) * rstd * to_float(weight[i]));
    }
  }
}
template __global__ void rms_norm_loop_kernel<float, true>(float*, const float*, const float*, int64_t, float);
template __global__ void rms_norm_loop_kernel<float, false>(float*, const float*, const float*, int64_t, float);
template __global__ void rms_norm_loop_kernel<__half, true>(__half*, const __half*, const __half*, int64_t, float);
template __global__ void rms_norm_loop_kernel<__half, false>(__half*, const __half*, const __half*, int64_t, float);
template __global__ void rms_norm_loop_kernel<__nv_bfloat16, true>(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int64_t, float);
template __global__ void rms_norm_loop_kernel<__nv_bfloat16, false>(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int64_t, float);

// ---- A reference RMSNorm (one thread per row). Instantiated, never launched: kept as the
// readable definition the fast kernels are checked against when debugging.
template <typename T>
__global__ void rms_norm_reference_kernel(T* __restrict__ out, const T* __restrict__ x,
                                          const T* __restrict__ weight, int64_t rows,
                                          int64_t hidden, float eps) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  float ss = 0.0f;
  for (int64_t c = 0; c < hidden; ++c) ss += to_float(x[r * hidden + c]) * to_float(x[r * hidden + c]);
  const float rstd = rsqrtf(ss / static_cast<float>(hidden) + eps);
  for (int64_t c = 0; c < hidden; ++c)
    out[r * hidden + c] = from_float<T>(to_float(x[r * hidden + c]) * rstd * to_float(weight[c]));
}
template __global__ void rms_norm_reference_kernel<float>(float* out, const float* x, const float* weight, int64_t rows, int64_t hidden, float eps);

// ---- LayerNorm ------------------------------------------------------------------------------
// Mean first, then the centred sum of squares from the same registers: no E[x^2] - E[x]^2
// cancellation. The row stays packed and loaded up front, as in rms_norm_kernel.
template <typename T, int VPT, bool kAffine>
__global__ void __launch_bounds__(kRowThreads) layer_norm_kernel(
    T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
    const T* __restrict__ bias, int64_t hidden, float eps) {
  constexpr int N = Vec<T>::N;
  __shared__ float scratch[32];
  const int nvec = static_cast<int>(hidden / N), tid = threadIdx.x, nthr = blockDim.x;
  const T* xr = x + blockIdx.x * hidden;
  T* yr = out + blockIdx.x * hidden;
  Vec<T> v[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (tid + j * nthr < nvec) v[j] = Vec<T>::load_stream(xr + (tid + j * nthr) * N);
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (tid + j * nthr < nvec) {
#pragma unroll
      for (int e = 0; e < N; ++e) s += vec_float(v[j], e);
    }
  const float mean = block_sum(s, scratch) / static_cast<float>(hidden);
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (tid + j * nthr < nvec) {
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float d = vec_float(v[j], e) - mean;
        ss += d * d;
      }
    }
  const float rstd = rsqrtf(block_sum(ss, scratch) / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int i = tid + j * nthr;
    if (i < nvec) {
      Vec<T> o;
      if constexpr (kAffine) {
        const Vec<T> w = Vec<T>::load(weight + i * N);
        const Vec<T> b = Vec<T>::load(bias + i * N);
#pragma unroll
        for (int e = 0; e < N; ++e)
          o.v[e] = from_float<T>((vec_float(v[j], e) - mean) * rstd * vec_float(w, e) + vec_float(b, e));
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) o.v[e] = from_float<T>((vec_float(v[j], e) - mean) * rstd);
      }
      o.store_stream(yr + i * N);
    }
  }
}

template <typename T, bool kAffine>
__global__ void layer_norm_loop_kernel(T* __restrict__ out, const T* __restrict__ x,
                                       const T* __restrict__ weight,
                                       const T* __restrict__ bias, int64_t hidden, float eps) {
  __shared__ float scratch[32];
  const T* xr = x + blockIdx.x * hidden;
  T* yr = out + blockIdx.x * hidden;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) s += to_float(xr[i]);
  const float mean = block_sum(s, scratch) / static_cast<float>(hidden);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float d = to_float(xr[i]) - mean;
    ss += d * d;
  }
  const float rstd = rsqrtf(block_sum(ss, scratch) / static_cast<float>(hidden) + eps);
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float y = (to_float(xr[i]) - mean) * rstd;
    if constexpr (kAffine) y = y * to_float(weight[i]) + to_float(bias[i]);
    yr[i] = from_float<T>(y);
  }
}
template __global__ void layer_norm_loop_kernel<float, true>(float*, const float*, const float*, const float*, int64_t, float);
template __global__ void layer_norm_loop_kernel<float, false>(float*, const float*, const float*, const float*, int64_t, float);

// ---- launchers --------------------------------------------------------------------------------
namespace {

template <typename T>
void rms_norm_dispatch(T* out, const T* x, const T* weight, int64_t rows, int64_t hidden,
                       float eps, cudaStream_t stream) {
  require(rows >= 0 && hidden > 0, "rms_norm: rows must be >= 0 and hidden > 0");
  require(rows <= 0x7fffffff, "rms_norm: at most 2^31 - 1 rows");
  if (rows == 0) return;
  // Two vectors a thread, up to kRmsThreads threads (plan_rms; the measurements are above
  // rms_norm_kernel): bf16 4096 runs as 256 threads x 2 vectors, 8192 as 512 x 2 (read twice).
  // Unaligned, odd or longer rows take the looped kernel.
  const RowPlan p = plan_rms<T>(hidden, aligned16(out) && aligned16(x) && aligned16(weight));
  const dim3 grid(static_cast<unsigned>(rows));
  if (!p.vectorised) {
    rms_norm_loop_kernel<T, false><<<grid, p.threads, 0, stream>>>(out, x, weight, hidden, eps);
  } else {
    switch (p.vpt) {
      case 1: rms_norm_kernel<T, 1><<<grid, p.threads, 0, stream>>>(out, x, weight, hidden, eps); break;
      case 2: rms_norm_kernel<T, 2><<<grid, p.threads, 0, stream>>>(out, x, weight, hidden, eps); break;
      case 4: rms_norm_kernel<T, 4><<<grid, p.threads, 0, stream>>>(out, x, weight, hidden, eps); break;
      case 8: rms_norm_kernel<T, 8><<<grid, p.threads, 0, stream>>>(out, x, weight, hidden, eps); break;
      default: rms_norm_loop_kernel<T, true><<<grid, p.threads, 0, stream>>>(out, x, weight, hidden, eps); break;
    }
  }
  check_launch("rms_norm");
}

template <typename T, bool kAffine>
void layer_norm_dispatch(T* out, const T* x, const T* weight, const T* bias, int64_t rows,
                         int64_t hidden, float eps, cudaStream_t stream) {
  const bool aligned = aligned16(out) && aligned16(x) &&
                       (!kAffine || (aligned16(weight) && aligned16(bias)));
  // Planned as rms_norm. The looped kernel reads x three times from global memory: it is only
  // for unaligned, odd-length or very long rows.
  const RowPlan p = plan_row_packed<T>(hidden, aligned);
  const dim3 grid(static_cast<unsigned>(rows));
  switch (p.vectorised ? p.vpt : 0) {
    case 1: layer_norm_kernel<T, 1, kAffine><<<grid, p.threads, 0, stream>>>(out, x, weight, bias, hidden, eps); break;
    case 2: layer_norm_kernel<T, 2, kAffine><<<grid, p.threads, 0, stream>>>(out, x, weight, bias, hidden, eps); break;
    case 4: layer_norm_kernel<T, 4, kAffine><<<grid, p.threads, 0, stream>>>(out, x, weight, bias, hidden, eps); break;
    case 8: layer_norm_kernel<T, 8, kAffine><<<grid, p.threads, 0, stream>>>(out, x, weight, bias, hidden, eps); break;
    default: layer_norm_loop_kernel<T, kAffine><<<grid, p.threads, 0, stream>>>(out, x, weight, bias, hidden, eps); break;
  }
  check_launch("layer_norm");
}

template <typename T>
void layer_norm_typed(void* out, const void* x, const void* weight, const void* bias,
                      int64_t rows, int64_t hidden, float eps, cudaStream_t stream) {
  if (weight != nullptr) {
    layer_norm_dispatch<T, true>(static_cast<T*>(out), static_cast<const T*>(x),
                                 static_cast<const T*>(weight), static_cast<const T*>(bias),
                                 rows, hidden, eps, stream);
  } else {
    layer_norm_dispatch<T, false>(static_cast<T*>(out), static_cast<const T*>(x), nullptr,
                                  nullptr, rows, hidden, eps, stream);
  }
}

}  // namespace

// The host template other translation units call (declared in norm.h).
template <typename T>
void launch_rms_norm(T* out, const T* x, const T* weight, int64_t rows, int64_t hidden,
                     float eps, cudaStream_t stream) {
  rms_norm_dispatch<T>(out, x, weight, rows, hidden, eps, stream);
}
template void launch_rms_norm<float>(float*, const float*, const float*, int64_t, int64_t, float, cudaStream_t);
template void launch_rms_norm<__half>(__half*, const __half*, const __half*, int64_t, int64_t, float, cudaStream_t);
template void launch_rms_norm<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int64_t, int64_t, float, cudaStream_t);

void rms_norm(void* out, const void* x, const void* weight, int64_t rows, int64_t hidden,
              float eps, DType dtype, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat32:
      return rms_norm_dispatch<float>(static_cast<float*>(out), static_cast<const float*>(x),
                                      static_cast<const float*>(weight), rows, hidden, eps, stream);
    case DType::kFloat16:
      return rms_norm_dispatch<__half>(static_cast<__half*>(out), static_cast<const __half*>(x),
                                       static_cast<const __half*>(weight), rows, hidden, eps, stream);
    case DType::kBFloat16:
      return rms_norm_dispatch<__nv_bfloat16>(
          static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(x),
          static_cast<const __nv_bfloat16*>(weight), rows, hidden, eps, stream);
    default:
      throw std::invalid_argument("flashkern: rms_norm supports float32, float16, bfloat16");
  }
}

void layer_norm(void* out, const void* x, const void* weight, const void* bias, int64_t rows,
                int64_t hidden, float eps, DType dtype, cudaStream_t stream) {
  require(rows >= 0 && hidden > 0, "layer_norm: rows must be >= 0 and hidden > 0");
  require(rows <= 0x7fffffff, "layer_norm: at most 2^31 - 1 rows");
  require((weight == nullptr) == (bias == nullptr),
          "layer_norm: pass both weight and bias (affine) or neither");
  if (rows == 0) return;
  switch (dtype) {
    case DType::kFloat32: return layer_norm_typed<float>(out, x, weight, bias, rows, hidden, eps, stream);
    case DType::kFloat16: return layer_norm_typed<__half>(out, x, weight, bias, rows, hidden, eps, stream);
    case DType::kBFloat16: return layer_norm_typed<__nv_bfloat16>(out, x, weight, bias, rows, hidden, eps, stream);
    default:
      throw std::invalid_argument("flashkern: layer_norm supports float32, float16, bfloat16");
  }
}

}  // namespace fk
