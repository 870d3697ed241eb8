// The attention plugin (libflashkern_attn.so), dlopen'ed by the dispatcher: SDPA forward, a
// FlashAttention-2-style tensor-core kernel (after the exports) for fp16/bf16 at head_dim 64 /
// 128, else a reference kernel. extern "C" exports; flashbuild adds dllexport for Windows DLLs.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>

#include "plugin_abi.h"

namespace {

constexpr int kMaxHeadDim = 128;
constexpr int kPerLane = kMaxHeadDim / 32;
constexpr int kWarpsPerBlock = 4;

template <typename T> __device__ __forceinline__ float ld(const T* p) { return static_cast<float>(*p); }
template <> __device__ __forceinline__ float ld<__half>(const __half* p) { return __half2float(*p); }
template <> __device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16* p) { return __bfloat162float(*p); }

template <typename T> __device__ __forceinline__ T st(float v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) sdpa_forward_kernel(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    T* __restrict__ out, int batch_heads, int seq_q, int seq_k, int head_dim, int causal,
    float scale) {
  const int lane = threadIdx.x & 31;
  const long long row = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= static_cast<long long>(batch_heads) * seq_q) return;
  const long long bh = row / seq_q;
  const int i = static_cast<int>(row % seq_q);
  const T* qr = q + row * head_dim;
  const T* kb = k + bh * seq_k * head_dim;
  const T* vb = v + bh * seq_k * head_dim;

  float qv[kPerLane], acc[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int e = lane + 32 * t;
    qv[t] = e < head_dim ? ld(qr + e) * scale : 0.0f;
    acc[t] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last = causal ? (i < seq_k - 1 ? i : seq_k - 1) : seq_k - 1;
  for (int j = 0; j <= last; ++j) {
    const T* kr = kb + static_cast<long long>(j) * head_dim;
    float s = 0.0f;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int e = lane + 32 * t;
      if (e < head_dim) s += qv[t] * ld(kr + e);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float m_new = fmaxf(m, s);
    const float corr = __expf(m - m_new);  // 0 on the first key (m = -inf)
    const float p = __expf(s - m_new);
    l = l * corr + p;
    const T* vr = vb + static_cast<long long>(j) * head_dim;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int e = lane + 32 * t;
      if (e < head_dim) acc[t] = acc[t] * corr + p * ld(vr + e);
    }
    m = m_new;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  T* orow = out + row * head_dim;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int e = lane + 32 * t;
    if (e < head_dim) orow[e] = st<T>(acc[t] * inv);
  }
}

template <typename T>
int launch(const void* q, const void* k, const void* v, void* out, int bh, int seq_q, int seq_k,
           int head_dim, int causal, float scale, cudaStream_t stream) {
  const long long rows = static_cast<long long>(bh) * seq_q;
  const unsigned grid = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  sdpa_forward_kernel<T><<<grid, kWarpsPerBlock * 32, 0, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      static_cast<T*>(out), bh, seq_q, seq_k, head_dim, causal, scale);
  return static_cast<int>(cudaGetLastError());
}

template <typename T> int dispatch_fa(const void*, const void*, const void*, void*, int, int, int,
                                      int, int, float, cudaStream_t);  // tensor cores: below

}  // namespace

extern "C" int fk_attn_abi_version(void) { return FK_ATTN_ABI_VERSION; }

extern "C" const char* fk_attn_name(void) { return "flashkern SDPA (FlashAttention-2-style)"; }

extern "C" const char* fk_attn_error_string(int code) {
  switch (code) {
    case 0: return "success";
    case FK_ATTN_ERR_BAD_ARGS: return "bad arguments (sizes must be > 0, pointers non-null)";
    case FK_ATTN_ERR_HEAD_DIM: return "head_dim must be <= 128";
    case FK_ATTN_ERR_DTYPE: return "dtype must be 0 (fp32), 1 (fp16) or 2 (bf16)";
    default: return code > 0 ? cudaGetErrorString(static_cast<cudaError_t>(code)) : "unknown error";
  }
}

