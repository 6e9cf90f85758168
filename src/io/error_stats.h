// How far a restored (dequantized) weight lies from the original: sums in
// double over fixed chunks, added in order, so the figures do not depend on
// the thread count.
#pragma once

#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit::io::detail {

struct ErrorStats {
  double sq_err = 0.0, max_abs = 0.0, dot = 0.0, x_sq = 0.0, y_sq = 0.0;
  int64_t n = 0;
  bool nan = false;

  void merge(const ErrorStats& o);
  double rmse() const;
  double max_err() const;  // NaN when any difference was NaN
  double cosine() const;   // 1 for two all-zero tensors
  double rms() const;      // of the original
};

// original: f32/f16/bf16 on the CPU; restored: f32 on the CPU, same numel.
ErrorStats compare(const TensorRef& original, const TensorRef& restored);

}  // namespace lowbit::io::detail
