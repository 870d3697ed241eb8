// Variants of flashkern's memory-bound kernels, for bench/sweep_memory.py to time side by side
// with torch.compile on the GPU: how a row is split (threads x 16-byte vectors per thread), the
// cache hints of loads and stores, one block per row against a persistent grid that prefetches
// its next row, and for element-wise kernels, vectors per thread and grid shape. Not part of
// the library: it decides the plans the library uses (csrc/README.md, "Tuning notes").
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -shared -Xcompiler -fPIC \
//     -I csrc bench/sweep_memory.cu -o sweep_memory.so
// The C ABI (ctypes): sweep_count(), sweep_describe(i, buf, len), sweep_run(i, args..., stream).
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "kernels/common.cuh"

namespace {

using fk::Vec;
using T = __nv_bfloat16;
using F8 = __nv_fp8_storage_t;
constexpr int N = Vec<T>::N;  // 8 bf16 in 16 bytes

// Cache hints. 0: streaming loads and stores (ld/st.global.cs, what the library does today);
// 1: read-only loads (ld.global.nc) and plain stores; 2: streaming loads, plain stores;
// 3: streaming loads asking L2 to fetch 256-byte sectors (.L2::256B), streaming stores;
// 4: read-only loads, no L1 allocation, .L2::256B, streaming stores.
template <int H>
__device__ __forceinline__ Vec<T> ld(const T* p) {
  if constexpr (H == 1) return Vec<T>::load(p);
  if constexpr (H == 3 || H == 4) {
    Vec<T> v;
    uint4& u = *reinterpret_cast<uint4*>(&v);
    if constexpr (H == 3)
      asm volatile("ld.global.cs.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p));
    else
      asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p));
    return v;
  }
  return Vec<T>::load_stream(p);
}
template <int H>
__device__ __forceinline__ void st(const Vec<T>& v, T* p) {
  if constexpr (H == 0 || H >= 3) v.store_stream(p);
  else v.store(p);
}
template <int H>
__device__ __forceinline__ void st8(const fk::Pack<F8, N>& o, F8* p) {
  if constexpr (H == 0 || H >= 3) {
    o.store(p);  // Pack::store is st.global.cs
  } else {
    *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(o.v);
  }
}

__device__ __forceinline__ float bf(const Vec<T>& v, int e) { return fk::vec_float(v, e); }

// MODE 0: rms_norm (out = norm(x) * w); 1: fused residual add + RMSNorm (residual_out = x + r);
// 2: the same with an FP8 E4M3 output divided by the scale.
template <int MODE, int H>
struct Row {
  template <int VPT>
  __device__ __forceinline__ static void load(Vec<T> (&xv)[VPT], Vec<T> (&rv)[VPT], const T* x,
                                              const T* r, int64_t row, int nvec) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < nvec) {
        xv[j] = ld<H>(x + row + static_cast<int64_t>(i) * N);
        if constexpr (MODE >= 1) rv[j] = ld<H>(r + row + static_cast<int64_t>(i) * N);
      }
    }
  }

  template <int VPT>
  __device__ __forceinline__ static void finish(Vec<T> (&xv)[VPT], const Vec<T> (&rv)[VPT],
                                                void* out, T* res_out, const T* w,
                                                int64_t row, int nvec, int hidden, float eps,
                                                float inv_scale, float* scratch) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < nvec) {
        if constexpr (MODE >= 1) {
#pragma unroll
          for (int e = 0; e < N; ++e)
            xv[j].v[e] = fk::from_float<T>(bf(xv[j], e) + bf(rv[j], e));
          st<H>(xv[j], res_out + row + static_cast<int64_t>(i) * N);
        }
#pragma unroll
        for (int e = 0; e < N; ++e) ss += bf(xv[j], e) * bf(xv[j], e);
      }
    }
    const float rstd = rsqrtf(fk::block_sum(ss, scratch) / static_cast<float>(hidden) + eps);
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < nvec) {
        const Vec<T> wv = Vec<T>::load(w + static_cast<int64_t>(i) * N);
        if constexpr (MODE == 2) {
          fk::Pack<F8, N> o;
#pragma unroll
          for (int e = 0; e < N; ++e)
            o.v[e] = fk::to_fp8_e4m3(
                fk::to_float(fk::from_float<T>(bf(xv[j], e) * rstd * bf(wv, e))) * inv_scale);
          st8<H>(o, static_cast<F8*>(out) + row + static_cast<int64_t>(i) * N);
        } else {
          Vec<T> o;
#pragma unroll
          for (int e = 0; e < N; ++e) o.v[e] = fk::from_float<T>(bf(xv[j], e) * rstd * bf(wv, e));
          st<H>(o, static_cast<T*>(out) + row + static_cast<int64_t>(i) * N);
        }
      }
    }
  }
};

