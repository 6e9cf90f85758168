// The CUDA implementations of the attention ops (lowbit/ops/attention.h),
// registered as "cuda" by register_cuda_backend() (src/cuda/backend.cu);
// docs/attention.md describes the kernels.
#pragma once

#include <cstddef>

#include "lowbit/ops/attention.h"

namespace lowbit::cuda {

// The workspace holds the split key ranges' partial outputs and log-sum-exps
// (none when the op runs unsplit).
void flash_attention(const FlashAttentionArgs& a, void* workspace, Stream stream);
size_t flash_attention_workspace(const FlashAttentionArgs& a);
void flash_attention_kvcache(const FlashAttentionKvcacheArgs& a, void* workspace, Stream stream);
size_t flash_attention_kvcache_workspace(const FlashAttentionKvcacheArgs& a);
// varlen: no workspace (its key ranges are not split).
void flash_attention_varlen(const FlashAttentionVarlenArgs& a, void* workspace, Stream stream);

}  // namespace lowbit::cuda
