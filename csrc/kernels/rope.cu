// Rotary position embedding, rotate-half form (GPT-NeoX / Llama), in place on Q and K.
//   q: [tokens, heads_q, head_dim], k: [tokens, heads_k, head_dim] (contiguous), cos, sin: fp32
//   [tokens, head_dim / 2]; for i < head_dim/2, x1 = x[i], x2 = x[i + head_dim/2]:
//     x[i] = x1 * cos[t, i] - x2 * sin[t, i];  x[i + head_dim/2] = x2 * cos[t, i] + x1 * sin[t, i]
#include <stdexcept>

#include "common.cuh"

namespace fk {

constexpr int kRopeThreads = 256, kRopeHeads = 4;  // kRopeHeads: heads per work item (kVec)

// Item = N pairs (kVec: 16 B of each half) of up to H heads of a token: cos/sin loaded once, reused
// across the heads; all 2H loads in flight first. kVec: half % N == 0, q, k, cos, sin 16-B aligned.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(
    T* __restrict__ q, T* __restrict__ k, const float* __restrict__ cos,
    const float* __restrict__ sin, int64_t tokens, int heads_q, int heads_k, int head_dim) {
  constexpr int N = kVec ? Vec<T>::N : 1, H = kVec ? kRopeHeads : 1;
  const int half = head_dim / 2, chunks = half / N, heads = heads_q + heads_k, groups = (heads + H - 1) / H;
  for (int64_t it = global_thread(); it < tokens * groups * chunks; it += grid_threads()) {
    const int i0 = static_cast<int>(it % chunks) * N, h0 = static_cast<int>(it / chunks % groups) * H;
    const int64_t t = it / chunks / groups;
    const float *cr = cos + t * half + i0, *sr = sin + t * half + i0;
    T* base[H];  // null past the last head
#pragma unroll
    for (int j = 0, h = h0; j < H; ++j, ++h)
      base[j] = h >= heads ? nullptr : h < heads_q ? q + (t * heads_q + h) * head_dim : k + (t * heads_k + h - heads_q) * head_dim;
    if constexpr (kVec) {
      Vec<T> a[H], b[H];
      float4 c4[N / 4], s4[N / 4];
#pragma unroll
      for (int j = 0; j < H; ++j)
        if (base[j] != nullptr) a[j] = Vec<T>::load(base[j] + i0), b[j] = Vec<T>::load(base[j] + half + i0);
#pragma unroll
      for (int e = 0; e < N / 4; ++e)
        c4[e] = __ldg(reinterpret_cast<const float4*>(cr) + e), s4[e] = __ldg(reinterpret_cast<const float4*>(sr) + e);
      const float *cs = reinterpret_cast<const float*>(c4), *sn = reinterpret_cast<const float*>(s4);
#pragma unroll
      for (int j = 0; j < H; ++j) {
        if (base[j] == nullptr) continue;
        Vec<T> oa, ob;
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const float x1 = vec_float(a[j], e), x2 = vec_float(b[j], e);
          oa.v[e] = from_float<T>(x1 * cs[e] - x2 * sn[e]);
          ob.v[e] = from_float<T>(x2 * cs[e] + x1 * sn[e]);
        }
        oa.store(base[j] + i0), ob.store(base[j] + half + i0);
      }
    } else {
      const float x1 = to_float(base[0][i0]), x2 = to_float(base[0][half + i0]), cs = __ldg(cr), sn = __ldg(sr);
      base[0][i0] = from_float<T>(x1 * cs - x2 * sn), base[0][half + i0] = from_float<T>(x2 * cs + x1 * sn);
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
  const bool vec = half % N == 0 && aligned16(pq) && (pk == nullptr || aligned16(pk)) &&
                   aligned16(cos) && aligned16(sin);
  if (vec) {
    // One item per thread and as many blocks as that takes: the block scheduler keeps every SM
    // full to the end, where a grid-stride loop of a few items each would run its last round
    // with part of the threads (and of the loads in flight) idle.
    const int64_t groups = (heads_q + heads_k + kRopeHeads - 1) / kRopeHeads;
    const int64_t blocks = (tokens * groups * (half / N) + kRopeThreads - 1) / kRopeThreads;
    const unsigned grid = static_cast<unsigned>(blocks < 0x7fffffff ? blocks : 0x7fffffff);
    rope_kernel<T, true><<<grid, kRopeThreads, 0, s>>>(pq, pk, cos, sin, tokens, heads_q, heads_k, head_dim);
  } else {
    const unsigned grid = grid_for(tokens * (heads_q + heads_k) * half, kRopeThreads);
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
