// The CPU optimizer updates, registered by register_optim_ops().
#pragma once

#include <cstdint>
#include <memory>

#include "lowbit/ops/optim.h"

namespace lowbit::core::cpu {

class CodeEncoder;

void optimizer_update_32bit(const OptimizerUpdate32bitArgs& a, void* workspace, Stream stream);
void optimizer_update_8bit(const OptimizerUpdate8bitArgs& a, void* workspace, Stream stream);
void optimizer_update_8bit_blockwise(const OptimizerUpdate8bitBlockwiseArgs& a, void* workspace, Stream stream);
// Each entry through the single-tensor update above.
void optimizer_update_32bit_multi(const OptimizerUpdate32bitMultiArgs& a, void* workspace, Stream stream);
void optimizer_update_8bit_blockwise_multi(const OptimizerUpdate8bitBlockwiseMultiArgs& a, void* workspace,
                                           Stream stream);
void percentile_clipping(const PercentileClippingArgs& a, void* workspace, Stream stream);

// `a` with its clip_scale read on the host and folded into gnorm_scale (the
// one scale the element loops take; "Clip scale" in lowbit/ops/optim.h).
template <class Args>
Args with_clip_scale(const Args& a) {
  Args b = a;
  if (a.clip_scale.present()) {
    b.gnorm_scale = a.gnorm_scale * *static_cast<const float*>(a.clip_scale.data);
    b.clip_scale = TensorRef{};
  }
  return b;
}

// The code maps of 8-bit blockwise updates, prepared once for a call or a
// list: their midpoints and bucket tables (null: encode by binary search).
struct BlockwiseMaps {
  float mid1[255] = {}, mid2[255] = {};
  std::shared_ptr<const CodeEncoder> fast1, fast2;
};
// The maps of rule o for `elements` to encode (mid2 and fast2 for two-state rules only).
BlockwiseMaps blockwise_maps(Optimizer o, const TensorRef& qmap1, const TensorRef& qmap2, int64_t elements);
// optimizer_update_8bit_blockwise with its maps prepared.
void optimizer_update_8bit_blockwise(const OptimizerUpdate8bitBlockwiseArgs& a, const BlockwiseMaps& maps);

}  // namespace lowbit::core::cpu
