// percentile_clipping's rules (docs/optim.md, "Percentile clipping"), one
// definition for every backend.
#pragma once

#include <cstdint>

#include "core/hd.h"
#include "lowbit/ops/optim.h"

namespace lowbit::core::optim {

// One term of the squared norm: x² in float64, exact for an fp32 x.
LOWBIT_HD double squared_term(float x) {
  const double d = x;
  return d * d;
}

// Records the step's squared norm: every slot at step 1 (bitsandbytes'
// kPercentileClipping seeds the history with the first norm), else slot
// step % kHistory.
LOWBIT_HD void record_gnorm(float* gnorm_vec, int64_t step, float norm2) {
  constexpr int64_t kHistory = PercentileClippingArgs::kHistory;
  if (step == 1) {
    for (int64_t i = 0; i < kHistory; ++i) gnorm_vec[i] = norm2;
  } else {
    gnorm_vec[step % kHistory] = norm2;
  }
}

}  // namespace lowbit::core::optim
