// Device-to-device copy, portable path: 128-bit grid-stride loop with a byte tail. Always
// built. When the sm90/ sources are part of the build (FLASHKERN_WITH_SM90, set by CMake only
// if the arch list holds 90a and sm90/ was not excluded) and the running GPU is sm_90, fk::copy
// hands aligned copies to the TMA bulk-copy kernel instead.
#include <string>

#include "../kernels/common.cuh"

namespace fk {

#if defined(FLASHKERN_WITH_SM90)
// sm90/bulk_copy_sm90.cu: true when it handled the copy.
bool copy_sm90(void* dst, const void* src, int64_t nbytes, cudaStream_t stream);
bool sm90_copy_usable();
#endif

constexpr int kCopyThreads = 256;

__global__ void __launch_bounds__(kCopyThreads) copy_kernel(unsigned char* __restrict__ dst,
                                                            const unsigned char* __restrict__ src,
                                                            int64_t nbytes, bool vectorised) {
  const int64_t stride = grid_threads();
  int64_t done = 0;
  if (vectorised) {
    const int64_t nvec = nbytes / 16;
    const auto* s = reinterpret_cast<const uint4*>(src);
    auto* d = reinterpret_cast<uint4*>(dst);
    for (int64_t i = global_thread(); i < nvec; i += stride) __stcs(d + i, __ldcs(s + i));
    done = nvec * 16;
  }
  for (int64_t i = done + global_thread(); i < nbytes; i += stride) dst[i] = src[i];
}

void copy_portable(void* dst, const void* src, int64_t nbytes, cudaStream_t stream) {
  const bool vec = aligned16(dst) && aligned16(src);
  const int64_t work = vec && nbytes / 16 > 0 ? nbytes / 16 : nbytes;
  // A grid that covers the copy, one vector a thread (grid_cover: 101 % of torch's copy_ on an
  // H200, against 93 % for one resident wave that strides).
  copy_kernel<<<grid_cover(work, kCopyThreads), kCopyThreads, 0, stream>>>(
      static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), nbytes, vec);
  check_launch("copy");
}

void copy(void* dst, const void* src, int64_t nbytes, cudaStream_t stream) {
  require(nbytes >= 0, "copy: nbytes must be >= 0");
  if (nbytes == 0) return;
#if defined(FLASHKERN_WITH_SM90)
  if (copy_sm90(dst, src, nbytes, stream)) return;
#endif
  copy_portable(dst, src, nbytes, stream);
}

std::string copy_impl() {
#if defined(FLASHKERN_WITH_SM90)
  if (sm90_copy_usable()) return "sm90_tma";
#endif
  return "portable";
}

}  // namespace fk