// One block per row (PERSIST false), or a grid of resident blocks that each walk rows
// blockIdx.x, + gridDim.x, ... and issue the loads of their next row before reducing the
// current one (PERSIST true).
template <int MODE, int THREADS, int VPT, int H, bool PERSIST>
__global__ void __launch_bounds__(THREADS) row_kernel(void* out, T* res_out, const T* x,
                                                      const T* r, const T* w, int rows,
                                                      int hidden, float eps, float inv_scale) {
  __shared__ float scratch[32];
  const int nvec = hidden / N;
  using R = Row<MODE, H>;
  Vec<T> xv[VPT], rv[VPT];
  if constexpr (!PERSIST) {
    const int64_t row = static_cast<int64_t>(blockIdx.x) * hidden;
    R::load(xv, rv, x, r, row, nvec);
    R::finish(xv, rv, out, res_out, w, row, nvec, hidden, eps, inv_scale, scratch);
  } else {
    int cur = blockIdx.x;
    if (cur >= rows) return;
    R::load(xv, rv, x, r, static_cast<int64_t>(cur) * hidden, nvec);
    while (true) {
      const int next = cur + static_cast<int>(gridDim.x);
      Vec<T> nx[VPT], nr[VPT];
      if (next < rows) R::load(nx, nr, x, r, static_cast<int64_t>(next) * hidden, nvec);
      R::finish(xv, rv, out, res_out, w, static_cast<int64_t>(cur) * hidden, nvec, hidden, eps,
                inv_scale, scratch);
      if (next >= rows) break;
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        xv[j] = nx[j];
        rv[j] = nr[j];
      }
      cur = next;
    }
  }
}

// rms_norm only: W loads the weight before the reduction (with the row) instead of after it;
// R rows per block, their loads all issued first and their sums reduced together (one pair of
// barriers for R rows).
template <int R>
__device__ __forceinline__ void block_sum_n(float (&v)[R], float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int k = 0; k < R; ++k) v[k] = fk::warp_sum(v[k]);
  if (nwarps == 1) return;
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < R; ++k) scratch[k * 32 + warp] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < R; ++k) v[k] = fk::warp_sum(lane < nwarps ? scratch[k * 32 + lane] : 0.0f);
}

template <int THREADS, int VPT, int H, bool W, int R>
__global__ void __launch_bounds__(THREADS) rms_kernel(T* out, const T* x, const T* w, int rows,
                                                      int hidden, float eps) {
  __shared__ float scratch[32 * R];
  const int nvec = hidden / N;
  const int first = blockIdx.x * R;
  Vec<T> xv[R][VPT], wv[VPT];
#pragma unroll
  for (int k = 0; k < R; ++k)
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < nvec && first + k < rows)
        xv[k][j] = ld<H>(x + static_cast<int64_t>(first + k) * hidden + static_cast<int64_t>(i) * N);
    }
  if constexpr (W) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < nvec) wv[j] = Vec<T>::load(w + static_cast<int64_t>(i) * N);
    }
  }
  float ss[R];
#pragma unroll
  for (int k = 0; k < R; ++k) {
    ss[k] = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      if (threadIdx.x + j * THREADS < nvec && first + k < rows) {
#pragma unroll
        for (int e = 0; e < N; ++e) ss[k] += bf(xv[k][j], e) * bf(xv[k][j], e);
      }
  }
  block_sum_n<R>(ss, scratch);
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int i = threadIdx.x + j * THREADS;
    if (i >= nvec) continue;
    if constexpr (!W) wv[j] = Vec<T>::load(w + static_cast<int64_t>(i) * N);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      if (first + k >= rows) continue;
      const float rstd = rsqrtf(ss[k] / static_cast<float>(hidden) + eps);
      Vec<T> o;
