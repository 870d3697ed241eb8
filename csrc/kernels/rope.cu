// Rotary position embedding, rotate-half form (GPT-NeoX / Llama), in place on Q and K.
//   q: [tokens, heads_q, head_dim], k: [tokens, heads_k, head_dim], contiguous
//   cos, sin: fp32 [tokens, head_dim / 2]
//   for i < head_dim/2:  x1 = x[i], x2 = x[i + head_dim/2]
//     x[i]              = x1 * cos[t, i] - x2 * sin[t, i]
//     x[i + head_dim/2] = x2 * cos[t, i] + x1 * sin[t, i]
#include <stdexcept>

#include "common.cuh"

namespace fk {

constexpr int kRopeThreads = 256;

// One work item = one vector of N pairs of one (token, head). `kVec` needs
// (head_dim / 2) % N == 0 and 16-byte aligned q/k.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(
    T* __restrict__ q, T* __restrict__ k, const float* __restrict__ cos,
    const float* __restrict__ sin, int64_t tokens, int heads_q, int heads_k, int head_dim) {
  constexpr int N = kVec ? Vec<T>::N : 1;
  const int half = head_dim / 2;
  const int chunks = half / N;
  const int heads = heads_q + heads_k;
  const int64_t items = tokens * heads * chunks;
  for (int64_t it = global_thread(); it < items; it += grid_threads()) {
    const int c = static_cast<int>(it % chunks);
    const int64_t th = it / chunks;
    const int h = static_cast<int>(th % heads);
    const int64_t t = th / heads;
    T* base = h < heads_q ? q + (t * heads_q + h) * head_dim
                          : k + (t * heads_k + (h - heads_q)) * head_dim;
    const int i0 = c * N;
    const float* cr = cos + t * half + i0;
    const float* sr = sin + t * half + i0;
    if constexpr (kVec) {
      const Vec<T> a = Vec<T>::load(base + i0);
      const Vec<T> b = Vec<T>::load(base + half + i0);
      Vec<T> oa, ob;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float x1 = to_float(a.v[e]), x2 = to_float(b.v[e]);
        const float cs = __ldg(cr + e), sn = __ldg(sr + e);
        oa.v[e] = from_float<T>(x1 * cs - x2 * sn);
        ob.v[e] = from_float<T>(x2 * cs + x1 * sn);
      }
      oa.store(base + i0);
      ob.store(base + half + i0);
    } else {
      const float x1 = to_float(base[i0]), x2 = to_float(base[half + i0]);
      const float cs = __ldg(cr), sn = __ldg(sr);
      base[i0] = from_float<T>(x1 * cs - x2 * sn);
      base[half + i0] = from_float<T>(x2 * cs + x1 * sn);
    }
  }
}

// Instantiations that an upstream tree already wrapped for MSVC: the guard must not be
// doubled by the explicit-instantiations transform.
#if !defined(_MSC_VER)
template __global__ void rope_kernel<float, true>(float*, float*, const float*, const float*, int64_t, int, int, int);
template __global__ void rope_kernel<__half, true>(__half*, __half*, const float*, const float*, int64_t, int, int, int);
template __global__ void rope_kernel<__nv_bfloat16, true>(__nv_bfloat16*, __nv_bfloat16*, const float*, const float*, int64_t, int, int, int);
#endif

namespace {

template <typename T>
void rope_typed(void* q, void* k, const float* cos, const float* sin, int64_t tokens,
                int heads_q, int heads_k, int head_dim, cudaStream_t s) {
  constexpr int N = Vec<T>::N;
  T* pq = static_cast<T*>(q);
  T* pk = static_cast<T*>(k);
  const int half = head_dim / 2;
  const bool vec = half % N == 0 && aligned16(pq) && (pk == nullptr || aligned16(pk));
  const int64_t items = tokens * (heads_q + heads_k) * (vec ? half / N : half);
  const unsigned grid = grid_for(items, kRopeThreads);
  if (vec) {
    rope_kernel<T, true><<<grid, kRopeThreads, 0, s>>>(pq, pk, cos, sin, tokens, heads_q, heads_k, head_dim);
  } else {
    rope_kernel<T, false><<<grid, kRopeThreads, 0, s>>>(pq, pk, cos, sin, tokens, heads_q, heads_k, head_dim);
  }
  check_launch("rope");
}

}  // namespace

void rope(void* q, void* k, const float* cos, const float* sin, int64_t tokens, int heads_q,
          int heads_k, int head_dim, DType dtype, cudaStream_t stream) {
  require(tokens >= 0 && heads_q > 0 && heads_k >= 0, "rope: bad tokens / heads");
  require(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even and > 0");
  require(k != nullptr || heads_k == 0, "rope: k is null but heads_k > 0");
  if (tokens == 0) return;
  switch (dtype) {
    case DType::kFloat32: return rope_typed<float>(q, k, cos, sin, tokens, heads_q, heads_k, head_dim, stream);
    case DType::kFloat16: return rope_typed<__half>(q, k, cos, sin, tokens, heads_q, heads_k, head_dim, stream);
    case DType::kBFloat16: return rope_typed<__nv_bfloat16>(q, k, cos, sin, tokens, heads_q, heads_k, head_dim, stream);
    default: throw std::invalid_argument("flashkern: rope supports float32, float16, bfloat16");
  }
}

}  // namespace fk
