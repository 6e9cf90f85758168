// Front end of estimate_quantiles (bitsandbytes semantics, exact).
#include <cmath>
#include <vector>

#include "core/check.h"
#include "ops/common.h"
#include "ops/dispatch.h"

namespace lowbit {

void check(const EstimateQuantilesArgs& a) {
  const char* op = EstimateQuantilesArgs::kName;
  core::require_present(op, "input", a.input);
  core::require_dtype(op, "input", a.input, core::kFloatDTypes);
  core::require_contiguous(op, "input", a.input);
  LOWBIT_REQUIRE(a.input.numel() >= 256, ErrorCode::invalid_argument, op,
                 ": input needs at least 256 values (got ", a.input.numel(), ")");
  LOWBIT_REQUIRE(a.offset > 0.0f && a.offset < 0.5f, ErrorCode::invalid_argument, op,
                 ": offset must be in (0, 0.5) (got ", a.offset, ")");
  core::require_present(op, "out", a.out);
  core::require_dtype(op, "out", a.out, {DType::f32});
  core::require_contiguous(op, "out", a.out);
  core::require_numel(op, "out", a.out, 256);
  core::require_same_device(op, {{"input", &a.input}, {"out", &a.out}});
}
size_t workspace_size(const EstimateQuantilesArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const EstimateQuantilesArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

Tensor estimate_quantiles(const TensorRef& input, float offset, int num_quantiles, Stream stream) {
  const char* op = EstimateQuantilesArgs::kName;
  LOWBIT_REQUIRE(num_quantiles >= 1 && num_quantiles <= 256, ErrorCode::invalid_argument, op,
                 ": num_quantiles must be from 1 to 256 (got ", num_quantiles, ")");
  core::require_present(op, "input", input);
  if (num_quantiles < 256 && offset == 1.0f / 512.0f) offset = 1.0f / (2.0f * static_cast<float>(num_quantiles));
  Tensor out = Tensor::empty({256}, DType::f32, input.device, stream);
  EstimateQuantilesArgs args{input, out, offset};
  ops::run_with_workspace(args, input.device, stream);
  if (num_quantiles == 256) return out;
  // bitsandbytes: out[torch.linspace(0, 255, num_quantiles).long()], the
  // linspace in float32 as torch computes it (from both ends). Gathered by
  // device copies of runs of consecutive picks: nothing waits.
  std::vector<int64_t> picks(static_cast<size_t>(num_quantiles));
  const float step = num_quantiles == 1 ? 0.0f : 255.0f / static_cast<float>(num_quantiles - 1);
  for (int i = 0; i < num_quantiles; ++i) {
    const float pos = i < num_quantiles / 2 ? static_cast<float>(i) * step
                                            : 255.0f - static_cast<float>(num_quantiles - 1 - i) * step;
    picks[static_cast<size_t>(i)] = static_cast<int64_t>(pos);
  }
  Tensor picked = Tensor::empty({num_quantiles}, DType::f32, input.device, stream);
  for (int64_t i = 0; i < num_quantiles;) {
    int64_t run_length = 1;
    while (i + run_length < num_quantiles &&
           picks[static_cast<size_t>(i + run_length)] == picks[static_cast<size_t>(i)] + run_length) {
      ++run_length;
    }
    const TensorRef dst = TensorRef::contiguous(picked.ptr<float>() + i, DType::f32, {run_length}, input.device);
    const TensorRef src = TensorRef::contiguous(out.ptr<float>() + picks[static_cast<size_t>(i)], DType::f32,
                                                {run_length}, input.device);
    copy(dst, src, stream);
    i += run_length;
  }
  return picked;
}

}  // namespace lowbit