#pragma unroll
      for (int e = 0; e < N; ++e) o.v[e] = fk::from_float<T>(bf(xv[k][j], e) * rstd * bf(wv[j], e));
      st<H>(o, out + static_cast<int64_t>(first + k) * hidden + static_cast<int64_t>(i) * N);
    }
  }
}

// rms_norm, the shape of Inductor's own kernel for this op (torch 2.11, H200: a looped
// reduction, 16 warps, 8-byte accesses): TWO_PASS reads the row once for the sum of squares
// and again for the output; POL 0 loads the first pass with an L2 evict_last policy (so the
// second pass hits L2), the second with evict_first, and stores plainly, as Inductor's PTX does;
// POL 1 uses .cs loads and stores. One pass keeps the row in registers. VB: bytes per access.
template <int VB>
struct Bytes;
template <>
struct Bytes<8> {
  uint2 u;
};
template <>
struct Bytes<16> {
  uint4 u;
};

template <int VB, int POL>
__device__ __forceinline__ Bytes<VB> ldp(const T* p, bool keep) {
  Bytes<VB> b;
  if constexpr (POL == 1) {
    if constexpr (VB == 8) b.u = __ldcs(reinterpret_cast<const uint2*>(p));
    else b.u = __ldcs(reinterpret_cast<const uint4*>(p));
    return b;
  }
  uint64_t pol;
  if (keep) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  else asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  if constexpr (VB == 8)
    asm volatile("ld.global.L1::evict_last.L2::cache_hint.v2.b32 {%0,%1}, [%2], %3;"
                 : "=r"(b.u.x), "=r"(b.u.y) : "l"(p), "l"(pol));
  else
    asm volatile("ld.global.L1::evict_last.L2::cache_hint.v4.b32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(b.u.x), "=r"(b.u.y), "=r"(b.u.z), "=r"(b.u.w) : "l"(p), "l"(pol));
  return b;
}

template <int VB, int POL>
__device__ __forceinline__ void stp(const Bytes<VB>& b, T* p) {
  if constexpr (POL == 1) {
    if constexpr (VB == 8) __stcs(reinterpret_cast<uint2*>(p), b.u);
    else __stcs(reinterpret_cast<uint4*>(p), b.u);
  } else {
    if constexpr (VB == 8) *reinterpret_cast<uint2*>(p) = b.u;
    else *reinterpret_cast<uint4*>(p) = b.u;
  }
}

template <int VB>
__device__ __forceinline__ float bytes_float(const Bytes<VB>& b, int e) {
  const unsigned w = reinterpret_cast<const unsigned*>(&b.u)[e >> 1];
  return __uint_as_float((e & 1) != 0 ? (w & 0xffff0000u) : (w << 16));
}

template <int THREADS, int VB, int K, bool TWO_PASS, int POL>
__global__ void __launch_bounds__(THREADS) rms_ind_kernel(T* out, const T* x, const T* w,
                                                          int hidden, float eps) {
  constexpr int E = VB / 2;  // bf16 per access
  __shared__ float scratch[32];
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * hidden;
  T* yr = out + static_cast<int64_t>(blockIdx.x) * hidden;
  Bytes<VB> v[K];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = ldp<VB, POL>(xr + (k * THREADS + threadIdx.x) * E, TWO_PASS);
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int e = 0; e < E; ++e) ss += bytes_float(v[k], e) * bytes_float(v[k], e);
  const float rstd = rsqrtf(fk::block_sum(ss, scratch) / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int c = (k * THREADS + threadIdx.x) * E;
    const Bytes<VB> xv = TWO_PASS ? ldp<VB, POL>(xr + c, false) : v[k];
    const Bytes<VB> wv = ldp<VB, 0>(w + c, true);
    Bytes<VB> o;
#pragma unroll
    for (int e = 0; e < E; e += 2) {
      const __nv_bfloat162 pr = __floats2bfloat162_rn(bytes_float(xv, e) * rstd * bytes_float(wv, e),
                                                      bytes_float(xv, e + 1) * rstd * bytes_float(wv, e + 1));
      reinterpret_cast<__nv_bfloat162*>(&o.u)[e >> 1] = pr;
    }
    stp<VB, POL>(o, yr + c);
  }
}