extern "C" int fk_attn_forward(const void* q, const void* k, const void* v, void* out, int batch,
                               int heads, int seq_q, int seq_k, int head_dim, int dtype,
                               int causal, float scale, void* stream) {
  if (q == nullptr || k == nullptr || v == nullptr || out == nullptr || batch <= 0 ||
      heads <= 0 || seq_q <= 0 || seq_k <= 0 || head_dim <= 0) {
    return FK_ATTN_ERR_BAD_ARGS;
  }
  if (head_dim > kMaxHeadDim) return FK_ATTN_ERR_HEAD_DIM;
  const float s = scale > 0.0f ? scale : 1.0f / sqrtf(static_cast<float>(head_dim));
  const int bh = batch * heads;
  auto* st = static_cast<cudaStream_t>(stream);
  // The tensor-core kernel moves 16-byte chunks: it needs 16-byte aligned tensors (each row of
  // 64 or 128 16-bit elements then is too). Everything else takes the reference kernel.
  auto aligned16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  const bool tensor_core_path = (head_dim == 64 || head_dim == 128) && aligned16(q) &&
                                aligned16(k) && aligned16(v) && aligned16(out);
  switch (dtype) {
    case 0: return launch<float>(q, k, v, out, bh, seq_q, seq_k, head_dim, causal, s, st);
    case 1:
      if (tensor_core_path)
        return dispatch_fa<__half>(q, k, v, out, bh, seq_q, seq_k, head_dim, causal, s, st);
      return launch<__half>(q, k, v, out, bh, seq_q, seq_k, head_dim, causal, s, st);
    case 2:
      if (tensor_core_path)
        return dispatch_fa<__nv_bfloat16>(q, k, v, out, bh, seq_q, seq_k, head_dim, causal, s, st);
      return launch<__nv_bfloat16>(q, k, v, out, bh, seq_q, seq_k, head_dim, causal, s, st);
    default: return FK_ATTN_ERR_DTYPE;
  }
}

// ---- the tensor-core (FlashAttention-2-style) path --------------------------------------------
// fp16 / bf16, head_dim 64 or 128, 16-byte aligned buffers. A block owns 16 query rows per warp
// (8 warps for head_dim 64, 4 for 128: FaConfig); each warp keeps its Q rows in registers as
// mma fragments for the whole key loop. K and V tiles of kBlockN = 64 keys are staged through
// shared memory with cp.async (V's copy overlaps Q.K^T, the next K's overlaps P.V), read with
// ldmatrix (V transposed by ldmatrix.trans) and multiplied with mma.sync.m16n8k16 (fp32
// accumulators). mma.sync rather than Hopper's wgmma because it runs on sm_80 through sm_120
// (RTX 50xx has no wgmma): one plugin for every target. Online softmax in fp32 (exp2 with the
// scale folded in); no [seq_q, seq_k] matrix exists. Shared memory: Q + K + V tiles =
// (rows + 2 x 64) x head_dim x 2 B: 32 KB (head_dim 64) or 48 KB (128), under sm_120's 99 KB.

namespace {

// Warps per block (16 query rows each) for each head_dim, as measured fastest on an H200
// (csrc/README.md). head_dim 128 needs ~240 registers a thread: 8 warps would leave one block
// per SM, every barrier stalling the whole SM; 4 warps give two independent blocks (bf16
// (2, 16, 2048, 128) causal: 159 us against 187 us). head_dim 64 (~130 registers) does better
// with 8 warps: a K/V tile then serves 128 query rows (1, 16, 4096, 64): 234 us against 282 us.
// -DFK_ATTN_WARPS_HD64=N / -DFK_ATTN_WARPS_HD128=N (4 or 8) override them.
#ifndef FK_ATTN_WARPS_HD64
#define FK_ATTN_WARPS_HD64 8
#endif
#ifndef FK_ATTN_WARPS_HD128
#define FK_ATTN_WARPS_HD128 4
#endif
constexpr int kBlockN = 64;  // keys per shared-memory tile

template <int HD>
struct FaConfig {
  static constexpr int kWarps = HD == 64 ? FK_ATTN_WARPS_HD64 : FK_ATTN_WARPS_HD128;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = kWarps * 16;  // query rows per block: one mma M tile per warp
  static constexpr int kSmemBytes = (kBlockM + 2 * kBlockN) * HD * 2;  // Q, K, V tiles (16-bit)
  static_assert(kWarps == 4 || kWarps == 8, "4 or 8 warps per block");
  static_assert(kSmemBytes <= 101376, "sm_120 allows 101376 B of shared memory per block");
};

// Tiles are stored row-major with 16-byte chunks XOR-swizzled by (row & 7): the 8 row addresses
// an ldmatrix phase reads (same chunk, 8 consecutive rows) then fall in 8 different bank groups.
template <int HD>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * HD + ((chunk ^ (row & 7)) << 3);
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes = 0 zero-fills (rows past the end of the sequence:
// zeros, never stale data, so a masked 0 * garbage cannot make a NaN).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
               "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// rows [row0, row0 + ROWS) of a [seq, HD] matrix into a swizzled tile; rows >= seq zero-filled.
template <typename T, int HD, int ROWS>
__device__ __forceinline__ void load_tile(T* tile, const T* g, int row0, int seq, int tid) {
  constexpr int kThreads = FaConfig<HD>::kThreads;
  constexpr int kChunks = HD / 8;
  constexpr int kIters = ROWS * kChunks / kThreads;
  static_assert(ROWS * kChunks % kThreads == 0, "tile chunks must split evenly");
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int idx = tid + i * kThreads;
    const int r = idx / kChunks, c = idx % kChunks;
    const bool valid = row0 + r < seq;
    const T* src = g + static_cast<int64_t>(valid ? row0 + r : 0) * HD + c * 8;
    cp_async16(tile + swz<HD>(r, c), src, valid);
  }
}

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// D = A(16x16, row) * B(16x8, col) + D, fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const unsigned (&a)[4],
                                                        unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const unsigned (&a)[4],
                                                 unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one 32-bit register of T (the first in the low half, as mma fragments want).
template <typename T>
__device__ __forceinline__ unsigned pack2(float lo, float hi);
template <>
__device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}
template <>
__device__ __forceinline__ unsigned pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

