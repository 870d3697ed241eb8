// Host launcher templates defined in norm.cu and explicitly instantiated there for float,
// __half and __nv_bfloat16. fusion.cu calls them without seeing their definition, so the
// `template void launch_rms_norm<...>(...);` lines in norm.cu are what the linker resolves
// against: removing one leaves an undefined symbol in the module (see csrc/README.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fk {

template <typename T>
void launch_rms_norm(T* out, const T* x, const T* weight, int64_t rows, int64_t hidden,
                     float eps, cudaStream_t stream);

}  // namespace fk
