// Shared device helpers for the flashkern kernels: dtype tags, 128-bit vector access,
// fp32 conversions and warp/block reductions.
#pragma once

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "api.h"

namespace fk {

// Host helpers shared by the launchers.
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Blocks for a grid-stride loop over `work` items: enough to fill every SM several times,
// never more than the work needs.
inline unsigned grid_for(int64_t work, int threads, int blocks_per_sm = 8) {
  const int64_t need = (work + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(current_sm_count()) * blocks_per_sm;
  const int64_t g = need < cap ? need : cap;
  return static_cast<unsigned>(g > 0 ? g : 1);
}

// Largest finite E4M3 value; quantisation saturates to it (__NV_SATFINITE).
constexpr float kFp8E4M3Max = 448.0f;

// 128-bit accesses: the unit every memory-bound kernel here loads and stores.
constexpr int kVecBytes = 16;

template <typename T>
struct VecWidth {
  static constexpr int value = kVecBytes / static_cast<int>(sizeof(T));
};

// fp32 conversions. The primary template is a definition; the explicit specialisations below
// are `template<>` declarations a source transform must leave alone.
template <typename T>
__device__ __forceinline__ float to_float(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float to_float<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// A 16-byte vector of T held in registers. `get<I>()` is a member template, so generic code
// calls it as `v.template get<I>()` -- a decoy that is not an explicit instantiation.
template <typename T>
struct alignas(kVecBytes) Vec {
  static constexpr int N = VecWidth<T>::value;
  T v[N];

  template <int I>
  __device__ __forceinline__ T get() const {
    return v[I];
  }

  __device__ __forceinline__ static Vec load(const T* p) {
    Vec out;
    *reinterpret_cast<uint4*>(&out) = __ldg(reinterpret_cast<const uint4*>(p));
    return out;
  }
  // Streaming load for data read exactly once (evict-first keeps L2 for what is reused).
  __device__ __forceinline__ static Vec load_stream(const T* p) {
    Vec out;
    *reinterpret_cast<uint4*>(&out) = __ldcs(reinterpret_cast<const uint4*>(p));
    return out;
  }
  __device__ __forceinline__ void store(T* p) const {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(this);
  }
  __device__ __forceinline__ void store_stream(T* p) const {
    __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(this));
  }
};

template <typename T>
__device__ __forceinline__ T first_lane_value(const Vec<T>& x) {
  return x.template get<0>();
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds >= 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  if (nwarps == 1) return v;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  if (nwarps == 1) return v;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// Saturating fp32 -> E4M3 (NaN stays NaN, +-inf and overflow clamp to +-448).
__device__ __forceinline__ __nv_fp8_storage_t to_fp8_e4m3(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float fp8_e4m3_to_float(__nv_fp8_storage_t v) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(v, __NV_E4M3);
  return __half2float(__half(h));
}

}  // namespace fk

namespace fk {

// G consecutive elements moved with the widest accesses that their byte size allows
// (4, 8, 16 or a multiple of 16 bytes). Used where input and output types differ in size.
template <typename T, int G>
struct Pack {
  static constexpr int kBytes = G * static_cast<int>(sizeof(T));
  static_assert(kBytes % 4 == 0, "a Pack moves whole 32-bit words");
  T v[G];

  __device__ __forceinline__ static Pack load(const T* p) {
    Pack out;
    if constexpr (kBytes % 16 == 0) {
#pragma unroll
      for (int i = 0; i < kBytes / 16; ++i)
        reinterpret_cast<uint4*>(out.v)[i] = __ldcs(reinterpret_cast<const uint4*>(p) + i);
    } else if constexpr (kBytes == 8) {
      *reinterpret_cast<uint2*>(out.v) = __ldcs(reinterpret_cast<const uint2*>(p));
    } else {
      *reinterpret_cast<unsigned*>(out.v) = __ldcs(reinterpret_cast<const unsigned*>(p));
    }
    return out;
  }
  __device__ __forceinline__ void store(T* p) const {
    if constexpr (kBytes % 16 == 0) {
#pragma unroll
      for (int i = 0; i < kBytes / 16; ++i)
        __stcs(reinterpret_cast<uint4*>(p) + i, reinterpret_cast<const uint4*>(v)[i]);
    } else if constexpr (kBytes == 8) {
      __stcs(reinterpret_cast<uint2*>(p), *reinterpret_cast<const uint2*>(v));
    } else {
      __stcs(reinterpret_cast<unsigned*>(p), *reinterpret_cast<const unsigned*>(v));
    }
  }
};

// Grid-stride index helpers.
__device__ __forceinline__ int64_t global_thread() {
  return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

}  // namespace fk

// Host-side occupancy cache (kept at the end of this header so that the line numbers of the
// decoys above, which csrc/README.md cites, stay put).
#include <mutex>
#include <vector>

namespace fk {

// Blocks of `kernel` (a launched __global__ function) that are resident on one SM at
// `threads` per block, from the occupancy calculator; cached per (kernel, threads, device).
// Grid-stride kernels size their grid to exactly this many blocks per SM: one full wave. A
// larger grid than fits leaves a partial second wave (SMs idle at the end), a smaller one
// leaves loads that could be in flight unissued.
inline int resident_blocks_per_sm(const void* kernel, int threads) {
  struct Entry {
    const void* kernel;
    int threads;
    int device;
    int blocks;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : cache)
    if (e.kernel == kernel && e.threads == threads && e.device == dev) return e.blocks;
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0) != cudaSuccess) {
    cudaGetLastError();
    blocks = 1;
  }
  if (blocks < 1) blocks = 1;
  cache.push_back(Entry{kernel, threads, dev, blocks});
  return blocks;
}

}  // namespace fk

namespace fk {

// Four E4M3 bytes (one 32-bit word, lowest byte first) to fp32 through two
// cvt.rn.f16x2.e4m3x2 (exact: every E4M3 value is an fp16). Working on whole words keeps a
// group of bytes in a few registers instead of one register per byte.
__device__ __forceinline__ void fp8x4_e4m3_to_float(unsigned w, float* f) {
  const float2 lo = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), __NV_E4M3)));
  const float2 hi = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3)));
  f[0] = lo.x;
  f[1] = lo.y;
  f[2] = hi.x;
  f[3] = hi.y;
}

}  // namespace fk

namespace fk {

// Element e of a 16-byte vector as fp32. For bf16 this reads the containing 32-bit word and
// shifts / masks it (bf16 is the top half of an fp32), so a packed row stays 4 registers per
// vector: element-wise 16-bit access makes the compiler split every pair into two registers.
template <typename T>
__device__ __forceinline__ float vec_float(const Vec<T>& v, int e) {
  return to_float(v.v[e]);
}
template <>
__device__ __forceinline__ float vec_float<__nv_bfloat16>(const Vec<__nv_bfloat16>& v, int e) {
  const unsigned w = reinterpret_cast<const unsigned*>(v.v)[e >> 1];
  return __uint_as_float((e & 1) != 0 ? (w & 0xffff0000u) : (w << 16));
}

}  // namespace fk

namespace fk {

// Blocks to cover `work` items at `threads` per block: one item per thread, no grid-stride
// steps. For element-wise kernels this beat a single resident wave that strides (bf16 gelu_tanh
// on an H200: 101 % of torch's copy_ bandwidth against 87-91 %; bench/sweep_memory.cu).
inline unsigned grid_cover(int64_t work, int threads) {
  const int64_t need = (work + threads - 1) / threads;
  const int64_t cap = 0x7fffffff;
  return static_cast<unsigned>(need < 1 ? 1 : need < cap ? need : cap);
}

}  // namespace fk
