// Hopper-only device-to-device copy through the TMA bulk-copy engine (cp.async.bulk, mbarrier
// transaction counts) with setmaxnreg. setmaxnreg exists only for sm_90a ("arch-specific"
// code that runs on 9.0 alone), so this file must not be built for any other target, nor with
// MSVC (its inline PTX uses GCC-style asm): CMake adds it only when CMAKE_CUDA_ARCHITECTURES
// holds 90a, and flashbuild's exclude-sources step drops it on Windows and for other archs.
// portable/copy_portable.cu is the fallback everywhere else.
#include <cstdint>

#include "../kernels/common.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FK_SM90A_DEVICE 1
#endif

namespace fk {

void copy_portable(void* dst, const void* src, int64_t nbytes, cudaStream_t stream);

constexpr int kBulkThreads = 128;          // one warpgroup: setmaxnreg acts per warpgroup
constexpr int kBulkChunk = 32 * 1024;      // bytes per TMA transfer (multiple of 16)
// ptxas gives a setmaxnreg kernel the most registers its launch bounds allow; 4 blocks per SM
// caps that at 128 per thread so four 32 KB transfers can be in flight on each SM.
constexpr int kBulkBlocksPerSm = 4;

__global__ void __launch_bounds__(kBulkThreads, kBulkBlocksPerSm) bulk_copy_sm90_kernel(
    unsigned char* __restrict__ dst, const unsigned char* __restrict__ src, int64_t nbytes) {
#if defined(FK_SM90A_DEVICE)
  __shared__ alignas(128) unsigned char buf[kBulkChunk];
  __shared__ alignas(8) uint64_t bar;
  // Threads here only issue and wait on bulk copies: give registers back to the SM, as the
  // producer warps of warp-specialised Hopper kernels do.
  asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
  const uint32_t buf_s = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
  const uint32_t bar_s = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar_s) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  uint32_t phase = 0;
  const int64_t nchunks = (nbytes + kBulkChunk - 1) / kBulkChunk;
  for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const int64_t off = c * kBulkChunk;
    const uint32_t bytes =
        static_cast<uint32_t>(nbytes - off < kBulkChunk ? nbytes - off : kBulkChunk);
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar_s),
                   "r"(bytes)
                   : "memory");
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
          "[%3];\n" ::"r"(buf_s),
          "l"(src + off), "r"(bytes), "r"(bar_s)
          : "memory");
      // Wait for the load, then hand the same bytes to the store engine.
      asm volatile(
          "{\n"
          ".reg .pred p;\n"
          "WAIT_%=:\n"
          "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
          "@!p bra WAIT_%=;\n"
          "}\n" ::"r"(bar_s),
          "r"(phase)
          : "memory");
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst + off),
                   "r"(buf_s), "r"(bytes)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
      // The buffer is reused by the next chunk: wait until the store has read it.
      asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    }
    phase ^= 1u;
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#else
  // Not an sm_90a pass: never launched (the host checks the device first).
  __trap();
#endif
}

bool sm90_copy_usable() { return current_sm_version() == 90; }

bool copy_sm90(void* dst, const void* src, int64_t nbytes, cudaStream_t stream) {
  if (!sm90_copy_usable() || !aligned16(dst) || !aligned16(src) || nbytes < kBulkChunk) {
    return false;
  }
  const int64_t body = nbytes / 16 * 16;
  const int64_t chunks = (body + kBulkChunk - 1) / kBulkChunk;
  // Several 32 KB transfers in flight per SM hide the copy engine's latency.
  const int64_t cap = static_cast<int64_t>(current_sm_count()) * kBulkBlocksPerSm;
  const unsigned grid = static_cast<unsigned>(chunks < cap ? chunks : cap);
  bulk_copy_sm90_kernel<<<grid, kBulkThreads, 0, stream>>>(
      static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), body);
  check_launch("copy (sm90 bulk)");
  if (body < nbytes) {
    copy_portable(static_cast<unsigned char*>(dst) + body,
                  static_cast<const unsigned char*>(src) + body, nbytes - body, stream);
  }
  return true;
}

}  // namespace fk
