// Optimizer updates (docs/optim.md): one step of Adam / AdamW, SGD with
// momentum, RMSprop, Lion, Adagrad, LAMB, LARS or AdEMAMix on one parameter,
// in place, with 32-bit states or 8-bit tensor-wise or blockwise ones, the
// rules and their arithmetic as bitsandbytes' optimizer_update_32bit,
// optimizer_update_8bit and optimizer_update_8bit_blockwise apply them; and
// percentile clipping's gradient norm history.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "lowbit/ops/declare_op.h"
#include "lowbit/tensor.h"

namespace lowbit {

// The update rules. lamb is adam and lars is momentum, each with the update
// norm clipped to max_unorm times the parameter's norm (the trust ratio).
enum class Optimizer { adam, momentum, rmsprop, lion, adagrad, lamb, lars, ademamix };

// "adam", "momentum", ... as bitsandbytes names them; invalid_argument naming
// `op` and the known names otherwise.
Optimizer optimizer_from_name(std::string_view name, const char* op);
const char* optimizer_name(Optimizer o);
// Whether the rule keeps a second state (adam, lamb, ademamix).
bool optimizer_has_state2(Optimizer o);

// Clip scale: every update takes an optional `clip_scale`, an f32 [1] tensor
// on the gradient's device that the kernel reads, so a scale computed on the
// device (percentile clipping's, by percentile_clipping's `scale` output)
// reaches the update without a host round trip. The gradient is multiplied
// by gnorm_scale * clip_scale[0], that product rounded to f32 (exactly
// clip_scale[0] at the default gnorm_scale of 1).
struct OptimizerUpdate32bitArgs {
  static constexpr const char* kName = "optimizer_update_32bit";
  Optimizer optimizer = Optimizer::adam;
  TensorRef g;          // f32/f16/bf16 [n] (any shape), contiguous: the gradient
  TensorRef p;          // the parameter: g's dtype and numel, updated in place
  TensorRef state1;     // f32, numel n (ademamix: 2n, its two first moments), updated
  TensorRef state2;     // f32 numel n for adam, lamb and ademamix; absent otherwise
  TensorRef unorm_vec;  // f32 [1]: the update's squared norm, written when max_unorm > 0
  TensorRef clip_scale;  // f32 [1] on g's device, optional: a gradient scale read by the kernel ("Clip scale" above)
  float beta1 = 0.0f, beta2 = 0.0f, beta3 = 0.0f, alpha = 0.0f;
  float eps = 0.0f, weight_decay = 0.0f, lr = 0.0f;
  float gnorm_scale = 1.0f;  // the gradient is multiplied by it first
  float max_unorm = 0.0f;    // > 0: the update is scaled down to max_unorm * |p| at most
  int64_t step = 1;          // 1 for the first update
  bool skip_zeros = false;   // leave the elements whose gradient is 0 as they are
};

LOWBIT_DECLARE_OP(OptimizerUpdate32bitArgs)

// One step with tensor-wise 8-bit states, as bitsandbytes'
// optimizer_update_8bit: each state is stored as codes of its map times one
// scale for the whole tensor. Two passes: the new states' max |s| over the
// tensor (new_max1 / new_max2, with the trust ratio's norms), then the
// update, storing the states with those maxima (docs/optim.md, "8-bit
// tensor-wise states"). Rules: adam, momentum, rmsprop, lion, lamb, lars.
struct OptimizerUpdate8bitArgs {
  static constexpr const char* kName = "optimizer_update_8bit";
  Optimizer optimizer = Optimizer::adam;
  TensorRef g;          // f32/f16/bf16 [n] (any shape), contiguous: the gradient
  TensorRef p;          // the parameter: g's dtype and numel, updated in place
  TensorRef state1;     // u8 numel n: codes of qmap1, updated
  TensorRef state2;     // u8 numel n for adam and lamb: codes of qmap2, updated; absent otherwise
  TensorRef qmap1;      // f32 [256], sorted: state1's code map (bitsandbytes: the signed dynamic map)
  TensorRef qmap2;      // f32 [256], sorted, with state2 (the unsigned dynamic map)
  TensorRef max1;       // f32 [1]: the scale state1 is stored with
  TensorRef max2;       // f32 [1], with state2
  TensorRef new_max1;   // f32 [1], written: max |state1| after the step (the next step's max1)
  TensorRef new_max2;   // f32 [1], with state2, written
  TensorRef unorm_vec;  // f32 [1]: the update's squared norm, written (adam, lamb, momentum, lars)
  TensorRef clip_scale;  // f32 [1] on g's device, optional: a gradient scale read by the kernel ("Clip scale" above)
  float beta1 = 0.0f, beta2 = 0.0f, eps = 0.0f, weight_decay = 0.0f, lr = 0.0f;
  float gnorm_scale = 1.0f;  // the gradient is multiplied by it first
  float max_unorm = 0.0f;    // > 0: the update is scaled down to max_unorm * |p| at most
  int64_t step = 1;          // 1 for the first update
};

// Whether optimizer_update_8bit has the rule (bitsandbytes' 8-bit tensor-wise
// kernels: no adagrad or ademamix).
bool optimizer_has_8bit(Optimizer o);

LOWBIT_DECLARE_OP(OptimizerUpdate8bitArgs)

// One step with 8-bit blockwise states, as bitsandbytes'
// optimizer_update_8bit_blockwise: per block of kBlocksize elements the
// states are dequantized (code * absmax), updated with p, and quantized again
// with the block's new absmax (docs/optim.md, "8-bit blockwise states").
// Rules: adam, momentum, rmsprop, lion, adagrad, ademamix.
struct OptimizerUpdate8bitBlockwiseArgs {
  static constexpr const char* kName = "optimizer_update_8bit_blockwise";
  static constexpr int64_t kBlocksize = 256;  // bitsandbytes' BLOCKSIZE_1STATE and BLOCKSIZE_2STATE
  Optimizer optimizer = Optimizer::adam;
  TensorRef g;        // f32/f16/bf16 [n] (any shape), contiguous: the gradient
  TensorRef p;        // the parameter: g's dtype and numel, updated in place
  TensorRef state1;   // u8, numel n (ademamix: 2n, m1 then m2): codes of qmap1, updated
  TensorRef state2;   // u8 numel n for adam and ademamix: codes of qmap2, updated; absent otherwise
  TensorRef qmap1;    // f32 [256], sorted: state1's code map (bitsandbytes: the signed dynamic map)
  TensorRef qmap2;    // f32 [256], sorted, with state2 (the unsigned dynamic map)
  TensorRef absmax1;  // f32, one per block of state1 (ademamix: m1's blocks, then m2's), updated
  TensorRef absmax2;  // f32, one per block, with state2, updated
  TensorRef clip_scale;  // f32 [1] on g's device, optional: a gradient scale read by the kernel ("Clip scale" above)
  float beta1 = 0.0f, beta2 = 0.0f, beta3 = 0.0f, alpha = 0.0f;
  float eps = 0.0f, weight_decay = 0.0f, lr = 0.0f;
  float gnorm_scale = 1.0f;  // the gradient is multiplied by it first
  int64_t step = 1;          // 1 for the first update
  bool skip_zeros = false;   // one-state rules: leave the elements whose gradient is 0 as they are
};

// Whether optimizer_update_8bit_blockwise has the rule (bitsandbytes has no
// 8-bit blockwise lamb or lars).
bool optimizer_has_8bit_blockwise(Optimizer o);

LOWBIT_DECLARE_OP(OptimizerUpdate8bitBlockwiseArgs)

// ------------------------------------------------- multi-tensor updates
// One step over a list of parameters in one call, as torch's fused and
// _foreach optimizers take them: one rule, one step and one set of
// constants for the list, each parameter with its own tensors. Every entry
// is checked as the single-tensor op checks it; g and p have one dtype over
// the list; every tensor is on one device. The result of each parameter is
// bit for bit what the single-tensor op gives it (docs/optim.md,
// "Multi-tensor updates"); on CUDA the list is one launch (two with the
// trust ratio) up to the entries a kernel's parameters hold.

// One parameter's tensors, as OptimizerUpdate32bitArgs takes them.
struct OptimizerTensors32bit {
  TensorRef g, p, state1, state2, unorm_vec, clip_scale;
};

struct OptimizerUpdate32bitMultiArgs {
  static constexpr const char* kName = "optimizer_update_32bit_multi";
  Optimizer optimizer = Optimizer::adam;
  std::span<const OptimizerTensors32bit> params;  // the list (empty: nothing to do)
  float beta1 = 0.0f, beta2 = 0.0f, beta3 = 0.0f, alpha = 0.0f;
  float eps = 0.0f, weight_decay = 0.0f, lr = 0.0f;
  float gnorm_scale = 1.0f;
  float max_unorm = 0.0f;  // > 0: each parameter's update scaled by its own norms (unorm_vec each)
  int64_t step = 1;
  bool skip_zeros = false;

