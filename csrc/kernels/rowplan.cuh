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

}  // namespace fk