__device__ __forceinline__ float fast_exp2(float x) {  // ex2.approx: exp2(-inf) = +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Fragment ownership (PTX ISA, mma.m16n8k16): lane = 4 * g + t. A C/D tile of 16 x 8 gives a
// lane rows g and g + 8, columns 2t and 2t + 1: d[0], d[1] (row g), d[2], d[3] (row g + 8).
template <typename T, int HD, bool kCausal>
__global__ void __launch_bounds__(FaConfig<HD>::kThreads) fa_forward_kernel(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    T* __restrict__ out, int seq_q, int seq_k, float scale_log2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bf16 mma.sync needs sm_80+; the host side never launches this below sm_80
#else
  constexpr int kKSteps = HD / 16;      // mma K steps over head_dim (Q.K^T)
  constexpr int kDTiles = HD / 8;       // 8-wide output column tiles (P.V)
  constexpr int kNTiles = kBlockN / 8;  // 8-wide score column tiles
  constexpr int kBlockM = FaConfig<HD>::kBlockM;
  extern __shared__ __align__(16) unsigned char fa_smem[];
  T* s_q = reinterpret_cast<T*>(fa_smem);
  T* s_k = s_q + kBlockM * HD;
  T* s_v = s_k + kBlockN * HD;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  // Causal blocks high in the sequence do the most work: start them first.
  const int m_block = kCausal ? static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x)
                              : static_cast<int>(blockIdx.x);
  const int64_t bh = blockIdx.y;
  const T* qb = q + bh * seq_q * HD;
  const T* kb = k + bh * seq_k * HD;
  const T* vb = v + bh * seq_k * HD;
  T* ob = out + bh * seq_q * HD;
  const int m0 = m_block * kBlockM;
  const int warp_row0 = m0 + warp * 16;  // this warp's first query row
  const int kv_end = kCausal ? min(seq_k, m0 + kBlockM) : seq_k;
  const int n_blocks = (kv_end + kBlockN - 1) / kBlockN;

  load_tile<T, HD, kBlockM>(s_q, qb, m0, seq_q, tid);
  load_tile<T, HD, kBlockN>(s_k, kb, 0, seq_k, tid);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // This warp's 16 Q rows, as A fragments, for the whole loop.
  unsigned qf[kKSteps][4];
#pragma unroll
  for (int kc = 0; kc < kKSteps; ++kc) {
    const int row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    ldsm_x4(qf[kc], s_q + swz<HD>(row, kc * 2 + (lane >> 4)));
  }

  float o[kDTiles][4];
#pragma unroll
  for (int d = 0; d < kDTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // this lane's partial sums; the quad is reduced at the end

  for (int nb = 0; nb < n_blocks; ++nb) {
    const int n0 = nb * kBlockN;
    load_tile<T, HD, kBlockN>(s_v, vb, n0, seq_k, tid);
    cp_async_commit();
    cp_async_wait<1>();  // K tile nb has landed (V tile nb may still be in flight)
    __syncthreads();

    // Under the causal mask a warp whose rows all precede this tile has nothing to add.
    const bool active = !kCausal || n0 <= warp_row0 + 15;
    float s[kNTiles][4];
    if (active) {
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int kc = 0; kc < kKSteps; ++kc) {
#pragma unroll
        for (int jp = 0; jp < kNTiles / 2; ++jp) {
          unsigned b[4];
          const int row = jp * 16 + (lane & 7) + (lane >> 4) * 8;
          ldsm_x4(b, s_k + swz<HD>(row, kc * 2 + ((lane >> 3) & 1)));
          mma16816<T>(s[2 * jp], qf[kc], b[0], b[1]);
          mma16816<T>(s[2 * jp + 1], qf[kc], b[2], b[3]);
        }
      }
      // Mask keys past the sequence and (causal) keys after the query row.
      if (n0 + kBlockN > seq_k || (kCausal && n0 + kBlockN - 1 > warp_row0)) {
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n0 + j * 8 + 2 * t + (e & 1);
            const int row = warp_row0 + g + (e >> 1) * 8;
            if (key >= seq_k || (kCausal && key > row)) s[j][e] = -INFINITY;
          }
        }
      }
      // Online softmax, fp32, per row (two per lane); max over the quad that shares a row.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(row_max[r], mx * scale_log2);
        // A row with every key masked so far keeps m = -inf: subtract 0 instead (p = 0).
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float corr = fast_exp2(row_max[r] - m_use);
        row_max[r] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          s[j][2 * r] = fast_exp2(fmaf(s[j][2 * r], scale_log2, -m_use));
          s[j][2 * r + 1] = fast_exp2(fmaf(s[j][2 * r + 1], scale_log2, -m_use));
          sum += s[j][2 * r] + s[j][2 * r + 1];
        }
        row_sum[r] = row_sum[r] * corr + sum;
