// The CPU optimizer updates, registered by register_optim_ops().
#pragma once

#include "lowbit/ops/optim.h"

namespace lowbit::core::cpu {

void optimizer_update_32bit(const OptimizerUpdate32bitArgs& a, void* workspace, Stream stream);
void optimizer_update_8bit(const OptimizerUpdate8bitArgs& a, void* workspace, Stream stream);
void optimizer_update_8bit_blockwise(const OptimizerUpdate8bitBlockwiseArgs& a, void* workspace, Stream stream);
// Each entry through the single-tensor update above.
void optimizer_update_32bit_multi(const OptimizerUpdate32bitMultiArgs& a, void* workspace, Stream stream);
void optimizer_update_8bit_blockwise_multi(const OptimizerUpdate8bitBlockwiseMultiArgs& a, void* workspace,
                                           Stream stream);
void percentile_clipping(const PercentileClippingArgs& a, void* workspace, Stream stream);

}  // namespace lowbit::core::cpu
