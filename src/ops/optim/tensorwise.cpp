// The front end of optimizer_update_8bit: argument checks, dispatch.
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
                                Optimizer::lion, Optimizer::lamb,     Optimizer::lars};

// The rules whose kernels compute the update's norm (a trust ratio).
bool has_unorm(Optimizer o) {
  return o == Optimizer::adam || o == Optimizer::lamb || o == Optimizer::momentum || o == Optimizer::lars;
}

// A scale read by every element must not be the one the step writes.
void require_distinct(const char* op, const char* name, const TensorRef& t, const char* other, const TensorRef& u) {
  LOWBIT_REQUIRE(t.data != u.data, ErrorCode::invalid_argument, op, ": ", name, " must not share memory with ", other,
                 " (got the same address)");
}

}  // namespace

bool optimizer_has_8bit(Optimizer o) { return std::find(std::begin(kRules), std::end(kRules), o) != std::end(kRules); }

void check(const OptimizerUpdate8bitArgs& a) {
  const char* op = OptimizerUpdate8bitArgs::kName;
  ops::optim::require_rule(op, a.optimizer, kRules);
  const int64_t n = ops::optim::require_gradient_and_parameter(op, a.g, a.p);
  ops::optim::require_buffer(op, "state1", a.state1, DType::u8, n);
  ops::check_code_map(op, "qmap1", a.qmap1);
  ops::optim::require_buffer(op, "max1", a.max1, DType::f32, 1);
  ops::optim::require_buffer(op, "new_max1", a.new_max1, DType::f32, 1);
  require_distinct(op, "new_max1", a.new_max1, "max1", a.max1);
  if (core::optim::two_states(a.optimizer)) {
    ops::optim::require_buffer(op, "state2", a.state2, DType::u8, n);
    ops::check_code_map(op, "qmap2", a.qmap2);
    ops::optim::require_buffer(op, "max2", a.max2, DType::f32, 1);
    ops::optim::require_buffer(op, "new_max2", a.new_max2, DType::f32, 1);
    require_distinct(op, "new_max2", a.new_max2, "max2", a.max2);
  } else {
    ops::optim::require_absent(op, "state2", a.state2, a.optimizer);
    ops::optim::require_absent(op, "qmap2", a.qmap2, a.optimizer);
    ops::optim::require_absent(op, "max2", a.max2, a.optimizer);
    ops::optim::require_absent(op, "new_max2", a.new_max2, a.optimizer);
  }
  if (!has_unorm(a.optimizer)) {
    LOWBIT_REQUIRE(!(a.max_unorm > 0.0f) && !a.unorm_vec.present(), ErrorCode::invalid_argument, op, ": ",
                   optimizer_name(a.optimizer),
                   " has no trust ratio with 8-bit states: max_unorm must be 0 and unorm_vec absent (got max_unorm ",
                   a.max_unorm, ", unorm_vec ", core::shape_str(a.unorm_vec), ")");
  }
  if (a.max_unorm > 0.0f || a.unorm_vec.present())
    ops::optim::require_buffer(op, "unorm_vec", a.unorm_vec, DType::f32, 1);
  if (a.clip_scale.present()) ops::optim::require_buffer(op, "clip_scale", a.clip_scale, DType::f32, 1);
  LOWBIT_REQUIRE(a.step >= 1, ErrorCode::invalid_argument, op, ": step must be at least 1 (got ", a.step, ")");
  core::require_same_device(op, {{"g", &a.g},
                                 {"p", &a.p},
                                 {"state1", &a.state1},
                                 {"state2", &a.state2},
                                 {"qmap1", &a.qmap1},
                                 {"qmap2", &a.qmap2},
                                 {"max1", &a.max1},
                                 {"max2", &a.max2},
                                 {"new_max1", &a.new_max1},
                                 {"new_max2", &a.new_max2},
                                 {"unorm_vec", &a.unorm_vec},
                                 {"clip_scale", &a.clip_scale}});
}
size_t workspace_size(const OptimizerUpdate8bitArgs& a) { return ops::backend_workspace(a, a.g.device); }
void run(const OptimizerUpdate8bitArgs& a, void* ws, Stream s) { ops::dispatch(a, a.g.device, ws, s); }

}  // namespace lowbit