  // The single-tensor update of params[i].
  OptimizerUpdate32bitArgs entry(size_t i) const;
};

LOWBIT_DECLARE_OP(OptimizerUpdate32bitMultiArgs)

// One parameter's tensors, as OptimizerUpdate8bitBlockwiseArgs takes them;
// the code maps are the list's.
struct OptimizerTensors8bitBlockwise {
  TensorRef g, p, state1, state2, absmax1, absmax2, clip_scale;
};

struct OptimizerUpdate8bitBlockwiseMultiArgs {
  static constexpr const char* kName = "optimizer_update_8bit_blockwise_multi";
  Optimizer optimizer = Optimizer::adam;
  std::span<const OptimizerTensors8bitBlockwise> params;  // the list (empty: nothing to do)
  TensorRef qmap1;  // f32 [256], sorted: every state1's map
  TensorRef qmap2;  // f32 [256], sorted: every state2's map (two-state rules)
  float beta1 = 0.0f, beta2 = 0.0f, beta3 = 0.0f, alpha = 0.0f;
  float eps = 0.0f, weight_decay = 0.0f, lr = 0.0f;
  float gnorm_scale = 1.0f;
  int64_t step = 1;
  bool skip_zeros = false;

  OptimizerUpdate8bitBlockwiseArgs entry(size_t i) const;
};

LOWBIT_DECLARE_OP(OptimizerUpdate8bitBlockwiseMultiArgs)

// The device step of bitsandbytes' percentile_clipping: the gradient's
// squared L2 norm (summed in float64, stored as fp32) goes into gnorm_vec,
// into every slot at step 1 and into slot step % 100 after. With `scale`,
// the step's gradient scale is written there too, on the device: clip / cur
// when cur > clip, else 1, where cur = sqrt(gnorm_vec[step % 100]) and clip
// = sqrt of the percentile-th smallest slot (NaN sorting last), each sqrt
// and the quotient rounded to f32 -- an update's clip_scale. Without it the
// caller reads gnorm_vec back (docs/optim.md, "Percentile clipping").
struct PercentileClippingArgs {
  static constexpr const char* kName = "percentile_clipping";
  static constexpr int64_t kHistory = 100;  // gnorm_vec's slots, as bitsandbytes keeps them
  TensorRef grad;       // f32/f16/bf16 (any shape), contiguous: the gradient
  TensorRef gnorm_vec;  // f32 [kHistory], contiguous: the past squared norms, written
  TensorRef scale;      // f32 [1] on grad's device, optional, written: the step's gradient scale
  int64_t step = 1;     // 1 for the first step
  int64_t percentile = 5;  // with scale: which sorted slot is the clip value, 0 to kHistory - 1
};

LOWBIT_DECLARE_OP(PercentileClippingArgs)

}  // namespace lowbit
