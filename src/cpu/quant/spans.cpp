#include "cpu/quant/spans.h"

#include "core/quant_math.h"
#include "core/tables.h"

#define LOWBIT_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace lowbit::core::cpu {

LOWBIT_SIMD_CLONES void to_f32_span(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i];
}
LOWBIT_SIMD_CLONES void to_f32_span(const Half* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(x[i].bits);
}
LOWBIT_SIMD_CLONES void to_f32_span(const BFloat16* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(x[i].bits);
}

LOWBIT_SIMD_CLONES float absmax_span(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = absmax_update(m, x[i]);
  return m;
}

LOWBIT_SIMD_CLONES void encode_nf4_span(const float* x, float r, int64_t n, const float* mid, uint8_t* codes) {
  float m[15];
  for (int k = 0; k < 15; ++k) m[k] = mid[k];
  for (int64_t i = 0; i < n; ++i) {
    float y = x[i] * r;
    y = (y == y) ? y : 0.0f;
    uint32_t c = 0;
    for (int k = 0; k < 15; ++k) c += (y > m[k]) ? 1u : 0u;
    codes[i] = static_cast<uint8_t>(c);
  }
}

LOWBIT_SIMD_CLONES void encode_code8_span(const float* x, float r, int64_t n, const int32_t* base,
                                          const float* mid, int steps, uint8_t* codes) {
  alignas(64) int32_t c[4096];  // n <= 4096: one quantization block
  alignas(64) float y[4096];
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] * r;
    y[i] = (v == v) ? v : 0.0f;
    c[i] = base[float_order_key(y[i]) >> 16];
  }
  for (int s = 0; s < steps; ++s) {
    for (int64_t i = 0; i < n; ++i) c[i] += (y[i] > mid[c[i]]) ? 1 : 0;
  }
  for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(c[i]);
}

LOWBIT_SIMD_CLONES void encode_fp4_span(const float* x, float r, int64_t n, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(encode_fp4(x[i] * r));
}

LOWBIT_SIMD_CLONES void pack_nibbles(const uint8_t* codes, int64_t n, uint8_t* out) {
  for (int64_t j = 0; j < n / 2; ++j) out[j] = static_cast<uint8_t>(codes[2 * j] << 4 | codes[2 * j + 1]);
}

}  // namespace lowbit::core::cpu
