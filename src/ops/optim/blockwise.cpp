// The front end of optimizer_update_8bit_blockwise: argument checks, dispatch.
#include <algorithm>
#include <iterator>

#include "core/check.h"
#include "core/optim_rules.h"
#include "lowbit/ops/optim.h"
#include "ops/common.h"
#include "ops/dispatch.h"
#include "ops/optim/checks.h"

namespace lowbit {
namespace {

constexpr Optimizer kRules[] = {Optimizer::adam, Optimizer::momentum, Optimizer::rmsprop,
                                Optimizer::lion, Optimizer::adagrad,  Optimizer::ademamix};

}  // namespace

bool optimizer_has_8bit_blockwise(Optimizer o) {
  return std::find(std::begin(kRules), std::end(kRules), o) != std::end(kRules);
}

void ops::optim::check_update(const OptimizerUpdate8bitBlockwiseArgs& a, bool list_wide) {
  const char* op = OptimizerUpdate8bitBlockwiseArgs::kName;
  if (list_wide) ops::optim::require_rule(op, a.optimizer, kRules);
  const int64_t n = ops::optim::require_gradient_and_parameter(op, a.g, a.p);
  const int64_t blocks = ops::ceil_div(n, OptimizerUpdate8bitBlockwiseArgs::kBlocksize);
  const bool mix = a.optimizer == Optimizer::ademamix;
  ops::optim::require_buffer(op, "state1", a.state1, DType::u8, mix ? 2 * n : n);
  if (list_wide) ops::check_code_map(op, "qmap1", a.qmap1);
  ops::optim::require_buffer(op, "absmax1", a.absmax1, DType::f32, mix ? 2 * blocks : blocks);
  if (core::optim::two_states(a.optimizer)) {
    ops::optim::require_buffer(op, "state2", a.state2, DType::u8, n);
    if (list_wide) ops::check_code_map(op, "qmap2", a.qmap2);
    ops::optim::require_buffer(op, "absmax2", a.absmax2, DType::f32, blocks);
  } else {
    ops::optim::require_absent(op, "state2", a.state2, a.optimizer);
    if (list_wide) ops::optim::require_absent(op, "qmap2", a.qmap2, a.optimizer);
    ops::optim::require_absent(op, "absmax2", a.absmax2, a.optimizer);
  }
  if (a.clip_scale.present()) ops::optim::require_buffer(op, "clip_scale", a.clip_scale, DType::f32, 1);
  LOWBIT_REQUIRE(!list_wide || a.step >= 1, ErrorCode::invalid_argument, op, ": step must be at least 1 (got ", a.step,
                 ")");
  const TensorRef none;  // the maps' devices: list-wide too
  core::require_same_device(op, {{"g", &a.g},
                                 {"p", &a.p},
                                 {"state1", &a.state1},
                                 {"state2", &a.state2},
                                 {"qmap1", list_wide ? &a.qmap1 : &none},
                                 {"qmap2", list_wide ? &a.qmap2 : &none},
                                 {"absmax1", &a.absmax1},
                                 {"absmax2", &a.absmax2},
                                 {"clip_scale", &a.clip_scale}});
}

void check(const OptimizerUpdate8bitBlockwiseArgs& a) { ops::optim::check_update(a, true); }
size_t workspace_size(const OptimizerUpdate8bitBlockwiseArgs& a) { return ops::backend_workspace(a, a.g.device); }
void run(const OptimizerUpdate8bitBlockwiseArgs& a, void* ws, Stream s) { ops::dispatch(a, a.g.device, ws, s); }

}  // namespace lowbit
