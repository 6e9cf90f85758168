// The 4-bit code tables and the decision rules that encode into them — the
// one definition in lowbit (docs/formats.md, "4-bit").
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hd.h"

namespace lowbit::core {

// NF4 (QLoRA): index = code, ascending.
#define LOWBIT_NF4_VALUES                                                                                      \
  -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,             \
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,          \
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,                   \
      0.7229568362236023f, 1.0f

// bitsandbytes FP4 (not OCP): codes 0..7 = 0, 0.0625, 8, 12, 4, 6, 2, 3 over
// 12; bit 3 is the sign. Values as fp32 quotients, as get_4bit_type('fp4')
// stores them in quant_map.
#define LOWBIT_FP4_VALUES                                                                                      \
  0.0f, 0.0625f / 12.0f, 8.0f / 12.0f, 12.0f / 12.0f, 4.0f / 12.0f, 6.0f / 12.0f, 2.0f / 12.0f, 3.0f / 12.0f, \
      -0.0f, -0.0625f / 12.0f, -8.0f / 12.0f, -12.0f / 12.0f, -4.0f / 12.0f, -6.0f / 12.0f, -2.0f / 12.0f,     \
      -3.0f / 12.0f

// bitsandbytes int4: 7, 6, ..., 0, -0, -1, ..., -7 over 7.
#define LOWBIT_INT4_VALUES                                                                                     \
  7.0f / 7.0f, 6.0f / 7.0f, 5.0f / 7.0f, 4.0f / 7.0f, 3.0f / 7.0f, 2.0f / 7.0f, 1.0f / 7.0f, 0.0f, -0.0f,      \
      -1.0f / 7.0f, -2.0f / 7.0f, -3.0f / 7.0f, -4.0f / 7.0f, -5.0f / 7.0f, -6.0f / 7.0f, -7.0f / 7.0f

// AbnormalFloat 4 (blocksize 64), descending as bitsandbytes stores it.
#define LOWBIT_AF4_VALUES                                                                                      \
  1.0f, 0.72424863f, 0.55496234f, 0.42563882f, 0.31675666f, 0.21961274f, 0.12934483f, 0.04273164f, 0.0f,      \
      -0.04934812f, -0.14982478f, -0.25607552f, -0.3736951f, -0.51243739f, -0.69441008f, -1.0f

// OCP MX / NVFP4 E2M1 element: not normalized; bit 3 is the sign.
#define LOWBIT_FP4_E2M1_VALUES \
  0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f

inline constexpr float kNf4Table[16] = {LOWBIT_NF4_VALUES};
inline constexpr float kFp4Table[16] = {LOWBIT_FP4_VALUES};
inline constexpr float kInt4Table[16] = {LOWBIT_INT4_VALUES};
inline constexpr float kAf4Table[16] = {LOWBIT_AF4_VALUES};
inline constexpr float kFp4E2m1Table[16] = {LOWBIT_FP4_E2M1_VALUES};

// Nearest-value encoding into a sorted table of 2^kBits values (the NF4
// table, an 8-bit code map): the code is the number of midpoints
// mid[i] = (table[i] + table[i + 1]) * 0.5f (fp32) that lie strictly below y,
// so an exact midpoint takes the lower code. NaN encodes like 0. Every
// backend encodes through these functions, so codes agree bit for bit.
LOWBIT_HD float code_midpoint(float a, float b) { return (a + b) * 0.5f; }

template <int kBits>
LOWBIT_HD uint32_t encode_by_midpoints(float y, const float* mid) {
  if (!(y == y)) y = 0.0f;
  uint32_t c = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (uint32_t step = 1u << (kBits - 1); step > 0; step >>= 1) {
    c += (y > mid[c + step - 1]) ? step : 0u;
  }
  return c;
}

// Midpoints of a sorted table of n values into mid[0 .. n-2].
LOWBIT_HD void table_midpoints(const float* table, int n, float* mid) {
  for (int i = 0; i + 1 < n; ++i) mid[i] = code_midpoint(table[i], table[i + 1]);
}

// bitsandbytes FP4 code of y: sign bit from y < 0; the magnitude code from
// bitsandbytes' own decision constants (slightly off the exact midpoints).
// Their decision tree is equivalent to counting the thresholds
// below |y| (they ascend) and mapping the count k through
// {0b000, 0b001, 0b110, 0b111, 0b100, 0b101, 0b010, 0b011}, packed in
// 0x32547610 — branch-free, so it vectorizes.
LOWBIT_HD uint32_t encode_fp4(float y) {
  const uint32_t sign = (y < 0.0f) ? 8u : 0u;
  const float a = fabsf(y);
  const uint32_t k = static_cast<uint32_t>(a > 0.00260417f) + static_cast<uint32_t>(a > 0.0859375f) +
                     static_cast<uint32_t>(a > 0.20833333f) + static_cast<uint32_t>(a > 0.29166667f) +
                     static_cast<uint32_t>(a > 0.4166667f) + static_cast<uint32_t>(a > 0.583333f) +
                     static_cast<uint32_t>(a > 0.8333333f);
  return sign | ((0x32547610u >> (4u * k)) & 7u);
}

}  // namespace lowbit::core
