// percentile_clipping's rules (docs/optim.md, "Percentile clipping"), one
// definition for every backend.
#pragma once

#include <cmath>
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

// Sort order of the history: NaN after every number, as NumPy's sort puts it.
LOWBIT_HD bool is_nan(float x) { return x != x; }
LOWBIT_HD bool sorts_before(float a, float b) { return !is_nan(a) && (is_nan(b) || a < b); }

// Where slot i lands when the history is sorted stably: the slots that sort
// before it, and the equal ones before it. Each rank is taken by one slot.
LOWBIT_HD int64_t sorted_rank(const float* gnorm_vec, int64_t i) {
  constexpr int64_t kHistory = PercentileClippingArgs::kHistory;
  const float v = gnorm_vec[i];
  int64_t rank = 0;
  for (int64_t j = 0; j < kHistory; ++j) {
    const float w = gnorm_vec[j];
    const bool equal = is_nan(v) ? is_nan(w) : w == v;
    rank += sorts_before(w, v) || (equal && j < i);
  }
  return rank;
}

// The step's gradient scale from the current slot and the clip slot (both
// squared norms): clip / cur where cur > clip, else 1 (NaN compares false).
LOWBIT_HD float clip_scale(float current2, float clip2) {
  const float current = sqrtf(current2), clip = sqrtf(clip2);
  return current > clip ? clip / current : 1.0f;
}

// clip_scale over the whole history, one thread (the CPU's form).
inline float history_clip_scale(const float* gnorm_vec, int64_t step, int64_t percentile) {
  constexpr int64_t kHistory = PercentileClippingArgs::kHistory;
  float clip2 = gnorm_vec[0];
  for (int64_t i = 0; i < kHistory; ++i) {
    if (sorted_rank(gnorm_vec, i) == percentile) clip2 = gnorm_vec[i];
  }
  return clip_scale(gnorm_vec[step % kHistory], clip2);
}

}  // namespace lowbit::core::optim
