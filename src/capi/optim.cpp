// The C ABI of the optimizer updates (lowbit/c/lowbit.h, "optimizers"):
// DLTensors in, Args out, then the op's own check, stream-ordered scratch
// (the CUDA trust ratio's partial sums) and run.
#include "lowbit/ops/optim.h"

#include "capi/capi.h"
#include "core/check.h"
#include "ops/dispatch.h"

using namespace lowbit;  // NOLINT(google-build-using-namespace): this file only forwards
using capi::guarded;
using capi::to_ref;

lowbit_status lowbit_optimizer_update_32bit(const char* optimizer_name, const DLTensor* g, DLTensor* p,
                                            DLTensor* state1, DLTensor* state2, DLTensor* unorm_vec,
                                            const lowbit_optimizer_hparams* hparams, void* stream) {
  constexpr const char* op = OptimizerUpdate32bitArgs::kName;
  return guarded(op, [&] {
    LOWBIT_REQUIRE(optimizer_name != nullptr, ErrorCode::invalid_argument, op, ": optimizer_name is NULL");
    LOWBIT_REQUIRE(hparams != nullptr, ErrorCode::invalid_argument, op, ": hparams is NULL");
    OptimizerUpdate32bitArgs a;
    a.optimizer = optimizer_from_name(optimizer_name, op);
    a.g = to_ref(op, "g", g);
    a.p = to_ref(op, "p", p);
    a.state1 = to_ref(op, "state1", state1);
    a.state2 = to_ref(op, "state2", state2);
    a.unorm_vec = to_ref(op, "unorm_vec", unorm_vec);
    const lowbit_optimizer_hparams& h = *hparams;
    a.beta1 = h.beta1, a.beta2 = h.beta2, a.beta3 = h.beta3, a.alpha = h.alpha;
    a.eps = h.eps, a.weight_decay = h.weight_decay, a.lr = h.lr, a.gnorm_scale = h.gnorm_scale;
    a.max_unorm = h.max_unorm, a.step = h.step, a.skip_zeros = h.skip_zeros != 0;
    ops::run_with_workspace(a, a.g.device, Stream{stream});
  });
}
