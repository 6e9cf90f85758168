// Per-element and per-block arithmetic shared by every backend's quantization
// kernels. Each rule is written once here so the CPU and CUDA backends give
// identical bits (docs/formats.md). No fast-math: every division and
// reciprocal is correctly rounded.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/float_convert.h"
#include "core/hd.h"
#include "lowbit/ops/int8_gemm.h"

namespace lowbit::core {

// Block statistic: max |x|, NaN ignored (as fmaxf would), written as a
// compare-select so CPU compilers vectorize it (maxps).
LOWBIT_HD float absmax_update(float acc, float x) {
  const float a = fabsf(x);
  return a > acc ? a : acc;
}

// 1 / absmax, correctly rounded; 0 for an all-zero block so it encodes as
// 0 and decodes to exactly 0 (never NaN).
LOWBIT_HD float absmax_reciprocal(float absmax) { return absmax > 0.0f ? 1.0f / absmax : 0.0f; }

// Tensor-wise 8-bit (bitsandbytes' quantize): x / absmax, one correctly
// rounded division as its A / absmax; 0 for an all-zero tensor (never NaN).
LOWBIT_HD float tensorwise_normalize(float x, float absmax) { return absmax > 0.0f ? x / absmax : 0.0f; }

// A double-quantized absmax (docs/formats.md, "Nested absmax"): code2[q] * absmax2 + offset,
// multiply then add, each rounded (no FMA).
LOWBIT_HD float nested_absmax_decode(float code_value, float absmax2, float offset) {
  return add_rn(mul_rn(code_value, absmax2), offset);
}

// --- FP8 block scaling (DeepSeek-V3)
inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kFp8MinAmax = 1e-4f;

// Smallest power of two >= s (s positive and normal, or +Inf).
LOWBIT_HD float round_up_pow2(float s) {
  const uint32_t b = float_bits(s);
  if ((b & 0x7fffffu) == 0 || (b & 0x7f800000u) == 0x7f800000u) return s;
  return bits_float((b & 0x7f800000u) + 0x800000u);
}

// s = max(amax, 1e-4) / 448, optionally rounded up to a power of two (ue8m0).
LOWBIT_HD float fp8_block_scale(float amax, bool ue8m0) {
  const float s = fmaxf(amax, kFp8MinAmax) / kE4m3Max;
  return ue8m0 ? round_up_pow2(s) : s;
}

// y = e4m3(x / s), round-to-nearest-even, saturating to ±448.
LOWBIT_HD uint8_t fp8_block_encode(float x, float s) { return f32_to_e4m3(x / s, true); }

// --- int8 vector-wise (LLM.int8)
LOWBIT_HD float int8_row_factor(float absmax) { return absmax > 0.0f ? 127.0f / absmax : 0.0f; }

// round-half-even(x * factor), factor = 127 / absmax rounded first (as
// bitsandbytes computes it); clamped to [-127, 127]; NaN gives 0.
LOWBIT_HD int8_t int8_encode(float x, float factor) {
  const float q = rintf(x * factor);
  if (!(q == q)) return 0;
  return static_cast<int8_t>(fminf(fmaxf(q, -127.0f), 127.0f));
}

// q * row_stat / 127, as bitsandbytes computes it: (q * s) * (1/127).
LOWBIT_HD float int8_decode(int8_t q, float row_stat) {
  return (static_cast<float>(q) * row_stat) * 7.874015718698502e-3f;
}

// int8_mm_dequant's value of an int32 product: float(c) * (row * col) *
// (1 / 127^2), each product rounded in fp32 (docs/int8.md).
LOWBIT_HD float int8_mm_dequant_value(int32_t c, float row, float col) {
  return mul_rn(mul_rn(static_cast<float>(c), mul_rn(row, col)), kInt8DequantScale);
}

// One term of LLM.int8's fp32 sums (int8_linear_outliers, int8_linear_grad_input):
// acc + a * w, product and sum rounded separately, so every backend gets the same bits.
LOWBIT_HD float int8_fp32_step(float acc, float a, float w) { return add_rn(acc, mul_rn(a, w)); }

// Outlier test of LLM.int8: |a| >= threshold (threshold > 0).
LOWBIT_HD bool int8_is_outlier(float a, float threshold) { return threshold > 0.0f && fabsf(a) >= threshold; }

// --- quantile estimation (bitsandbytes estimate_quantiles, exact)
inline constexpr int kNumQuantiles = 256;

// Sort key giving IEEE totalOrder (-NaN < -Inf < ... < -0 < +0 < ... < +NaN)
// as an unsigned integer order — what a radix sort of float keys uses, so
// every backend sorts (and so interpolates) identically, NaN included.
LOWBIT_HD uint32_t float_order_key(float v) {
  const uint32_t b = float_bits(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The float whose float_order_key is k (the key's inverse).
LOWBIT_HD float float_from_order_key(uint32_t k) { return bits_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

// Probability of quantile j (0..255): offset + j * (1 - 2 offset) / 255, in double.
LOWBIT_HD double quantile_probability(int j, float offset) {
  return add_rn(static_cast<double>(offset), mul_rn(static_cast<double>(j), 1.0 - 2.0 * static_cast<double>(offset)) / 255.0);
}

// Linear interpolation between order statistics (numpy's default method):
// h = (n - 1) p, value = v[lo] + (h - lo) (v[lo + 1] - v[lo]) in double.
LOWBIT_HD float quantile_interpolate(const float* sorted, int64_t n, double p) {
  const double h = mul_rn(static_cast<double>(n - 1), p);
  const int64_t lo = static_cast<int64_t>(floor(h));
  if (lo >= n - 1) return sorted[n - 1];
  if (lo < 0) return sorted[0];
  const double f = h - static_cast<double>(lo);
  const double a = sorted[lo];
  const double b = sorted[lo + 1];
  return static_cast<float>(add_rn(a, mul_rn(f, b - a)));
}

}  // namespace lowbit::core
