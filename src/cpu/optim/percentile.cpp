// percentile_clipping on the CPU: the squared norm summed in float64
// (OpenMP for large gradients), then recorded in gnorm_vec; the step's
// gradient scale from it where asked.
#include <cstdint>

#include "core/float_convert.h"
#include "core/optim_percentile.h"
#include "cpu/optim/impls.h"
#include "cpu/quant/elementwise.h"

namespace lowbit::core::cpu {
namespace {

constexpr int64_t kParallelFrom = 1 << 16;  // elements; below, threads cost more than they save

template <class T>
void record(const PercentileClippingArgs& a) {
  const int64_t n = a.grad.numel();
  const T* g = static_cast<const T*>(a.grad.data);
  double sum = 0.0;
#pragma omp parallel for reduction(+ : sum) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) sum += optim::squared_term(to_f32(g[i]));
  auto* gnorm_vec = static_cast<float*>(a.gnorm_vec.data);
  optim::record_gnorm(gnorm_vec, a.step, static_cast<float>(sum));
  if (a.scale.present())
    *static_cast<float*>(a.scale.data) = optim::history_clip_scale(gnorm_vec, a.step, a.percentile);
}

}  // namespace

void percentile_clipping(const PercentileClippingArgs& a, void* /*workspace*/, Stream /*stream*/) {
  with_float_type(a.grad.dtype, PercentileClippingArgs::kName, [&](auto t) { record<decltype(t)>(a); });
}

}  // namespace lowbit::core::cpu
