// Counter-based random inputs: element i of stream `seed` is the same bits on
// every run and every thread, so inputs are made in parallel and reproduced.
#pragma once

#include <cstdint>

namespace lowbit::bench {

// splitmix64's finalizer: 64 random-looking bits from a counter.
inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// A random bit pattern for element i of stream `seed`.
inline uint64_t random_bits(uint64_t seed, uint64_t i) { return mix(seed * 0x9e3779b97f4a7c15ull + i); }
// Roughly normal (sum of four uniforms), unit variance, from 64 random bits.
inline float normal_from_bits(uint64_t r) {
  double s = 0.0;
  for (int j = 0; j < 4; ++j) s += static_cast<double>((r >> (16 * j)) & 0xffffu) / 65535.0;
  return static_cast<float>((s - 2.0) * 1.7320508);
}

}  // namespace lowbit::bench
