// The C ABI between the attention dispatcher and the plugin library (libflashkern_attn.so).
// The dispatcher resolves these names with dlsym; keep them extern "C" and stable.
#pragma once

#define FK_ATTN_ABI_VERSION 1

// Tensors are contiguous [batch, heads, seq, head_dim]; dtype: 0 fp32, 1 fp16, 2 bf16.
// causal masks key j > query i (top-left aligned, as torch's is_causal). scale <= 0 means
// 1/sqrt(head_dim). Returns 0, a positive cudaError_t, or a negative argument error.
typedef int (*fk_attn_abi_version_fn)(void);
typedef const char* (*fk_attn_name_fn)(void);
typedef int (*fk_attn_forward_fn)(const void* q, const void* k, const void* v, void* out,
                                  int batch, int heads, int seq_q, int seq_k, int head_dim,
                                  int dtype, int causal, float scale, void* stream);
typedef const char* (*fk_attn_error_string_fn)(int code);

#define FK_ATTN_ERR_BAD_ARGS (-1)
#define FK_ATTN_ERR_HEAD_DIM (-2)
#define FK_ATTN_ERR_DTYPE (-3)