#pragma unroll
        for (int d = 0; d < kDTiles; ++d) {
          o[d][2 * r] *= corr;
          o[d][2 * r + 1] *= corr;
        }
      }
    }

    __syncthreads();  // every warp is done reading this K tile
    if (nb + 1 < n_blocks) load_tile<T, HD, kBlockN>(s_k, kb, n0 + kBlockN, seq_k, tid);
    cp_async_commit();   // possibly empty: keeps the group count the waits rely on
    cp_async_wait<1>();  // V tile nb has landed
    __syncthreads();

    if (active) {
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        // The score accumulators of two 8-key tiles are exactly an A fragment of P.
        unsigned a[4];
        a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
        a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
        a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < kDTiles / 2; ++dp) {
          unsigned b[4];
          const int row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          ldsm_x4_trans(b, s_v + swz<HD>(row, dp * 2 + (lane >> 4)));
          mma16816<T>(o[2 * dp], a, b[0], b[1]);
          mma16816<T>(o[2 * dp + 1], a, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done reading this V tile before the next one lands
  }

  // Normalise, stage the warp's 16 rows through its own part of the Q tile (no longer read),
  // and write 16-byte chunks.
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[r] = l > 0.0f ? 1.0f / l : 0.0f;
  }
#pragma unroll
  for (int d = 0; d < kDTiles; ++d) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + g + r * 8;
      const int col = d * 8 + 2 * t;
      *reinterpret_cast<unsigned*>(s_q + swz<HD>(row, col >> 3) + (col & 7)) =
          pack2<T>(o[d][2 * r] * inv[r], o[d][2 * r + 1] * inv[r]);
    }
  }
  __syncwarp();
  constexpr int kChunks = HD / 8;
#pragma unroll
  for (int i = 0; i < 16 * kChunks / 32; ++i) {
    const int idx = lane + i * 32;
    const int r = idx / kChunks, c = idx % kChunks;
    const int row = warp * 16 + r;
    if (m0 + row < seq_q) {
      *reinterpret_cast<uint4*>(ob + static_cast<int64_t>(m0 + row) * HD + c * 8) =
          *reinterpret_cast<const uint4*>(s_q + swz<HD>(row, c));
    }
  }
#endif
}

template <typename T, int HD, bool kCausal>
int launch_fa(const void* q, const void* k, const void* v, void* out, int bh, int seq_q,
              int seq_k, float scale, cudaStream_t stream) {
  constexpr int smem = FaConfig<HD>::kSmemBytes;
  constexpr int kBlockM = FaConfig<HD>::kBlockM;
  auto kernel = fa_forward_kernel<T, HD, kCausal>;
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return static_cast<int>(err);
  const dim3 grid(static_cast<unsigned>((seq_q + kBlockM - 1) / kBlockM),
                  static_cast<unsigned>(bh));
  kernel<<<grid, FaConfig<HD>::kThreads, smem, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      static_cast<T*>(out), seq_q, seq_k, scale * 1.4426950408889634f);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int dispatch_fa(const void* q, const void* k, const void* v, void* out, int bh, int seq_q,
                int seq_k, int head_dim, int causal, float scale, cudaStream_t stream) {
  if (head_dim == 64) {
    return causal ? launch_fa<T, 64, true>(q, k, v, out, bh, seq_q, seq_k, scale, stream)
                  : launch_fa<T, 64, false>(q, k, v, out, bh, seq_q, seq_k, scale, stream);
  }
  return causal ? launch_fa<T, 128, true>(q, k, v, out, bh, seq_q, seq_k, scale, stream)
                : launch_fa<T, 128, false>(q, k, v, out, bh, seq_q, seq_k, scale, stream);
}

}  // namespace
