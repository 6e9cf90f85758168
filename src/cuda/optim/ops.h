// The CUDA implementations of the optimizer updates, registered as "cuda" by
// register_cuda_backend() (src/cuda/backend.cu). Arguments arrive checked by
// the op front end (src/ops/optim); each run enqueues on `stream`, checks
// every launch and throws lowbit::Error(device_error) on a CUDA failure.
#pragma once

#include <cstddef>

#include "lowbit/ops/optim.h"

namespace lowbit::cuda {

void optimizer_update_32bit(const OptimizerUpdate32bitArgs& a, void* workspace, Stream stream);
// The per-CTA partial sums of the update norm (max_unorm > 0), else 0.
size_t optimizer_update_32bit_workspace(const OptimizerUpdate32bitArgs& a);
void optimizer_update_8bit(const OptimizerUpdate8bitArgs& a, void* workspace, Stream stream);
// The per-CTA maxima and norm sums of the first pass.
size_t optimizer_update_8bit_workspace(const OptimizerUpdate8bitArgs& a);
// One launch per table of tensors (two with the norms); the workspace holds
// every tensor's partial sums of the update norm.
void optimizer_update_32bit_multi(const OptimizerUpdate32bitMultiArgs& a, void* workspace, Stream stream);
size_t optimizer_update_32bit_multi_workspace(const OptimizerUpdate32bitMultiArgs& a);
void optimizer_update_8bit_blockwise(const OptimizerUpdate8bitBlockwiseArgs& a, void* workspace, Stream stream);
void optimizer_update_8bit_blockwise_multi(const OptimizerUpdate8bitBlockwiseMultiArgs& a, void* workspace,
                                           Stream stream);
void percentile_clipping(const PercentileClippingArgs& a, void* workspace, Stream stream);
// The per-CTA partial sums of the squared norm.
size_t percentile_clipping_workspace(const PercentileClippingArgs& a);

}  // namespace lowbit::cuda
