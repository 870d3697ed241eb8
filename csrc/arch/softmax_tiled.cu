// Row softmax. Aligned rows that fit a block's registers take softmax_rows_kernel (below); the
// others are tiled through shared memory: a row within the arch's budget (traits.h) is read once,
// staged as fp32, written once; longer rows stream twice (online max/sum, then write).
#include <mutex>
#include <stdexcept>
#include <vector>

#include "../kernels/common.cuh"
#include "sm_gate.h"
#include "traits.h"

namespace fk {

using ArchTraits = TiledSoftmaxTraits<FK_ARCH>;

__device__ __forceinline__ float fast_exp(float x) {
#if FK_IS_SM100
  // Blackwell path: exp2 with a pre-scaled argument maps to a single MUFU.EX2.
  return exp2f(x * 1.4426950408889634f);
#else
  return __expf(x);
#endif
}

template <typename T>
__global__ void __launch_bounds__(ArchTraits::kThreads) softmax_tiled_kernel(
    T* __restrict__ out, const T* __restrict__ x, int64_t cols, int staged, int vectorised) {
  extern __shared__ float4 smem_raw[];
  float* row_s = reinterpret_cast<float*>(smem_raw);
  __shared__ float scratch[32];
  constexpr int N = Vec<T>::N;
  const T* xr = x + blockIdx.x * cols;
  T* yr = out + blockIdx.x * cols;

  if (staged) {
    float m = -INFINITY;
    if (vectorised) {
      for (int64_t i = threadIdx.x; i < cols / N; i += blockDim.x) {
        const Vec<T> v = Vec<T>::load_stream(xr + i * N);
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const float f = to_float(v.v[e]);
          row_s[i * N + e] = f;
          m = fmaxf(m, f);
        }
      }
    } else {
      for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        const float f = to_float(xr[i]);
        row_s[i] = f;
        m = fmaxf(m, f);
      }
    }
    m = block_max(m, scratch);
    float s = 0.0f;
    // Each thread revisits exactly the elements it staged: no barrier needed before this.
    if (vectorised) {
      for (int64_t i = threadIdx.x; i < cols / N; i += blockDim.x)
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const float p = fast_exp(row_s[i * N + e] - m);
          row_s[i * N + e] = p;
          s += p;
        }
    } else {
      for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        const float p = fast_exp(row_s[i] - m);
        row_s[i] = p;
        s += p;
      }
    }
    const float inv = 1.0f / block_sum(s, scratch);
    if (vectorised) {
      for (int64_t i = threadIdx.x; i < cols / N; i += blockDim.x) {
        Vec<T> o;
#pragma unroll
        for (int e = 0; e < N; ++e) o.v[e] = from_float<T>(row_s[i * N + e] * inv);
        o.store_stream(yr + i * N);
      }
    } else {
      for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = from_float<T>(row_s[i] * inv);
    }
    return;
  }

  // Streaming path: online (max, sum) per thread, merged across the block.
  float m = -INFINITY, s = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float f = to_float(xr[i]);
    if (f > m) {
      s = s * fast_exp(m - f) + 1.0f;
      m = f;
    } else {
      s += fast_exp(f - m);
    }
  }
  const float gm = block_max(m, scratch);
  const float gs = block_sum(m == -INFINITY ? 0.0f : s * fast_exp(m - gm), scratch);
  const float inv = 1.0f / gs;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
    yr[i] = from_float<T>(fast_exp(to_float(xr[i]) - gm) * inv);
}
template __global__ void softmax_tiled_kernel<float>(float*, const float*, int64_t, int, int);
template __global__ void softmax_tiled_kernel<__half>(__half*, const __half*, int64_t, int, int);
template __global__ void softmax_tiled_kernel<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int64_t, int, int);

// Reports the traits this device's code was compiled with.
__global__ void softmax_traits_query_kernel(int* out) {
  out[0] = ArchTraits::kSmemBytes;
  out[1] = ArchTraits::kThreads;
}

// Rows that fit a block's registers (vectorised, at most kRegRowThreads x kMaxRegVpt 16-byte
// vectors: 32768 bf16 / 16384 fp32 columns) skip the shared-memory tile: the row is loaded
// once, packed, with all VPT loads in flight before the first use, and never leaves registers
// (max, sum and the output are three passes over registers, the exponential computed twice
// rather than kept as VPT * N extra fp32 registers). The tiled kernel above still takes
// unaligned / odd rows and rows longer than this, with the same traits and shared memory.
constexpr int kRegRowThreads = 512;
constexpr int kMaxRegVpt = 8;

template <typename T, int VPT>
__global__ void __launch_bounds__(kRegRowThreads) softmax_rows_kernel(T* __restrict__ out,
                                                                     const T* __restrict__ x,
                                                                     int64_t cols) {
  constexpr int N = Vec<T>::N;
  __shared__ float scratch[32];
  const int nvec = static_cast<int>(cols / N), tid = threadIdx.x, nthr = blockDim.x;
  const T* xr = x + blockIdx.x * cols;
  T* yr = out + blockIdx.x * cols;
  Vec<T> v[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (tid + j * nthr < nvec) v[j] = Vec<T>::load_stream(xr + (tid + j * nthr) * N);
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (tid + j * nthr < nvec) {
#pragma unroll
      for (int e = 0; e < N; ++e) m = fmaxf(m, vec_float(v[j], e));
    }
  m = block_max(m, scratch);
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (tid + j * nthr < nvec) {
#pragma unroll
      for (int e = 0; e < N; ++e) s += fast_exp(vec_float(v[j], e) - m);
    }
  const float inv = 1.0f / block_sum(s, scratch);
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int i = tid + j * nthr;
    if (i < nvec) {
      Vec<T> o;
#pragma unroll
      for (int e = 0; e < N; ++e) o.v[e] = from_float<T>(fast_exp(vec_float(v[j], e) - m) * inv);
      o.store_stream(yr + i * N);
    }
  }
}

