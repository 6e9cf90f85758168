// The C ABI of the optimizer updates and percentile clipping (lowbit/c/lowbit.h,
// "optimizers"): DLTensors in, Args out, then the op's own check,
// stream-ordered scratch (the CUDA norms' partial sums) and run.
#include "lowbit/ops/optim.h"

#include <string>
#include <vector>

#include "capi/capi.h"
#include "core/check.h"
#include "ops/dispatch.h"

using namespace lowbit;  // NOLINT(google-build-using-namespace): this file only forwards
using capi::guarded;
using capi::to_ref;

namespace {

// The name, the tensors and the constants every update takes, NULLs checked first.
template <class Args>
void set_common(Args& a, const char* optimizer_name, const lowbit_optimizer_hparams* hparams, const DLTensor* g,
                DLTensor* p, DLTensor* state1, DLTensor* state2, const char* op = Args::kName) {
  LOWBIT_REQUIRE(optimizer_name != nullptr, ErrorCode::invalid_argument, op, ": optimizer_name is NULL");
  LOWBIT_REQUIRE(hparams != nullptr, ErrorCode::invalid_argument, op, ": hparams is NULL");
  a.optimizer = optimizer_from_name(optimizer_name, op);
  const lowbit_optimizer_hparams& h = *hparams;
  a.beta1 = h.beta1, a.beta2 = h.beta2, a.beta3 = h.beta3, a.alpha = h.alpha;
  a.eps = h.eps, a.weight_decay = h.weight_decay, a.lr = h.lr, a.gnorm_scale = h.gnorm_scale;
  a.step = h.step, a.skip_zeros = h.skip_zeros != 0;
  a.g = to_ref(op, "g", g);
  a.p = to_ref(op, "p", p);
  a.state1 = to_ref(op, "state1", state1);
  a.state2 = to_ref(op, "state2", state2);
}

// The list-wide constants of a multi update (the single update's, through set_common).
template <class Multi, class Single>
void copy_constants(Multi& m, const Single& a) {
  m.optimizer = a.optimizer;
  m.beta1 = a.beta1, m.beta2 = a.beta2, m.beta3 = a.beta3, m.alpha = a.alpha;
  m.eps = a.eps, m.weight_decay = a.weight_decay, m.lr = a.lr, m.gnorm_scale = a.gnorm_scale;
  m.step = a.step, m.skip_zeros = a.skip_zeros;
}

// Entry i of an array argument ("state2[3]"); absent where the array or its entry is NULL.
TensorRef entry_ref(const char* op, const char* name, const DLTensor* const* array, size_t i, bool required) {
  const std::string arg = core::cat(name, "[", i, "]");
  if (required) capi::require_not_null(op, name, array);
  return to_ref(op, arg.c_str(), array ? array[i] : nullptr);
}

}  // namespace

lowbit_status lowbit_optimizer_update_32bit(const char* optimizer_name, const DLTensor* g, DLTensor* p,
                                            DLTensor* state1, DLTensor* state2, DLTensor* unorm_vec,
                                            const lowbit_optimizer_hparams* hparams, void* stream) {
  constexpr const char* op = OptimizerUpdate32bitArgs::kName;
  return guarded(op, [&] {
    OptimizerUpdate32bitArgs a;
    set_common(a, optimizer_name, hparams, g, p, state1, state2);
    a.max_unorm = hparams->max_unorm;
    a.unorm_vec = to_ref(op, "unorm_vec", unorm_vec);
    ops::run_with_workspace(a, a.g.device, Stream{stream});
  });
}

lowbit_status lowbit_optimizer_update_8bit(const char* optimizer_name, const DLTensor* g, DLTensor* p,
                                          DLTensor* state1, DLTensor* state2, const DLTensor* qmap1,
                                          const DLTensor* qmap2, const DLTensor* max1, const DLTensor* max2,
                                          DLTensor* new_max1, DLTensor* new_max2, DLTensor* unorm_vec,
                                          const lowbit_optimizer_hparams* hparams, void* stream) {
  constexpr const char* op = OptimizerUpdate8bitArgs::kName;
  return guarded(op, [&] {
    LOWBIT_REQUIRE(optimizer_name != nullptr, ErrorCode::invalid_argument, op, ": optimizer_name is NULL");
    LOWBIT_REQUIRE(hparams != nullptr, ErrorCode::invalid_argument, op, ": hparams is NULL");
    const lowbit_optimizer_hparams& h = *hparams;
    LOWBIT_REQUIRE(h.beta3 == 0.0f && h.alpha == 0.0f && h.skip_zeros == 0, ErrorCode::invalid_argument, op,
                   ": 8-bit tensor-wise states take no beta3, alpha or skip_zeros: they must be 0 (got beta3 ",
                   h.beta3, ", alpha ", h.alpha, ", skip_zeros ", h.skip_zeros, ")");
    OptimizerUpdate8bitArgs a;
    a.optimizer = optimizer_from_name(optimizer_name, op);
    a.beta1 = h.beta1, a.beta2 = h.beta2, a.eps = h.eps, a.weight_decay = h.weight_decay, a.lr = h.lr;
    a.gnorm_scale = h.gnorm_scale, a.max_unorm = h.max_unorm, a.step = h.step;
    a.g = to_ref(op, "g", g);
    a.p = to_ref(op, "p", p);
    a.state1 = to_ref(op, "state1", state1);
    a.state2 = to_ref(op, "state2", state2);
    a.qmap1 = to_ref(op, "qmap1", qmap1);
    a.qmap2 = to_ref(op, "qmap2", qmap2);
    a.max1 = to_ref(op, "max1", max1);
    a.max2 = to_ref(op, "max2", max2);
    a.new_max1 = to_ref(op, "new_max1", new_max1);
    a.new_max2 = to_ref(op, "new_max2", new_max2);
    a.unorm_vec = to_ref(op, "unorm_vec", unorm_vec);
    ops::run_with_workspace(a, a.g.device, Stream{stream});
  });
}

