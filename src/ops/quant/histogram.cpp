// Front end of histogram_scatter_add_2d (bitsandbytes semantics, indices
// checked by the backends: docs/formats.md, "2-D histograms").
#include <utility>

#include "core/check.h"
#include "lowbit/ops/quant.h"
#include "ops/dispatch.h"

namespace lowbit {

void check(const HistogramScatterAdd2dArgs& a) {
  const char* op = HistogramScatterAdd2dArgs::kName;
  core::require_present(op, "histogram", a.histogram);
  core::require_dtype(op, "histogram", a.histogram, {DType::f32});
  LOWBIT_REQUIRE(a.histogram.ndim == 2, ErrorCode::invalid_argument, op,
                 ": histogram must be 2-D [maxdim1, maxdim2] (got ", core::shape_str(a.histogram), ")");
  core::require_contiguous(op, "histogram", a.histogram);
  core::require_present(op, "source", a.source);
  core::require_dtype(op, "source", a.source, {DType::f32});
  core::require_contiguous(op, "source", a.source);
  const int64_t n = a.source.numel();
  for (const auto& [name, t] : {std::pair{"index1", &a.index1}, std::pair{"index2", &a.index2}}) {
    core::require_present(op, name, *t);
    core::require_dtype(op, name, *t, {DType::i32});
    core::require_contiguous(op, name, *t);
    core::require_numel(op, name, *t, n);
  }
  core::require_same_device(
      op, {{"histogram", &a.histogram}, {"index1", &a.index1}, {"index2", &a.index2}, {"source", &a.source}});
}
size_t workspace_size(const HistogramScatterAdd2dArgs& a) { return ops::backend_workspace(a, a.histogram.device); }
void run(const HistogramScatterAdd2dArgs& a, void* ws, Stream s) { ops::dispatch(a, a.histogram.device, ws, s); }

}  // namespace lowbit
