// The front end of percentile_clipping: argument checks, dispatch.
#include "core/check.h"
#include "lowbit/ops/optim.h"
#include "ops/dispatch.h"

namespace lowbit {

void check(const PercentileClippingArgs& a) {
  const char* op = PercentileClippingArgs::kName;
  core::require_present(op, "grad", a.grad);
  core::require_dtype(op, "grad", a.grad, core::kFloatDTypes);
  core::require_contiguous(op, "grad", a.grad);
  core::require_present(op, "gnorm_vec", a.gnorm_vec);
  core::require_dtype(op, "gnorm_vec", a.gnorm_vec, {DType::f32});
  core::require_contiguous(op, "gnorm_vec", a.gnorm_vec);
  core::require_numel(op, "gnorm_vec", a.gnorm_vec, PercentileClippingArgs::kHistory);
  LOWBIT_REQUIRE(a.step >= 1, ErrorCode::invalid_argument, op, ": step must be at least 1 (got ", a.step, ")");
  if (a.scale.present()) {
    core::require_dtype(op, "scale", a.scale, {DType::f32});
    core::require_numel(op, "scale", a.scale, 1);
    LOWBIT_REQUIRE(a.percentile >= 0 && a.percentile < PercentileClippingArgs::kHistory, ErrorCode::invalid_argument,
                   op, ": percentile must be from 0 to ", PercentileClippingArgs::kHistory - 1,
                   ", an index into the sorted norms (got ", a.percentile, ")");
  }
  core::require_same_device(op, {{"grad", &a.grad}, {"gnorm_vec", &a.gnorm_vec}, {"scale", &a.scale}});
}
size_t workspace_size(const PercentileClippingArgs& a) { return ops::backend_workspace(a, a.grad.device); }
void run(const PercentileClippingArgs& a, void* ws, Stream s) { ops::dispatch(a, a.grad.device, ws, s); }

}  // namespace lowbit
