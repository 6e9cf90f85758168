#include "ops/optim/checks.h"

#include <string>

#include "core/check.h"

namespace lowbit::ops::optim {

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

void require_rule(const char* op, Optimizer o, std::span<const Optimizer> rules) {
  std::string known;
  for (Optimizer r : rules) {
    if (r == o) return;
    known += known.empty() ? optimizer_name(r) : core::cat(", ", optimizer_name(r));
  }
  core::fail(ErrorCode::invalid_argument,
             core::cat(op, ": optimizer must be one of ", known, " (got ", optimizer_name(o), ")"));
}

int64_t require_gradient_and_parameter(const char* op, const TensorRef& g, const TensorRef& p) {
  core::require_present(op, "g", g);
  core::require_dtype(op, "g", g, core::kFloatDTypes);
  core::require_contiguous(op, "g", g);
  core::require_present(op, "p", p);
  LOWBIT_REQUIRE(p.dtype == g.dtype, ErrorCode::invalid_argument, op, ": p must have g's dtype ", dtype_name(g.dtype),
                 " (got ", dtype_name(p.dtype), ")");
  core::require_contiguous(op, "p", p);
  core::require_numel(op, "p", p, g.numel());
  return g.numel();
}

}  // namespace lowbit::ops::optim
