// How far a restored (dequantized) weight lies from the original: sums in
// double over fixed chunks, added in order, so the figures do not depend on
// the thread count.
#pragma once

#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit::io::detail {

// Over the elements whose original and restored values are both finite: a
// NaN or Inf would make every sum NaN or Inf. The others are counted
// instead: `nonfinite` originals, and finite originals `lost` (restored as
// NaN or Inf, as when an Inf shares their block).
struct ErrorStats {
  double sq_err = 0.0, max_abs = 0.0, dot = 0.0, x_sq = 0.0, y_sq = 0.0;
  int64_t n = 0;          // pairs compared
  int64_t nonfinite = 0;  // originals that are NaN or Inf
  int64_t lost = 0;       // finite originals restored as NaN or Inf

  void merge(const ErrorStats& o);
  double rmse() const;
  double max_err() const;
  double cosine() const;   // 1 for two all-zero tensors
  double rms() const;      // of the original
};

// original: f32/f16/bf16 on the CPU; restored: f32 on the CPU, same numel.
ErrorStats compare(const TensorRef& original, const TensorRef& restored);

}  // namespace lowbit::io::detail
