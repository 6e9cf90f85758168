// The per-tensor tables of the optimizer kernels: a list of tensors travels
// as one kernel parameter (CUDA 12.1+ takes up to 32764 bytes of parameters
// on sm_70+), the single-tensor ops passing a one-entry table, and each CTA
// finds its tensor in it. Tensor t owns CTAs [first_cta, first_cta + ctas)
// of the grid and strides over its own work units (tiles, groups of blocks)
// with them, so a list runs as one grid of about one wave.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/hd.h"

namespace lowbit::cuda::optim {

// Kernel parameter bytes on sm_70+ with CUDA 12.1 and later.
constexpr int64_t kMaxParamBytes = 32764;
// Bytes a table kernel keeps for its parameters besides the table.
constexpr int64_t kOtherParamBytes = 512;

// The most entries of `Entry` one launch's table holds.
template <class Entry>
constexpr int kTableCapacity = static_cast<int>((kMaxParamBytes - kOtherParamBytes - 16) / sizeof(Entry));

// Up to kCap tensors of one launch; entries [0, count) are used, their
// first_cta ascending. Kernels take it as `const __grid_constant__`, so a
// CTA reads its entry from the parameter space in place, with no local copy.
template <class Entry, int kCap>
struct Table {
  Entry e[kCap];
  int count = 0;

#if defined(__CUDACC__)
  // The entry whose CTAs hold grid CTA `cta`: the last one starting at or before it.
  __device__ __forceinline__ int find(int cta) const {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (e[mid].first_cta <= cta) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }
#endif
};

// Waves of CTAs a launch is cut into: past one wave, the block scheduler
// evens out what rounding each tensor's share up leaves uneven.
constexpr int64_t kGridWaves = 4;

// CTAs of each tensor for a grid of about `wave` CTAs: every unit its own
// CTA where all fit, else shares in proportion to the units, rounded up (so
// no CTA takes more than ceil(total / wave) units, as in one tensor of the
// list's total size) and at least one each. One tensor gets min(units, wave),
// the single-tensor grid.
inline std::vector<int32_t> split_grid(const std::vector<int64_t>& units, int64_t wave) {
  int64_t total = 0;
  for (int64_t u : units) total += u;
  std::vector<int32_t> ctas(units.size());
  for (size_t t = 0; t < units.size(); ++t) {
    const int64_t share = total <= wave ? units[t] : core::ceil_div(units[t] * wave, total);
    ctas[t] = static_cast<int32_t>(std::max<int64_t>(1, std::min(units[t], share)));
  }
  return ctas;
}

}  // namespace lowbit::cuda::optim
