// Kernel traits: per-architecture shared-memory budgets and tile shapes for the tiled kernels.
// A kernel reads `TiledSoftmaxTraits<FK_ARCH>`, so each device pass of a fat binary gets the
// budget of its own architecture; the host learns it from the binary (softmax_smem_bytes()).
#pragma once

#include "sm_gate.h"

namespace fk {

// Generic / default traits: the budget of the big datacenter parts (sm_80's opt-in maximum
// is 166912 B). Larger than the 99 KB (101376 B) that sm_86/89/120 allow per block.
template <int Arch>
struct TiledSoftmaxTraits {
  static constexpr int kSmemBytes = 160 * 1024;  // one row of up to 40960 fp32 values
  static constexpr int kThreads = 1024;
  static constexpr int kTileCols = kSmemBytes / 4;
};

// Hopper: 227 KB opt-in (232448 B) per block.
template <>
struct TiledSoftmaxTraits<900> {
  static constexpr int kSmemBytes = 200 * 1024;
  static constexpr int kThreads = 1024;
  static constexpr int kTileCols = kSmemBytes / 4;
};

// Blackwell datacenter: 227 KB opt-in per block.
template <>
struct TiledSoftmaxTraits<1000> {
  static constexpr int kSmemBytes = 200 * 1024;
  static constexpr int kThreads = 1024;
  static constexpr int kTileCols = kSmemBytes / 4;
};

// flashkern: end of per-arch traits (a port inserts its traits above this line)

}  // namespace fk