namespace {

struct TraitsInfo {
  int smem_bytes = 0;
  int threads = 0;
  bool attrs_set[3] = {false, false, false};
};

TraitsInfo& traits_for_device() {
  static std::mutex mu;
  static std::vector<TraitsInfo> cache;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) throw std::runtime_error("flashkern: no CUDA device");
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() <= static_cast<size_t>(dev)) cache.resize(dev + 1);
  TraitsInfo& info = cache[dev];
  if (info.threads == 0) {
    int* d = nullptr;
    int h[2] = {0, 0};
    if (cudaMalloc(&d, sizeof(h)) != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error("flashkern: cudaMalloc failed while querying kernel traits");
    }
    softmax_traits_query_kernel<<<1, 1>>>(d);
    const cudaError_t err = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    cudaFree(d);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error(std::string("flashkern: kernel traits query failed: ") +
                               cudaGetErrorString(err));
    }
    info.smem_bytes = h[0];
    info.threads = h[1];
  }
  return info;
}

template <typename T>
void softmax_typed(void* out, const void* x, int64_t rows, int64_t cols, int slot,
                   cudaStream_t s) {
  TraitsInfo& tr = traits_for_device();
  if (!tr.attrs_set[slot]) {
    // Beyond 48 KB a block gets dynamic shared memory only after opting in. On an arch whose
    // limit is below the traits' budget this fails, and says so.
    const cudaError_t err = cudaFuncSetAttribute(softmax_tiled_kernel<T>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 tr.smem_bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error(std::string("flashkern: softmax_tiled asks for ") +
                               std::to_string(tr.smem_bytes) +
                               " bytes of shared memory per block, which this GPU refuses: " +
                               cudaGetErrorString(err));
    }
    tr.attrs_set[slot] = true;
  }
  constexpr int N = Vec<T>::N;
  T* o = static_cast<T*>(out);
  const T* in = static_cast<const T*>(x);
  const bool staged = cols * static_cast<int64_t>(sizeof(float)) <= tr.smem_bytes;
  const bool vec = aligned16(o) && aligned16(in) && cols % N == 0;
  const int64_t units = vec ? cols / N : cols;
  if (vec && units <= static_cast<int64_t>(kRegRowThreads) * kMaxRegVpt) {
    // Register rows: kMaxRegVpt vectors per thread on the fewest threads that cover the row
    // (8192 bf16 columns: 128 threads x 8 vectors), as the packed norm kernels.
    const int64_t want = ((units + kMaxRegVpt - 1) / kMaxRegVpt + 31) / 32 * 32;
    const int threads = static_cast<int>(want < 32 ? 32 : want);
    const int64_t per = (units + threads - 1) / threads;
    const dim3 grid(static_cast<unsigned>(rows));
    if (per <= 1) softmax_rows_kernel<T, 1><<<grid, threads, 0, s>>>(o, in, cols);
    else if (per <= 2) softmax_rows_kernel<T, 2><<<grid, threads, 0, s>>>(o, in, cols);
    else if (per <= 4) softmax_rows_kernel<T, 4><<<grid, threads, 0, s>>>(o, in, cols);
    else softmax_rows_kernel<T, kMaxRegVpt><<<grid, threads, 0, s>>>(o, in, cols);
    check_launch("softmax");
    return;
  }
  // About 8 units per thread: several blocks per SM overlap their load / reduce / store phases.
  const int64_t want = (units / 8 + 31) / 32 * 32;
  int threads = static_cast<int>(want < tr.threads ? want : tr.threads);
  if (threads < 32) threads = 32;
  const size_t smem = staged ? static_cast<size_t>((cols * sizeof(float) + 15) / 16 * 16) : 0;
  softmax_tiled_kernel<T><<<static_cast<unsigned>(rows), threads, smem, s>>>(
      o, in, cols, staged ? 1 : 0, vec ? 1 : 0);
  check_launch("softmax");
}

}  // namespace

void softmax(void* out, const void* x, int64_t rows, int64_t cols, DType dtype,
             cudaStream_t stream) {
  require(rows >= 0 && cols > 0, "softmax: rows must be >= 0 and cols > 0");
  require(rows <= 0x7fffffff, "softmax: at most 2^31 - 1 rows");
  if (rows == 0) return;
  switch (dtype) {
    case DType::kFloat32: return softmax_typed<float>(out, x, rows, cols, 0, stream);
    case DType::kFloat16: return softmax_typed<__half>(out, x, rows, cols, 1, stream);
    case DType::kBFloat16: return softmax_typed<__nv_bfloat16>(out, x, rows, cols, 2, stream);
    default: throw std::invalid_argument("flashkern: softmax supports float32, float16, bfloat16");
  }
}

int64_t softmax_smem_bytes() { return traits_for_device().smem_bytes; }

}  // namespace fk

// The dynamic shared memory softmax_tiled_kernel requests on this device pass's architecture,
// as a constant in each cubin (`.nv.global.init`): `flashbuild verify` reads it from the binary
// and checks it against the arch's per-block limit without a GPU (recipe: [verify]
// dynamic_smem). extern "C" keeps the symbol name unmangled.
extern "C" __device__ const unsigned int fk_dynamic_smem_softmax_tiled =
    fk::ArchTraits::kSmemBytes;
