// The C ABI of the optimizer updates and percentile clipping (lowbit/c/lowbit.h,
// "optimizers"): DLTensors in, Args out, then the op's own check,
// stream-ordered scratch (the CUDA norms' partial sums) and run.
#include "lowbit/ops/optim.h"

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
                DLTensor* p, DLTensor* state1, DLTensor* state2) {
  constexpr const char* op = Args::kName;
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
