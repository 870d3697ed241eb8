// GELU (tanh approximation) and SiLU, out of place (restrict pointers) and in place.
#include <stdexcept>

#include "common.cuh"

namespace fk {

constexpr int kActThreads = 256;

struct GeluTanh {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as torch's approximate="tanh".
  __device__ __forceinline__ float operator()(float x) const {
    const float k0 = 0.7978845608028654f;
    const float k1 = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(k0 * (x + k1 * x * x * x)));
  }
};

struct Silu {
  __device__ __forceinline__ float operator()(float x) const { return x / (1.0f + __expf(-x)); }
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
      for (int e = 0; e < N; ++e) o.v[e] = from_float<T>(op(to_float(v.v[e])));
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

template <typename T>
void act_typed(Act act, void* out, const void* x, int64_t n, cudaStream_t s) {
  T* o = static_cast<T*>(out);
  const T* in = static_cast<const T*>(x);
  const bool vec = aligned16(o) && aligned16(in);
  const int64_t work = vec && n / Vec<T>::N > 0 ? n / Vec<T>::N : n;
  const unsigned grid = grid_for(work, kActThreads);
  const bool inplace = out == x;
  if (act == Act::kGeluTanh) {
    if (inplace) gelu_tanh_inplace_kernel<T><<<grid, kActThreads, 0, s>>>(o, n, vec);
    else gelu_tanh_kernel<T><<<grid, kActThreads, 0, s>>>(o, in, n, vec);
  } else {
    if (inplace) silu_inplace_kernel<T><<<grid, kActThreads, 0, s>>>(o, n, vec);
    else silu_kernel<T><<<grid, kActThreads, 0, s>>>(o, in, n, vec);
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
