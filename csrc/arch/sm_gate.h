// SM gating in the forms upstream trees use. Included by the tiled kernels (arch/*.cu).
#pragma once

// The architecture this compilation pass targets: __CUDA_ARCH__ in a device pass, 0 in the
// host pass (where kernel bodies are parsed but not compiled for a GPU).
#if defined(__CUDA_ARCH__)
#define FK_ARCH __CUDA_ARCH__
#else
#define FK_ARCH 0
#endif

// Blackwell datacenter (sm_100) path selector, spelled exactly as upstream spells it. Only
// meaningful inside `#if` in device code. sm_120 (RTX 50xx / RTX PRO 6000) is a different
// architecture and is NOT matched: a port extends this condition (macro-edit transform).
#define FK_IS_SM100 (__CUDA_ARCH__ == 1000)

// The allow-list of architectures the tiled kernels were tuned and tested on. Anything else
// stops the build, so that nobody ships untuned shared-memory budgets by accident.
// 1200 is deliberately absent: sm_120 allows 99 KB (101376 B) of shared memory per block and
// needs its own traits (see traits.h) before it may be added here.
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 900 || __CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1030
#define FK_ARCH_SUPPORTED 1
#else
#error "flashkern: unsupported __CUDA_ARCH__ for the tiled kernels (allow-list: 800 900 1000 1030)"
#endif
#endif
