// The front end of optimizer_update_8bit_blockwise: argument checks, dispatch.
#include <string>

#include "core/check.h"
#include "core/optim_rules.h"
#include "lowbit/ops/optim.h"
#include "ops/common.h"
#include "ops/dispatch.h"

namespace lowbit {
namespace {

constexpr Optimizer kRules[] = {Optimizer::adam, Optimizer::momentum, Optimizer::rmsprop,
                                Optimizer::lion, Optimizer::adagrad,  Optimizer::ademamix};

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

}  // namespace

bool optimizer_has_8bit_blockwise(Optimizer o) {
  for (Optimizer r : kRules) {
    if (r == o) return true;
  }
  return false;
}

void check(const OptimizerUpdate8bitBlockwiseArgs& a) {
  const char* op = OptimizerUpdate8bitBlockwiseArgs::kName;
  if (!optimizer_has_8bit_blockwise(a.optimizer)) {
    std::string known;
    for (Optimizer r : kRules) known += known.empty() ? optimizer_name(r) : core::cat(", ", optimizer_name(r));
    core::fail(ErrorCode::invalid_argument,
               core::cat(op, ": optimizer must be one of ", known, " (got ", optimizer_name(a.optimizer), ")"));
  }
  core::require_present(op, "g", a.g);
  core::require_dtype(op, "g", a.g, core::kFloatDTypes);
  core::require_contiguous(op, "g", a.g);
  const int64_t n = a.g.numel();
  const int64_t blocks = ops::ceil_div(n, OptimizerUpdate8bitBlockwiseArgs::kBlocksize);
  const bool mix = a.optimizer == Optimizer::ademamix;
  core::require_present(op, "p", a.p);
  LOWBIT_REQUIRE(a.p.dtype == a.g.dtype, ErrorCode::invalid_argument, op, ": p must have g's dtype ",
                 dtype_name(a.g.dtype), " (got ", dtype_name(a.p.dtype), ")");
  core::require_contiguous(op, "p", a.p);
  core::require_numel(op, "p", a.p, n);
  require_buffer(op, "state1", a.state1, DType::u8, mix ? 2 * n : n);
  ops::check_code_map(op, "qmap1", a.qmap1);
  require_buffer(op, "absmax1", a.absmax1, DType::f32, mix ? 2 * blocks : blocks);
  if (core::optim::two_states(a.optimizer)) {
    require_buffer(op, "state2", a.state2, DType::u8, n);
    ops::check_code_map(op, "qmap2", a.qmap2);
    require_buffer(op, "absmax2", a.absmax2, DType::f32, blocks);
  } else {
    require_absent(op, "state2", a.state2, a.optimizer);
    require_absent(op, "qmap2", a.qmap2, a.optimizer);
    require_absent(op, "absmax2", a.absmax2, a.optimizer);
  }
  LOWBIT_REQUIRE(a.step >= 1, ErrorCode::invalid_argument, op, ": step must be at least 1 (got ", a.step, ")");
  core::require_same_device(op, {{"g", &a.g},
                                 {"p", &a.p},
                                 {"state1", &a.state1},
                                 {"state2", &a.state2},
                                 {"qmap1", &a.qmap1},
                                 {"qmap2", &a.qmap2},
                                 {"absmax1", &a.absmax1},
                                 {"absmax2", &a.absmax2}});
}
size_t workspace_size(const OptimizerUpdate8bitBlockwiseArgs& a) { return ops::backend_workspace(a, a.g.device); }
void run(const OptimizerUpdate8bitBlockwiseArgs& a, void* ws, Stream s) { ops::dispatch(a, a.g.device, ws, s); }

}  // namespace lowbit
