// The front end of optimizer_update_8bit: argument checks, dispatch.
#include <string>

#include "core/check.h"
#include "core/optim_rules.h"
#include "lowbit/ops/optim.h"
#include "ops/common.h"
#include "ops/dispatch.h"

namespace lowbit {
namespace {

constexpr Optimizer kRules[] = {Optimizer::adam, Optimizer::momentum, Optimizer::rmsprop,
                                Optimizer::lion, Optimizer::lamb,     Optimizer::lars};

// The rules whose kernels compute the update's norm (a trust ratio).
bool has_unorm(Optimizer o) {
  return o == Optimizer::adam || o == Optimizer::lamb || o == Optimizer::momentum || o == Optimizer::lars;
}

// A present, contiguous tensor of `dtype` and `numel` elements.
void require_buffer(const char* op, const char* name, const TensorRef& t, DType dtype, int64_t numel) {
  core::require_present(op, name, t);
  core::require_dtype(op, name, t, {dtype});
  core::require_contiguous(op, name, t);
  core::require_numel(op, name, t, numel);
}

void require_absent(const char* op, const char* name, const TensorRef& t, Optimizer o) {
  LOWBIT_REQUIRE(!t.present(), ErrorCode::invalid_argument, op, ": ", optimizer_name(o), " keeps one state: ", name,
                 " must be absent (got ", core::shape_str(t), ")");
}

// A scale read by every element must not be the one the step writes.
void require_distinct(const char* op, const char* name, const TensorRef& t, const char* other, const TensorRef& u) {
  LOWBIT_REQUIRE(t.data != u.data, ErrorCode::invalid_argument, op, ": ", name, " must not share memory with ", other,
                 " (got the same address)");
}

}  // namespace

bool optimizer_has_8bit(Optimizer o) {
  for (Optimizer r : kRules) {
    if (r == o) return true;
  }
  return false;
}

void check(const OptimizerUpdate8bitArgs& a) {
  const char* op = OptimizerUpdate8bitArgs::kName;
  if (!optimizer_has_8bit(a.optimizer)) {
    std::string known;
    for (Optimizer r : kRules) known += known.empty() ? optimizer_name(r) : core::cat(", ", optimizer_name(r));
    core::fail(ErrorCode::invalid_argument,
               core::cat(op, ": optimizer must be one of ", known, " (got ", optimizer_name(a.optimizer), ")"));
  }
  core::require_present(op, "g", a.g);
  core::require_dtype(op, "g", a.g, core::kFloatDTypes);
  core::require_contiguous(op, "g", a.g);
  const int64_t n = a.g.numel();
  core::require_present(op, "p", a.p);
  LOWBIT_REQUIRE(a.p.dtype == a.g.dtype, ErrorCode::invalid_argument, op, ": p must have g's dtype ",
                 dtype_name(a.g.dtype), " (got ", dtype_name(a.p.dtype), ")");
  core::require_contiguous(op, "p", a.p);
  core::require_numel(op, "p", a.p, n);
  require_buffer(op, "state1", a.state1, DType::u8, n);
  ops::check_code_map(op, "qmap1", a.qmap1);
  require_buffer(op, "max1", a.max1, DType::f32, 1);
  require_buffer(op, "new_max1", a.new_max1, DType::f32, 1);
  require_distinct(op, "new_max1", a.new_max1, "max1", a.max1);
  if (core::optim::two_states(a.optimizer)) {
    require_buffer(op, "state2", a.state2, DType::u8, n);
    ops::check_code_map(op, "qmap2", a.qmap2);
    require_buffer(op, "max2", a.max2, DType::f32, 1);
    require_buffer(op, "new_max2", a.new_max2, DType::f32, 1);
    require_distinct(op, "new_max2", a.new_max2, "max2", a.max2);
  } else {
    require_absent(op, "state2", a.state2, a.optimizer);
    require_absent(op, "qmap2", a.qmap2, a.optimizer);
    require_absent(op, "max2", a.max2, a.optimizer);
    require_absent(op, "new_max2", a.new_max2, a.optimizer);
  }
  if (!has_unorm(a.optimizer)) {
    LOWBIT_REQUIRE(!(a.max_unorm > 0.0f) && !a.unorm_vec.present(), ErrorCode::invalid_argument, op, ": ",
                   optimizer_name(a.optimizer),
                   " has no trust ratio with 8-bit states: max_unorm must be 0 and unorm_vec absent (got max_unorm ",
                   a.max_unorm, ", unorm_vec ", core::shape_str(a.unorm_vec), ")");
  }
  if (a.max_unorm > 0.0f || a.unorm_vec.present()) require_buffer(op, "unorm_vec", a.unorm_vec, DType::f32, 1);
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
                                 {"unorm_vec", &a.unorm_vec}});
}
size_t workspace_size(const OptimizerUpdate8bitArgs& a) { return ops::backend_workspace(a, a.g.device); }
void run(const OptimizerUpdate8bitArgs& a, void* ws, Stream s) { ops::dispatch(a, a.g.device, ws, s); }

}  // namespace lowbit
