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

// The norm kernels keep the row packed (a 16-byte vector in 4 registers, converted to fp32 as
// it is used), so they can afford the most vectors per thread: kMaxVpt per thread on the
// fewest threads that cover the row. Fewer, deeper threads mean more rows (blocks) resident
// per SM and more 16-byte loads in flight per thread -- the row kernels are bound by how many
// bytes each SM has in flight, not by arithmetic. Unaligned / odd rows plan as plan_row.
template <typename T>
inline RowPlan plan_row_packed(int64_t hidden, bool pointers_aligned) {
  constexpr int N = VecWidth<T>::value;
  RowPlan p = plan_row<T>(hidden, pointers_aligned);
  if (!p.vectorised) return p;
  const int64_t units = hidden / N;
  int64_t threads = ((units + kMaxVpt - 1) / kMaxVpt + 31) / 32 * 32;
  if (threads > kRowThreads) threads = kRowThreads;
  p.threads = static_cast<int>(threads);
  const int64_t per = (units + threads - 1) / threads;
  p.vpt = per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : per <= kMaxVpt ? 8 : 0;
  if (p.vpt == 0) p.threads = kLoopThreads;
  return p;
}

}  // namespace fk