lowbit_status lowbit_optimizer_update_8bit_blockwise(const char* optimizer_name, const DLTensor* g, DLTensor* p,
                                                     DLTensor* state1, DLTensor* state2, const DLTensor* qmap1,
                                                     const DLTensor* qmap2, DLTensor* absmax1, DLTensor* absmax2,
                                                     const lowbit_optimizer_hparams* hparams, void* stream) {
  constexpr const char* op = OptimizerUpdate8bitBlockwiseArgs::kName;
  return guarded(op, [&] {
    OptimizerUpdate8bitBlockwiseArgs a;
    set_common(a, optimizer_name, hparams, g, p, state1, state2);
    LOWBIT_REQUIRE(hparams->max_unorm == 0.0f, ErrorCode::invalid_argument, op,
                   ": 8-bit blockwise states have no trust ratio: hparams->max_unorm must be 0 (got ",
                   hparams->max_unorm, ")");
    a.qmap1 = to_ref(op, "qmap1", qmap1);
    a.qmap2 = to_ref(op, "qmap2", qmap2);
    a.absmax1 = to_ref(op, "absmax1", absmax1);
    a.absmax2 = to_ref(op, "absmax2", absmax2);
    ops::run_with_workspace(a, a.g.device, Stream{stream});
  });
}

lowbit_status lowbit_percentile_clipping(const DLTensor* grad, DLTensor* gnorm_vec, int64_t step, void* stream) {
  constexpr const char* op = PercentileClippingArgs::kName;
  return guarded(op, [&] {
    PercentileClippingArgs a;
    a.grad = to_ref(op, "grad", grad);
    a.gnorm_vec = to_ref(op, "gnorm_vec", gnorm_vec);
    a.step = step;
    ops::run_with_workspace(a, a.grad.device, Stream{stream});
  });
}

lowbit_status lowbit_optimizer_update_32bit_multi(const char* optimizer_name, size_t count, const DLTensor* const* g,
                                                  DLTensor* const* p, DLTensor* const* state1, DLTensor* const* state2,
                                                  DLTensor* const* unorm_vec, const lowbit_optimizer_hparams* hparams,
                                                  void* stream) {
  constexpr const char* op = OptimizerUpdate32bitMultiArgs::kName;
  return guarded(op, [&] {
    OptimizerUpdate32bitArgs constants;
    set_common(constants, optimizer_name, hparams, nullptr, nullptr, nullptr, nullptr, op);
    std::vector<OptimizerTensors32bit> params(count);
    for (size_t i = 0; i < count; ++i) {
      params[i] = {entry_ref(op, "g", g, i, true),
                   entry_ref(op, "p", p, i, true),
                   entry_ref(op, "state1", state1, i, true),
                   entry_ref(op, "state2", state2, i, false),
                   entry_ref(op, "unorm_vec", unorm_vec, i, false),
                   TensorRef{}};
    }
    OptimizerUpdate32bitMultiArgs a;
    copy_constants(a, constants);
    a.max_unorm = hparams->max_unorm;
    a.params = params;
    ops::run_with_workspace(a, count ? params[0].g.device : Device::cpu(), Stream{stream});
  });
}

lowbit_status lowbit_optimizer_update_8bit_blockwise_multi(const char* optimizer_name, size_t count,
                                                           const DLTensor* const* g, DLTensor* const* p,
                                                           DLTensor* const* state1, DLTensor* const* state2,
                                                           const DLTensor* qmap1, const DLTensor* qmap2,
                                                           DLTensor* const* absmax1, DLTensor* const* absmax2,
                                                           const lowbit_optimizer_hparams* hparams, void* stream) {
  constexpr const char* op = OptimizerUpdate8bitBlockwiseMultiArgs::kName;
  return guarded(op, [&] {
    OptimizerUpdate8bitBlockwiseArgs constants;
    set_common(constants, optimizer_name, hparams, nullptr, nullptr, nullptr, nullptr, op);
    LOWBIT_REQUIRE(hparams->max_unorm == 0.0f, ErrorCode::invalid_argument, op,
                   ": 8-bit blockwise states have no trust ratio: hparams->max_unorm must be 0 (got ",
                   hparams->max_unorm, ")");
    std::vector<OptimizerTensors8bitBlockwise> params(count);
    for (size_t i = 0; i < count; ++i) {
      params[i] = {entry_ref(op, "g", g, i, true),
                   entry_ref(op, "p", p, i, true),
                   entry_ref(op, "state1", state1, i, true),
                   entry_ref(op, "state2", state2, i, false),
                   entry_ref(op, "absmax1", absmax1, i, true),
                   entry_ref(op, "absmax2", absmax2, i, false),
                   TensorRef{}};
    }
    OptimizerUpdate8bitBlockwiseMultiArgs a;
    copy_constants(a, constants);
    a.params = params;
    a.qmap1 = to_ref(op, "qmap1", qmap1);
    a.qmap2 = to_ref(op, "qmap2", qmap2);
    ops::run_with_workspace(a, count ? params[0].g.device : Device::cpu(), Stream{stream});
  });
}
