// The optimizer updates' front end: names, argument checks, dispatch.
#include <string>

#include "core/check.h"
#include "core/optim_rules.h"
#include "lowbit/ops/optim.h"
#include "ops/dispatch.h"
#include "ops/optim/checks.h"

namespace lowbit {
namespace {

constexpr std::pair<Optimizer, const char*> kNames[] = {
    {Optimizer::adam, "adam"}, {Optimizer::momentum, "momentum"}, {Optimizer::rmsprop, "rmsprop"},
    {Optimizer::lion, "lion"}, {Optimizer::adagrad, "adagrad"},   {Optimizer::lamb, "lamb"},
    {Optimizer::lars, "lars"}, {Optimizer::ademamix, "ademamix"}};

// The entry of kNames for o, or null (an enum value outside the list).
const char* known_name(Optimizer o) {
  for (const auto& [k, n] : kNames) {
    if (k == o) return n;
  }
  return nullptr;
}

}  // namespace

Optimizer optimizer_from_name(std::string_view name, const char* op) {
  std::string known;
  for (const auto& [o, n] : kNames) {
    if (name == n) return o;
    known += known.empty() ? n : core::cat(", ", n);
  }
  core::fail(ErrorCode::invalid_argument,
             core::cat(op, ": optimizer_name must be one of ", known, " (got '", name, "')"));
}

const char* optimizer_name(Optimizer o) {
  const char* n = known_name(o);
  return n ? n : "unknown";
}

bool optimizer_has_state2(Optimizer o) { return core::optim::two_states(o); }

void ops::optim::check_update(const OptimizerUpdate32bitArgs& a, bool list_wide) {
  const char* op = OptimizerUpdate32bitArgs::kName;
  LOWBIT_REQUIRE(!list_wide || known_name(a.optimizer) != nullptr, ErrorCode::invalid_argument, op,
                 ": optimizer is not one of the known rules (got ", static_cast<int>(a.optimizer), ")");
  const int64_t n = ops::optim::require_gradient_and_parameter(op, a.g, a.p);
  ops::optim::require_buffer(op, "state1", a.state1, DType::f32, a.optimizer == Optimizer::ademamix ? 2 * n : n);
  if (optimizer_has_state2(a.optimizer)) {
    ops::optim::require_buffer(op, "state2", a.state2, DType::f32, n);
  } else {
    ops::optim::require_absent(op, "state2", a.state2, a.optimizer);
  }
  if (a.max_unorm > 0.0f || a.unorm_vec.present())
    ops::optim::require_buffer(op, "unorm_vec", a.unorm_vec, DType::f32, 1);
  if (a.clip_scale.present()) ops::optim::require_buffer(op, "clip_scale", a.clip_scale, DType::f32, 1);
  LOWBIT_REQUIRE(!list_wide || a.step >= 1, ErrorCode::invalid_argument, op, ": step must be at least 1 (got ", a.step,
                 ")");
  core::require_same_device(op, {{"g", &a.g},
                                 {"p", &a.p},
                                 {"state1", &a.state1},
                                 {"state2", &a.state2},
                                 {"unorm_vec", &a.unorm_vec},
                                 {"clip_scale", &a.clip_scale}});
}

void check(const OptimizerUpdate32bitArgs& a) { ops::optim::check_update(a, true); }
size_t workspace_size(const OptimizerUpdate32bitArgs& a) { return ops::backend_workspace(a, a.g.device); }
void run(const OptimizerUpdate32bitArgs& a, void* ws, Stream s) { ops::dispatch(a, a.g.device, ws, s); }

}  // namespace lowbit
