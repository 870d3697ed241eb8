// How the row kernels (norms, fused norms) split a row: one block per row, 128-bit vectors,
// up to kMaxVpt vectors per thread kept in registers; longer rows take a looped kernel.
#pragma once

#include "common.cuh"

namespace fk {

constexpr int kRowThreads = 256;
constexpr int kMaxVpt = 8;
constexpr int kLoopThreads = 512;

struct RowPlan {
  bool vectorised;  // all pointers 16-byte aligned and hidden % vector width == 0
  int threads;      // block size
  int vpt;          // vectors per thread (1, 2, 4, 8) for the register kernel; 0 = looped
};

template <typename T>
inline RowPlan plan_row(int64_t hidden, bool pointers_aligned) {
  constexpr int N = VecWidth<T>::value;
  RowPlan p{};
  p.vectorised = pointers_aligned && hidden % N == 0;
  const int64_t units = p.vectorised ? hidden / N : hidden;
  if (!p.vectorised) {
    p.threads = units >= kLoopThreads ? kLoopThreads : static_cast<int>((units + 31) / 32 * 32);
    if (p.threads < 32) p.threads = 32;
    p.vpt = 0;
    return p;
  }
  // Aim at >= 4 vectors per thread: smaller blocks, more of them resident per SM, and more
  // independent 16-byte loads in flight per thread (what keeps HBM busy).
  const int64_t want = (units / 4 + 31) / 32 * 32;
  p.threads = want >= kRowThreads ? kRowThreads : static_cast<int>(want);
  if (p.threads < 32) p.threads = 32;
  const int64_t per = (units + p.threads - 1) / p.threads;
  p.vpt = per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : per <= kMaxVpt ? 8 : 0;
  if (p.vpt == 0) p.threads = kLoopThreads;
  return p;
}

// Spreads a row of `units` vectors over threads of about `per_thread` vectors each (a warp
// multiple, at most `max_threads`) and rounds the vectors per thread up to the kernels'
// instantiations (1, 2, 4, 8); longer rows take the looped kernel on kLoopThreads.
inline RowPlan spread_row(RowPlan p, int64_t units, int64_t per_thread, int64_t max_threads) {
  int64_t threads = ((units + per_thread - 1) / per_thread + 31) / 32 * 32;
  if (threads > max_threads) threads = max_threads;
  const int64_t per = (units + threads - 1) / threads;
  p.threads = static_cast<int>(threads);
  p.vpt = per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : per <= kMaxVpt ? 8 : 0;
  if (p.vpt == 0) p.threads = kLoopThreads;
  return p;
}

// The norm kernels keep the row packed (a 16-byte vector in 4 registers, converted to fp32 as
// it is used), so they can afford the most vectors per thread: kMaxVpt per thread on the
// fewest threads that cover the row. Fewer, deeper threads mean more rows (blocks) resident
// per SM and more 16-byte loads in flight per thread -- the row kernels are bound by how many
// bytes each SM has in flight, not by arithmetic. Unaligned / odd rows plan as plan_row.
template <typename T>
inline RowPlan plan_row_packed(int64_t hidden, bool pointers_aligned) {
  constexpr int N = VecWidth<T>::value;
  const RowPlan p = plan_row<T>(hidden, pointers_aligned);
  return p.vectorised ? spread_row(p, hidden / N, kMaxVpt, kRowThreads) : p;
}

}  // namespace fk

namespace fk {

// ---- RMSNorm ------------------------------------------------------------------------------------
// Measured against torch.compile on an H200 (bench/sweep_memory.cu and .py, csrc/README.md):
// two 16-byte vectors per thread on up to kRmsThreads threads, the weight loaded together with
// the row, beat holding 8 vectors on the fewest threads (bf16 4096: 1.15-1.26x Inductor against
// 1.05-1.11x); rows of at least kRereadVectors vectors are read twice instead of held (see
// rms_row).
constexpr int kRmsThreads = 512;
constexpr int kRereadVectors = 1024;

template <typename T>
inline RowPlan plan_rms(int64_t hidden, bool pointers_aligned) {
  constexpr int N = VecWidth<T>::value;
  const RowPlan p = plan_row<T>(hidden, pointers_aligned);
  return p.vectorised ? spread_row(p, hidden / N, 2, kRmsThreads) : p;
}

// A 16-byte load with an L2 eviction priority: `keep` (evict_last) for data read again soon,
// else evict_first. sm_80 and later; a streaming load before that.
template <typename T>
__device__ __forceinline__ Vec<T> load_l2_priority(const T* p, bool keep) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  Vec<T> v;
  uint4& u = *reinterpret_cast<uint4*>(&v);
  uint64_t policy;
  if (keep) {
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  }
  asm volatile("ld.global.L1::evict_last.L2::cache_hint.v4.b32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
               : "l"(p), "l"(policy));
  return v;
#else
  (void)keep;
  return Vec<T>::load_stream(p);
#endif
}

// One row of RMSNorm, VPT vectors per thread, all loads issued before the first use. Short rows
// stay in registers (x read once, streaming; the weight loaded with it; streaming stores). Rows
// of kRereadVectors or more are read twice, as Inductor's kernel for this op does: the first
// pass keeps the row in L2 (evict_last) for the sum of squares, the second reads it back from L2
// (evict_first) with the weight, and the stores are plain. On an H200 that reached 4.18 TB/s at
// 16384 x 8192 bf16 against 4.12-4.15 for the row held in registers.
template <typename T, int VPT>
__device__ __forceinline__ void rms_row(T* __restrict__ yr, const T* __restrict__ xr,
                                        const T* __restrict__ weight, int nvec, int64_t hidden,
                                        float eps, float* scratch) {
  constexpr int N = Vec<T>::N;
  const int tid = threadIdx.x, nthr = blockDim.x;
  const bool reread = nvec >= kRereadVectors;  // the same for the whole block
  Vec<T> v[VPT], w[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int i = tid + j * nthr;
    if (i < nvec) {
      if (reread) {
        v[j] = load_l2_priority(xr + i * N, true);
      } else {
        v[j] = Vec<T>::load_stream(xr + i * N);
        w[j] = Vec<T>::load(weight + i * N);
      }
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (tid + j * nthr < nvec) {
#pragma unroll
      for (int e = 0; e < N; ++e) ss += vec_float(v[j], e) * vec_float(v[j], e);
    }
  const float rstd = rsqrtf(block_sum(ss, scratch) / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int i = tid + j * nthr;
    if (i < nvec) {
      if (reread) {
        v[j] = load_l2_priority(xr + i * N, false);
        w[j] = load_l2_priority(weight + i * N, true);
      }
      Vec<T> o;
#pragma unroll
      for (int e = 0; e < N; ++e) o.v[e] = from_float<T>(vec_float(v[j], e) * rstd * vec_float(w[j], e));
      if (reread) o.store(yr + i * N);
      else o.store_stream(yr + i * N);
    }
  }
}

}  // namespace fk
