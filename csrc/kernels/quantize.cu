// FP8 E4M3 quantize / dequantize with a per-tensor scale, read either from a host scalar or
// from a device pointer (so a scale computed on the GPU never round-trips through the host).
// Convention (torch's): q = saturate_e4m3(x / scale), x' = float(q) * scale.
#include <stdexcept>

#include "common.cuh"

namespace fk {

constexpr int kQThreads = 256, kDqUnroll = 8;  // dequantize: groups per thread per step

__device__ __forceinline__ float load_scale(float scale, const float* scale_ptr) {
  return scale_ptr != nullptr ? __ldg(scale_ptr) : scale;
}

// Each group: one 16-byte vector of T in, N E4M3 bytes out.
template <typename T>
__global__ void __launch_bounds__(kQThreads) quantize_fp8_kernel(
    __nv_fp8_storage_t* __restrict__ out, const T* __restrict__ x, int64_t n, float scale,
    const float* __restrict__ scale_ptr, bool vectorised) {
  constexpr int N = Vec<T>::N;
  const float inv = 1.0f / load_scale(scale, scale_ptr);
  const int64_t stride = grid_threads();
  int64_t done = 0;
  if (vectorised) {
    const int64_t nvec = n / N;
    for (int64_t i = global_thread(); i < nvec; i += stride) {
      const Vec<T> v = Vec<T>::load_stream(x + i * N);
      Pack<__nv_fp8_storage_t, N> q;
#pragma unroll
      for (int e = 0; e < N; ++e) q.v[e] = to_fp8_e4m3(to_float(v.v[e]) * inv);
      q.store(out + i * N);
    }
    done = nvec * N;
  }
  for (int64_t i = done + global_thread(); i < n; i += stride) out[i] = to_fp8_e4m3(to_float(x[i]) * inv);
}

// Each group: G = 16 / sizeof(T) E4M3 bytes in, one 16-byte vector of T out (every warp store
// one contiguous 512-byte span); kDqUnroll groups per thread per step, all loads issued first.
template <typename T>
__global__ void __launch_bounds__(kQThreads) dequantize_fp8_kernel(
    T* __restrict__ out, const __nv_fp8_storage_t* __restrict__ q, int64_t n, float scale,
    const float* __restrict__ scale_ptr, bool vectorised) {
  constexpr int G = Vec<T>::N;
  const float s = load_scale(scale, scale_ptr);
  const int64_t stride = grid_threads(), ng = vectorised ? n / G : 0;
  for (int64_t base = global_thread(); base < ng; base += kDqUnroll * stride) {
    Pack<__nv_fp8_storage_t, G> p[kDqUnroll];
#pragma unroll
    for (int u = 0; u < kDqUnroll; ++u)
      if (base + u * stride < ng) p[u] = Pack<__nv_fp8_storage_t, G>::load(q + (base + u * stride) * G);
#pragma unroll
    for (int u = 0; u < kDqUnroll; ++u) {
      if (base + u * stride >= ng) continue;
      Vec<T> o;
#pragma unroll
      for (int e = 0; e < G; e += 4) {  // whole 32-bit words: 4 E4M3 values, 2 cvt instructions
        float f[4];
        fp8x4_e4m3_to_float(reinterpret_cast<const unsigned*>(p[u].v)[e / 4], f);
        for (int k = 0; k < 4; ++k) o.v[e + k] = from_float<T>(f[k] * s);
      }
      o.store_stream(out + (base + u * stride) * G);
    }
  }
  for (int64_t i = ng * G + global_thread(); i < n; i += stride) out[i] = from_float<T>(fp8_e4m3_to_float(q[i]) * s);
}

// Instantiations inside a conditional block: bf16 FP8 paths are only declared when the CUDA
// front end is new enough to have cuda_fp8.h (12.x and later).
#if defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 12
template __global__ void quantize_fp8_kernel<float>(__nv_fp8_storage_t*, const float*, int64_t, float, const float*, bool);
template __global__ void quantize_fp8_kernel<__half>(__nv_fp8_storage_t*, const __half*, int64_t, float, const float*, bool);
template __global__ void quantize_fp8_kernel<__nv_bfloat16>(__nv_fp8_storage_t*, const __nv_bfloat16*, int64_t, float, const float*, bool);
template __global__ void dequantize_fp8_kernel<float>(float*, const __nv_fp8_storage_t*, int64_t, float, const float*, bool);
template __global__ void dequantize_fp8_kernel<__half>(__half*, const __nv_fp8_storage_t*, int64_t, float, const float*, bool);
template __global__ void dequantize_fp8_kernel<__nv_bfloat16>(__nv_bfloat16*, const __nv_fp8_storage_t*, int64_t, float, const float*, bool);
#endif

namespace {

template <typename T>
void quantize_typed(void* out, const void* x, int64_t n, float scale, const float* scale_ptr,
                    cudaStream_t s) {
  constexpr int N = Vec<T>::N;
  auto* o = static_cast<__nv_fp8_storage_t*>(out);
  const T* in = static_cast<const T*>(x);
  // The fp8 side stores N bytes per vector: it must be N-byte aligned.
  const bool vec = aligned16(in) && (reinterpret_cast<uintptr_t>(o) % N) == 0;
  const int64_t work = vec && n / N > 0 ? n / N : n;
  quantize_fp8_kernel<T><<<grid_for(work, kQThreads), kQThreads, 0, s>>>(o, in, n, scale,
                                                                          scale_ptr, vec);
  check_launch("quantize_fp8");
}

template <typename T>
void dequantize_typed(void* out, const void* q, int64_t n, float scale,
                      const float* scale_ptr, cudaStream_t s) {
  T* o = static_cast<T*>(out);
  const auto* in = static_cast<const __nv_fp8_storage_t*>(q);
  constexpr int G = Vec<T>::N;
  // The fp8 side loads G bytes per group: it must be G-byte aligned.
  const bool vec = aligned16(o) && (reinterpret_cast<uintptr_t>(in) % G) == 0;
  const int64_t groups = n / G;
  const int64_t work = vec && groups > 0 ? (groups + kDqUnroll - 1) / kDqUnroll : n;
  // One resident wave of blocks: the grid-stride loop then runs evenly on every SM.
  const int per_sm = resident_blocks_per_sm(
      reinterpret_cast<const void*>(dequantize_fp8_kernel<T>), kQThreads);
  dequantize_fp8_kernel<T><<<grid_for(work, kQThreads, per_sm), kQThreads, 0, s>>>(
      o, in, n, scale, scale_ptr, vec);
  check_launch("dequantize_fp8");
}

void check_scale(float scale, const float* scale_ptr) {
  require(scale_ptr != nullptr || scale > 0.0f, "fp8: the scale must be > 0");
}

}  // namespace

void quantize_fp8(void* out, const void* x, int64_t n, float scale, const float* scale_ptr,
                  DType dtype, cudaStream_t stream) {
  require(n >= 0, "quantize_fp8: n must be >= 0");
  check_scale(scale, scale_ptr);
  if (n == 0) return;
  switch (dtype) {
    case DType::kFloat32: return quantize_typed<float>(out, x, n, scale, scale_ptr, stream);
    case DType::kFloat16: return quantize_typed<__half>(out, x, n, scale, scale_ptr, stream);
    case DType::kBFloat16: return quantize_typed<__nv_bfloat16>(out, x, n, scale, scale_ptr, stream);
    default: throw std::invalid_argument("flashkern: quantize_fp8 input must be float32, float16 or bfloat16");
  }
}

void dequantize_fp8(void* out, const void* q, int64_t n, float scale, const float* scale_ptr,
                    DType dtype, cudaStream_t stream) {
  require(n >= 0, "dequantize_fp8: n must be >= 0");
  check_scale(scale, scale_ptr);
  if (n == 0) return;
  switch (dtype) {
    case DType::kFloat32: return dequantize_typed<float>(out, q, n, scale, scale_ptr, stream);
    case DType::kFloat16: return dequantize_typed<__half>(out, q, n, scale, scale_ptr, stream);
    case DType::kBFloat16: return dequantize_typed<__nv_bfloat16>(out, q, n, scale, scale_ptr, stream);
    default: throw std::invalid_argument("flashkern: dequantize_fp8 output must be float32, float16 or bfloat16");
  }
}

}  // namespace fk
