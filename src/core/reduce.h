// A summation order that every backend can reproduce bit for bit, for the
// statistics whose bits end up in a file (the nested-absmax offset).
//
// deterministic_sum(x[0..n)): in double.
//   Level 0: chunks of kTreeChunk = 1024 consecutive values, the last one
//   zero-padded; each chunk is reduced by the halving tree
//       for s = 512, 256, ..., 1:  v[t] = v[t] + v[t + s]   (t < s)
//   Level k + 1: the same over the chunk sums of level k, until one remains.
// A CUDA block of 256 threads reproduces it: thread t forms
// (x[t] + x[t+512]) + (x[t+256] + x[t+768]), then halves with shared memory
// down to 32 and with __shfl_down_sync (offsets 16..1) below.
#pragma once

#include <cstdint>
#include <vector>

namespace lowbit::core {

inline constexpr int kTreeChunk = 1024;

// Sum of one chunk of up to kTreeChunk values, by the halving tree.
template <class T>
double tree_sum_chunk(const T* x, int count) {
  double v[kTreeChunk];
  for (int i = 0; i < kTreeChunk; ++i) v[i] = i < count ? static_cast<double>(x[i]) : 0.0;
  for (int s = kTreeChunk / 2; s > 0; s >>= 1) {
    for (int t = 0; t < s; ++t) v[t] = v[t] + v[t + s];
  }
  return v[0];
}

template <class T>
double deterministic_sum(const T* x, int64_t n) {
  if (n <= 0) return 0.0;
  std::vector<double> level;
  level.reserve(static_cast<size_t>((n + kTreeChunk - 1) / kTreeChunk));
  for (int64_t i = 0; i < n; i += kTreeChunk) {
    level.push_back(tree_sum_chunk(x + i, static_cast<int>(n - i < kTreeChunk ? n - i : kTreeChunk)));
  }
  while (level.size() > 1) {
    std::vector<double> next;
    const int64_t m = static_cast<int64_t>(level.size());
    for (int64_t i = 0; i < m; i += kTreeChunk) {
      next.push_back(tree_sum_chunk(level.data() + i, static_cast<int>(m - i < kTreeChunk ? m - i : kTreeChunk)));
    }
    level.swap(next);
  }
  return level[0];
}

// The mean as stored: fp32 of (double sum / n).
inline float deterministic_mean(const float* x, int64_t n) {
  return static_cast<float>(deterministic_sum(x, n) / static_cast<double>(n));
}

}  // namespace lowbit::core
