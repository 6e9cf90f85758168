#include "harness/compare.h"

#include <cmath>
#include <sstream>

namespace lowbit::test {

double unit_roundoff(DType d) {
  switch (d) {
    case DType::f16: return 0x1p-11;
    case DType::bf16: return 0x1p-8;
    default: return 0x1p-24;
  }
}

namespace {

// Half a float dtype's smallest subnormal spacing.
double subnormal_half_spacing(DType d) {
  switch (d) {
    case DType::f16: return 0x1p-25;
    case DType::bf16: return 0x1p-134;
    default: return 0x1p-150;
  }
}

}  // namespace

Tolerance matmul_tolerance(DType a_dtype, DType out_dtype, DType accum_dtype, int64_t K, DeviceType device) {
  Tolerance t;
  // The oracle's double is rounded once to fp32 (the reference's path) and
  // then to the output: a hair over one unit roundoff of the output.
  t.rel = unit_roundoff(out_dtype) * 1.01 + 0x1p-24;
  t.abs = subnormal_half_spacing(out_dtype) * 1.01;
  // fp32 products and a sum of K terms in any order (the fast path adds in
  // lanes and chunks): within (K + 2) u32 of Σ|a·w| in the worst case.
  t.terms = static_cast<double>(K + 2) * 0x1p-24;
  if (device == DeviceType::cuda) {
    // Tensor cores multiply W rounded to A's dtype: once by the kernels that
    // scale after the MMA, up to three times by the large-M wgmma kernel,
    // which scales in A's dtype (a table value, the scale and their product
    // each rounded once); fp16 accumulation adds a rounding per partial sum.
    t.terms += 3 * unit_roundoff(a_dtype);
    // ... and a weight rounded into A's subnormals errs by up to half their
    // spacing, absolutely: times Σ|a|.
    t.a_terms = subnormal_half_spacing(a_dtype) * 1.01;
    if (accum_dtype == DType::f16) t.terms += std::log2(static_cast<double>(K) + 1.0) * 0x1p-11;
  }
  return t;
}

void expect_close(const Oracle& want, const Tensor& got, const Tolerance& tol, const std::string& what) {
  const std::vector<float> g = to_floats(got);
  ASSERT_EQ(g.size(), want.value.size()) << what;
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    double bound = tol.rel * std::fabs(want.value[i]) + tol.terms * want.magnitude[i] + tol.abs;
    if (!want.a_magnitude.empty()) bound += tol.a_terms * want.a_magnitude[i];
    const double err = std::fabs(static_cast<double>(g[i]) - want.value[i]);
    const double ratio = std::isnan(err) ? INFINITY : err / (bound > 0 ? bound : 1e-300);
    if (ratio > 1.0) ++bad;
    if (ratio > worst_ratio || worst < 0) {
      worst_ratio = ratio;
      worst = static_cast<int64_t>(i);
    }
  }
  if (bad == 0) return;
  const size_t w = static_cast<size_t>(worst);
  ADD_FAILURE() << what << ": " << bad << " of " << g.size() << " elements outside the bound; worst at flat index "
                << worst << ": got " << g[w] << ", want " << want.value[w] << " (magnitude " << want.magnitude[w]
                << ", error " << worst_ratio << "x the bound); seed " << seed();
}

}  // namespace lowbit::test
