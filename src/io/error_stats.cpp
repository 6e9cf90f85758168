#include "io/error_stats.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/float_convert.h"

namespace lowbit::io::detail {

void ErrorStats::merge(const ErrorStats& o) {
  sq_err += o.sq_err;
  max_abs = std::max(max_abs, o.max_abs);
  dot += o.dot;
  x_sq += o.x_sq;
  y_sq += o.y_sq;
  n += o.n;
  nonfinite += o.nonfinite;
  lost += o.lost;
}

double ErrorStats::rmse() const { return n ? std::sqrt(sq_err / static_cast<double>(n)) : 0.0; }
double ErrorStats::max_err() const { return max_abs; }
double ErrorStats::rms() const { return n ? std::sqrt(x_sq / static_cast<double>(n)) : 0.0; }
double ErrorStats::cosine() const {
  if (x_sq == 0.0 && y_sq == 0.0) return 1.0;
  if (x_sq == 0.0 || y_sq == 0.0) return 0.0;
  return dot / std::sqrt(x_sq * y_sq);
}

namespace {

template <class T>
ErrorStats chunk(const T* x, const float* y, int64_t n) {
  ErrorStats s;
  for (int64_t i = 0; i < n; ++i) {
    const double a = core::to_f32(x[i]);
    if (!std::isfinite(a)) {
      ++s.nonfinite;
      continue;
    }
    const double b = y[i];
    if (!std::isfinite(b)) {
      ++s.lost;
      continue;
    }
    const double d = b - a;
    s.sq_err += d * d;
    s.max_abs = std::max(s.max_abs, std::fabs(d));
    s.dot += a * b;
    s.x_sq += a * a;
    s.y_sq += b * b;
  }
  s.n = n - s.nonfinite - s.lost;
  return s;
}

template <class T>
ErrorStats compare_typed(const T* x, const float* y, int64_t n) {
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<ErrorStats> parts(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    parts[static_cast<size_t>(c)] = chunk(x + c * kChunk, y + c * kChunk, std::min(kChunk, n - c * kChunk));
  }
  ErrorStats total;
  for (const ErrorStats& p : parts) total.merge(p);
  return total;
}

}  // namespace

ErrorStats compare(const TensorRef& original, const TensorRef& restored) {
  constexpr const char* op = "compare";
  core::require_dtype(op, "original", original, core::kFloatDTypes);
  core::require_dtype(op, "restored", restored, {DType::f32});
  core::require_numel(op, "restored", restored, original.numel());
  LOWBIT_REQUIRE(original.device.is_cpu() && restored.device.is_cpu(), ErrorCode::invalid_argument, op,
                 ": both tensors must be on the CPU");
  const auto* y = restored.ptr<const float>();
  const int64_t n = original.numel();
  switch (original.dtype) {
    case DType::f16: return compare_typed(original.ptr<const core::Half>(), y, n);
    case DType::bf16: return compare_typed(original.ptr<const core::BFloat16>(), y, n);
    default: return compare_typed(original.ptr<const float>(), y, n);
  }
}

}  // namespace lowbit::io::detail