// Element-wise: OP 0 copy, 1 gelu_tanh (the library's formula). A block covers THREADS * U
// vectors per step (vector u of thread t at step base + u * THREADS + t: coalesced per u), all
// U loads issued before the first use. PERSIST: a resident grid strides over the steps; else
// one step per block.
struct GeluTanh {
  __device__ __forceinline__ float operator()(float v) const {
    return __fdividef(v, 1.0f + __expf(-v * (1.5957691216057308f + 0.0713548162726f * v * v)));
  }
};

template <int OP, int THREADS, int U, int H, bool PERSIST>
__global__ void __launch_bounds__(THREADS) ew_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                     int64_t nvec) {
  const int64_t step = static_cast<int64_t>(THREADS) * U;
  const int64_t stride = PERSIST ? step * gridDim.x : step;
  for (int64_t base = blockIdx.x * step; base < nvec; base += stride) {
    Vec<T> v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + u * THREADS + threadIdx.x;
      if (i < nvec) v[u] = ld<H>(x + i * N);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + u * THREADS + threadIdx.x;
      if (i < nvec) {
        if constexpr (OP == 1) {
          Vec<T> o;
#pragma unroll
          for (int e = 0; e < N; ++e) o.v[e] = fk::from_float<T>(GeluTanh{}(bf(v[u], e)));
          st<H>(o, out + i * N);
        } else {
          st<H>(v[u], out + i * N);
        }
      }
    }
    if constexpr (!PERSIST) break;
  }
}

struct Args {
  void* out;
  T* res_out;
  const T* x;
  const T* r;
  const T* w;
  int rows;
  int hidden;
  float eps;
  float inv_scale;
  cudaStream_t s;
};

using Runner = int (*)(const Args&);

struct Variant {
  char name[96];
  int kind;     // 0 rms_norm, 1 fused, 2 fused_fp8, 3 copy, 4 gelu_tanh
  int hidden;   // row variants: the hidden size they cover (0 = any)
  Runner run;
};

template <typename K>
int resident_grid(K kernel, int threads, int64_t work_blocks) {
  int dev = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
  const int64_t g = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
  return static_cast<int>(g < work_blocks ? g : work_blocks);
}

