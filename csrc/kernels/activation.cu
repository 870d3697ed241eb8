// GELU (tanh approximation) and SiLU, out of place (restrict pointers) and in place.
#include <stdexcept>

#include "common.cuh"

namespace fk {

constexpr int kActThreads = 128;
// One 16-byte vector per thread, a grid that covers the tensor (grid_cover; measured there).
struct GeluTanh {
  // torch's approximate="tanh": 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), written
  // as x * sigmoid(2u) = x / (1 + exp(-2u)): one MUFU.EX2 + one MUFU.RCP instead of tanhf's
  // ~20 instructions per element (fewer issue slots per byte; same result within fp32 rounding).
  __device__ __forceinline__ float operator()(float x) const {
    return __fdividef(x, 1.0f + __expf(-x * (1.5957691216057308f + 0.0713548162726f * x * x)));
  }
};

struct Silu {
  __device__ __forceinline__ float operator()(float x) const { return __fdividef(x, 1.0f + __expf(-x)); }
};

template <typename T, typename Op>
__device__ __forceinline__ void act_body(T* out, const T* x, int64_t n, bool vectorised) {
  constexpr int N = Vec<T>::N;
  const Op op{};
  const int64_t stride = grid_threads();
  int64_t done = 0;
  if (vectorised) {
    const int64_t nvec = n / N;
    for (int64_t i = global_thread(); i < nvec; i += stride) {
      const Vec<T> v = Vec<T>::load_stream(x + i * N);
      Vec<T> o;
#pragma unroll
      for (int e = 0; e < N; ++e) o.v[e] = from_float<T>(op(vec_float(v, e)));
      o.store_stream(out + i * N);
    }
    done = nvec * N;
  }
  for (int64_t i = done + global_thread(); i < n; i += stride) out[i] = from_float<T>(op(to_float(x[i])));
}

template <typename T>
__global__ void __launch_bounds__(kActThreads) gelu_tanh_kernel(T* __restrict__ out,
                                                                const T* __restrict__ x,
                                                                int64_t n, bool vectorised) {
  act_body<T, GeluTanh>(out, x, n, vectorised);
}
template __global__ void gelu_tanh_kernel<float>(
    float* out, const float* x, int64_t n, bool vectorised);
template __global__ void gelu_tanh_kernel<__half>(
    __half* out, const __half* x, int64_t n, bool vectorised);
template __global__ void gelu_tanh_kernel<__nv_bfloat16>(
    __nv_bfloat16* out,
    const __nv_bfloat16* x,
    int64_t n,
    bool vectorised);

// In place: the same buffer is read and written, so no __restrict__.
template <typename T>
__global__ void __launch_bounds__(kActThreads) gelu_tanh_inplace_kernel(T* x, int64_t n,
                                                                        bool vectorised) {
  act_body<T, GeluTanh>(x, x, n, vectorised);
}
template __global__ void gelu_tanh_inplace_kernel<float>(
    float*, int64_t, bool);
template __global__ void gelu_tanh_inplace_kernel<__half>(
    __half*, int64_t, bool);
template __global__ void gelu_tanh_inplace_kernel<__nv_bfloat16>(
    __nv_bfloat16*, int64_t, bool);

template <typename T>
__global__ void __launch_bounds__(kActThreads) silu_kernel(T* __restrict__ out,
                                                           const T* __restrict__ x, int64_t n,
                                                           bool vectorised) {
  act_body<T, Silu>(out, x, n, vectorised);
}
template __global__ void silu_kernel<float>(float* out,
                                            const float* x,
                                            int64_t n,
                                            bool vectorised);
template __global__ void silu_kernel<__half>(__half* out,
                                             const __half* x,
                                             int64_t n,
                                             bool vectorised);
template __global__ void silu_kernel<__nv_bfloat16>(__nv_bfloat16* out,
                                                    const __nv_bfloat16* x,
                                                    int64_t n,
                                                    bool vectorised);

template <typename T>
__global__ void __launch_bounds__(kActThreads) silu_inplace_kernel(T* x, int64_t n,
                                                                   bool vectorised) {
  act_body<T, Silu>(x, x, n, vectorised);
}
template __global__ void silu_inplace_kernel<float>(
    float*, int64_t, bool);
template __global__ void silu_inplace_kernel<__half>(
    __half*, int64_t, bool);
template __global__ void silu_inplace_kernel<__nv_bfloat16>(
    __nv_bfloat16*, int64_t, bool);

namespace {

enum class Act { kGeluTanh, kSilu };

// Launches `kernel` on a grid that covers `work` (one 16-byte vector a thread). The kernels
// keep their grid-stride loops, so any grid is correct; a single resident wave that strides was
// measured 10 % slower on an H200 (bench/sweep_memory.cu).
template <typename... Params, typename... Args>
void launch_cover(void (*kernel)(Params...), int64_t work, cudaStream_t s, Args... args) {
  kernel<<<grid_cover(work, kActThreads), kActThreads, 0, s>>>(args...);
}

template <typename T>
void act_typed(Act act, void* out, const void* x, int64_t n, cudaStream_t s) {
  T* o = static_cast<T*>(out);
  const T* in = static_cast<const T*>(x);
  const bool vec = aligned16(o) && aligned16(in);
  const int64_t nvec = n / Vec<T>::N;
  const int64_t work = vec && nvec > 0 ? nvec : n;
  const bool inplace = out == x;
  if (act == Act::kGeluTanh) {
    if (inplace) launch_cover(gelu_tanh_inplace_kernel<T>, work, s, o, n, vec);
    else launch_cover(gelu_tanh_kernel<T>, work, s, o, in, n, vec);
  } else {
    if (inplace) launch_cover(silu_inplace_kernel<T>, work, s, o, n, vec);
    else launch_cover(silu_kernel<T>, work, s, o, in, n, vec);
  }
  check_launch(act == Act::kGeluTanh ? "gelu_tanh" : "silu");
}

void act_dispatch(Act act, void* out, const void* x, int64_t n, DType dtype, cudaStream_t s) {
  require(n >= 0, "activation: n must be >= 0");
  if (n == 0) return;
  switch (dtype) {
    case DType::kFloat32: return act_typed<float>(act, out, x, n, s);
    case DType::kFloat16: return act_typed<__half>(act, out, x, n, s);
    case DType::kBFloat16: return act_typed<__nv_bfloat16>(act, out, x, n, s);
    default: throw std::invalid_argument("flashkern: activations support float32, float16, bfloat16");
  }
}

}  // namespace

void gelu_tanh(void* out, const void* x, int64_t n, DType dtype, cudaStream_t stream) {
  act_dispatch(Act::kGeluTanh, out, x, n, dtype, stream);
}

void silu(void* out, const void* x, int64_t n, DType dtype, cudaStream_t stream) {
  act_dispatch(Act::kSilu, out, x, n, dtype, stream);
}

}  // namespace fk