template <int MODE, int THREADS, int VPT, int H, bool PERSIST>
int run_row(const Args& a) {
  if (a.hidden != THREADS * VPT * N) return 1;
  auto* k = row_kernel<MODE, THREADS, VPT, H, PERSIST>;
  const int grid = PERSIST ? resident_grid(k, THREADS, a.rows) : a.rows;
  k<<<grid, THREADS, 0, a.s>>>(a.out, a.res_out, a.x, a.r, a.w, a.rows, a.hidden, a.eps,
                                a.inv_scale);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

template <int OP, int THREADS, int U, int H, bool PERSIST>
int run_ew(const Args& a) {
  const int64_t nvec = static_cast<int64_t>(a.rows) * a.hidden / N;
  auto* k = ew_kernel<OP, THREADS, U, H, PERSIST>;
  const int64_t steps = (nvec + static_cast<int64_t>(THREADS) * U - 1) / (THREADS * U);
  const int64_t grid = PERSIST ? resident_grid(k, THREADS, steps) : steps;
  k<<<static_cast<unsigned>(grid), THREADS, 0, a.s>>>(static_cast<T*>(a.out), a.x, nvec);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

template <int THREADS, int VPT, int H, bool W, int R>
int run_rms(const Args& a) {
  if (a.hidden != THREADS * VPT * N) return 1;
  rms_kernel<THREADS, VPT, H, W, R><<<(a.rows + R - 1) / R, THREADS, 0, a.s>>>(
      static_cast<T*>(a.out), a.x, a.w, a.rows, a.hidden, a.eps);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

template <int THREADS, int VB, int K, bool TWO_PASS, int POL>
int run_rms_ind(const Args& a) {
  if (a.hidden != THREADS * K * VB / 2) return 1;
  rms_ind_kernel<THREADS, VB, K, TWO_PASS, POL><<<a.rows, THREADS, 0, a.s>>>(
      static_cast<T*>(a.out), a.x, a.w, a.hidden, a.eps);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

constexpr const char* kMode[] = {"rms_norm", "fused_add_rms_norm", "fused_add_rms_norm_fp8"};
constexpr const char* kHint[] = {"ld.cs/st.cs", "ld.nc/st", "ld.cs/st", "ld.cs.L2::256B/st.cs",
                                 "ld.nc.L1::no_allocate.L2::256B/st.cs"};

template <int MODE, int THREADS, int VPT, int H, bool PERSIST>
Variant row_variant(int hidden) {
  Variant v{};
  std::snprintf(v.name, sizeof v.name, "%s %dx%d %s %s", kMode[MODE], THREADS, VPT, kHint[H],
                PERSIST ? "persistent+prefetch" : "block/row");
  v.kind = MODE;
  v.hidden = hidden;
  v.run = run_row<MODE, THREADS, VPT, H, PERSIST>;
  return v;
}

template <int THREADS, int VPT, int H, bool W, int R>
Variant rms_variant(int hidden) {
  Variant v{};
  std::snprintf(v.name, sizeof v.name, "rms_norm %dx%d %s %s %d row%s/block", THREADS, VPT,
                kHint[H], W ? "w first" : "w after", R, R > 1 ? "s" : "");
  v.kind = 0;
  v.hidden = hidden;
  v.run = run_rms<THREADS, VPT, H, W, R>;
  return v;
}

template <int H, bool W, int R>
void add_rms(Variant* out, int& n) {
  out[n++] = rms_variant<64, 8, H, W, R>(4096);
  out[n++] = rms_variant<128, 4, H, W, R>(4096);
  out[n++] = rms_variant<256, 2, H, W, R>(4096);
  out[n++] = rms_variant<128, 8, H, W, R>(8192);
  out[n++] = rms_variant<256, 4, H, W, R>(8192);
  out[n++] = rms_variant<512, 2, H, W, R>(8192);
}

template <int THREADS, int VB, int K, bool TWO_PASS, int POL>
Variant rms_ind_variant(int hidden) {
  Variant v{};
  std::snprintf(v.name, sizeof v.name, "rms_norm %dx%dx%dB %s %s", THREADS, K, VB,
                TWO_PASS ? "two passes" : "one pass",
                POL == 0 ? (TWO_PASS ? "L2 evict_last/evict_first, st" : "L2 evict_first, st")
                         : "ld.cs/st.cs");
  v.kind = 0;
  v.hidden = hidden;
  v.run = run_rms_ind<THREADS, VB, K, TWO_PASS, POL>;
  return v;
}

void add_rms_ind(Variant* out, int& n) {
  out[n++] = rms_ind_variant<512, 8, 4, true, 0>(8192);  // Inductor's shape
  out[n++] = rms_ind_variant<512, 8, 4, true, 1>(8192);
  out[n++] = rms_ind_variant<512, 16, 2, true, 0>(8192);
  out[n++] = rms_ind_variant<256, 8, 8, true, 0>(8192);
  out[n++] = rms_ind_variant<512, 8, 4, false, 0>(8192);
  out[n++] = rms_ind_variant<512, 8, 4, false, 1>(8192);
  out[n++] = rms_ind_variant<1024, 8, 2, false, 1>(8192);
  out[n++] = rms_ind_variant<512, 16, 2, false, 0>(8192);
  out[n++] = rms_ind_variant<256, 16, 4, false, 0>(8192);
  out[n++] = rms_ind_variant<512, 8, 2, true, 0>(4096);
  out[n++] = rms_ind_variant<512, 8, 2, false, 1>(4096);
  out[n++] = rms_ind_variant<256, 16, 2, false, 0>(4096);
  out[n++] = rms_ind_variant<256, 8, 4, false, 1>(4096);
  out[n++] = rms_ind_variant<256, 8, 4, true, 0>(4096);
}

template <int H>
void add_rms_hint(Variant* out, int& n) {
  add_rms<H, false, 1>(out, n);
  add_rms<H, true, 1>(out, n);
  add_rms<H, false, 2>(out, n);
  add_rms<H, true, 2>(out, n);
}

template <int OP, int THREADS, int U, int H, bool PERSIST>
Variant ew_variant() {
  Variant v{};
  std::snprintf(v.name, sizeof v.name, "%s %dx%d %s %s", OP == 1 ? "gelu_tanh" : "copy", THREADS,
                U, kHint[H], PERSIST ? "resident grid" : "one step/block");
  v.kind = 3 + OP;
  v.hidden = 0;
  v.run = run_ew<OP, THREADS, U, H, PERSIST>;
  return v;
}

// Row splits that cover hidden 4096 (512 vectors) and 8192 (1024 vectors) exactly.
template <int MODE, int H, bool P>
void add_rows(Variant* out, int& n) {
  out[n++] = row_variant<MODE, 64, 8, H, P>(4096);
  out[n++] = row_variant<MODE, 128, 4, H, P>(4096);
  out[n++] = row_variant<MODE, 256, 2, H, P>(4096);
  out[n++] = row_variant<MODE, 512, 1, H, P>(4096);
  out[n++] = row_variant<MODE, 128, 8, H, P>(8192);
  out[n++] = row_variant<MODE, 256, 4, H, P>(8192);
  out[n++] = row_variant<MODE, 512, 2, H, P>(8192);
  out[n++] = row_variant<MODE, 1024, 1, H, P>(8192);
}

template <int MODE>
void add_mode(Variant* out, int& n) {
  add_rows<MODE, 0, false>(out, n);
  add_rows<MODE, 1, false>(out, n);
  add_rows<MODE, 2, false>(out, n);
  add_rows<MODE, 0, true>(out, n);
  add_rows<MODE, 1, true>(out, n);
}

template <int OP, int H, bool P>
void add_ew(Variant* out, int& n) {
  out[n++] = ew_variant<OP, 128, 1, H, P>();
  out[n++] = ew_variant<OP, 128, 2, H, P>();
  out[n++] = ew_variant<OP, 128, 4, H, P>();
  out[n++] = ew_variant<OP, 256, 1, H, P>();
  out[n++] = ew_variant<OP, 256, 2, H, P>();
  out[n++] = ew_variant<OP, 256, 4, H, P>();
  out[n++] = ew_variant<OP, 512, 1, H, P>();
  out[n++] = ew_variant<OP, 512, 2, H, P>();
  out[n++] = ew_variant<OP, 256, 8, H, P>();
}

struct Table {
  Variant v[320];
  int n = 0;
  Table() {
    add_rms_ind(v, n);
    add_rms_hint<0>(v, n);
    add_rms_hint<3>(v, n);
    add_rms_hint<4>(v, n);
    add_mode<0>(v, n);
    add_mode<1>(v, n);
    add_mode<2>(v, n);
    add_ew<0, 0, true>(v, n);
    add_ew<0, 0, false>(v, n);
    add_ew<0, 1, false>(v, n);
    add_ew<1, 0, true>(v, n);
    add_ew<1, 0, false>(v, n);
    add_ew<1, 1, false>(v, n);
    add_ew<1, 1, true>(v, n);
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

extern "C" {

int sweep_count() { return table().n; }

// "kind hidden name" into buf.
int sweep_describe(int i, char* buf, int len) {
  if (i < 0 || i >= table().n) return 1;
  const Variant& v = table().v[i];
  std::snprintf(buf, static_cast<size_t>(len), "%d %d %s", v.kind, v.hidden, v.name);
  return 0;
}

// 0 launched, 1 the variant does not cover this hidden size, 2 launch error.
int sweep_run(int i, void* out, void* res_out, const void* x, const void* r, const void* w,
              int rows, int hidden, float eps, float inv_scale, void* stream) {
  if (i < 0 || i >= table().n) return 1;
  const Args a{out, static_cast<T*>(res_out), static_cast<const T*>(x), static_cast<const T*>(r),
               static_cast<const T*>(w), rows, hidden, eps, inv_scale,
               static_cast<cudaStream_t>(stream)};
  return table().v[i].run(a);
}

}  // extern "C"
