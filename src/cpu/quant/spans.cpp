#include "cpu/quant/spans.h"

// GCC 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized on their own
// internal temporaries (a known false positive, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "core/quant_math.h"
#include "core/tables.h"
#include "cpu/isa.h"
#include "cpu/quant/decode4_hwy.h"
#include "cpu/simd_clones.h"

namespace lowbit::core::cpu {

LOWBIT_SIMD_CLONES void to_f32_span(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i];
}
namespace {

void to_f32_scalar(const Half* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(x[i].bits);
}

// VCVTPH2PS is exact for every finite and infinite value. A signaling NaN
// comes out quieted where f16_to_f32 keeps it signaling: callers feed
// quantizers, which encode every NaN alike, so their results do not change.
__attribute__((target("f16c,avx"))) void to_f32_f16c(const Half* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  }
  to_f32_scalar(x + i, n - i, out + i);
}

void from_f32_scalar(const float* x, int64_t n, Half* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Half{f32_to_f16(x[i])};
}

// VCVTPS2PH with round-to-nearest-even gives f32_to_f16's bits for every
// input, NaN included (quiet bit set, the top 9 payload bits kept).
__attribute__((target("f16c,avx"))) void from_f32_f16c(const float* x, int64_t n, Half* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  from_f32_scalar(x + i, n - i, out + i);
}

bool has_f16c() {
  static const bool yes = supports(Feature::f16c) && supports(Feature::avx);
  return yes;
}

}  // namespace

void to_f32_span(const Half* x, int64_t n, float* out) {
  if (has_f16c()) {
    to_f32_f16c(x, n, out);
  } else {
    to_f32_scalar(x, n, out);
  }
}

void from_f32_span(const float* x, int64_t n, Half* out) {
  if (has_f16c()) {
    from_f32_f16c(x, n, out);
  } else {
    from_f32_scalar(x, n, out);
  }
}
LOWBIT_SIMD_CLONES void from_f32_span(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i];
}
LOWBIT_SIMD_CLONES void from_f32_span(const float* x, int64_t n, BFloat16* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = BFloat16{f32_to_bf16(x[i])};
}
LOWBIT_SIMD_CLONES void to_f32_span(const BFloat16* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(x[i].bits);
}

namespace {

float absmax_scalar(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = absmax_update(m, x[i]);
  return m;
}

// max(|x|, acc) with the accumulator second: MAXPS returns its second operand
// when either is NaN, which is exactly absmax_update's "ignore NaN". Max is
// associative, so lane-wise partial maxima give the sequential result.
__attribute__((target("avx512f"))) float absmax_avx512(const float* x, int64_t n) {
  const __m512i mask = _mm512_set1_epi32(0x7fffffff);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a0 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i)), mask));
    const __m512 a1 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i + 16)), mask));
    acc0 = _mm512_max_ps(a0, acc0);
    acc1 = _mm512_max_ps(a1, acc1);
  }
  alignas(64) float lane[32];
  _mm512_store_ps(lane, acc0);
  _mm512_store_ps(lane + 16, acc1);
  float m = absmax_scalar(x + i, n - i);
  for (float v : lane) m = absmax_update(m, v);
  return m;
}

__attribute__((target("avx2"))) float absmax_avx2(const float* x, int64_t n) {
  const __m256 mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), mask), acc0);
    acc1 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i + 8), mask), acc1);
  }
  alignas(32) float lane[16];
  _mm256_store_ps(lane, acc0);
  _mm256_store_ps(lane + 8, acc1);
  float m = absmax_scalar(x + i, n - i);
  for (float v : lane) m = absmax_update(m, v);
  return m;
}

int simd_level() {
  static const int level = supports(Feature::avx512f) ? 2 : supports(Feature::avx2) ? 1 : 0;
  return level;
}

}  // namespace

float absmax_span(const float* x, int64_t n) {
  switch (simd_level()) {
    case 2: return absmax_avx512(x, n);
    case 1: return absmax_avx2(x, n);
    default: return absmax_scalar(x, n);
  }
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

namespace {

// The portable form: every step for every element.
void encode_code8_scalar(const float* x, float r, int64_t n, const int32_t* base, const float* mid, int steps,
                         uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) {
    float y = x[i] * r;
    y = (y == y) ? y : 0.0f;
    int32_t c = base[float_order_key(y) >> 16];
    for (int s = 0; s < steps; ++s) c += (y > mid[c]) ? 1 : 0;
    codes[i] = static_cast<uint8_t>(c);
  }
}

// The same with AVX-512 gathers, 16 elements at a time. GCC does not emit
// gathers for the scalar loop under -mtune=generic, so they are spelled out.
__attribute__((target("avx512f"))) void encode_code8_avx512(const float* x, float r, int64_t n,
                                                            const int32_t* base, const float* mid, int steps,
                                                            uint8_t* codes) {
  const __m512 vr = _mm512_set1_ps(r);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i ones = _mm512_set1_epi32(-1);
  const __m512i one = _mm512_set1_epi32(1);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 y = _mm512_mul_ps(_mm512_loadu_ps(x + i), vr);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q), _mm512_setzero_ps());
    const __m512i b = _mm512_castps_si512(y);
    // float_order_key: negative -> ~b, else b | sign
    const __mmask16 neg = _mm512_cmplt_epi32_mask(b, _mm512_setzero_si512());
    const __m512i key = _mm512_mask_mov_epi32(_mm512_or_si512(b, sign), neg, _mm512_xor_si512(b, ones));
    __m512i c = _mm512_i32gather_epi32(_mm512_srli_epi32(key, 16), base, 4);
    for (int s = 0; s < steps; ++s) {
      const __m512 m = _mm512_i32gather_ps(c, mid, 4);
      c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(y, m, _CMP_GT_OQ), c, one);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(c));
  }
  encode_code8_scalar(x + i, r, n - i, base, mid, steps, codes + i);
}

__attribute__((target("avx2"))) void encode_code8_avx2(const float* x, float r, int64_t n, const int32_t* base,
                                                       const float* mid, int steps, uint8_t* codes) {
  const __m256 vr = _mm256_set1_ps(r);
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i ones = _mm256_set1_epi32(-1);
  int64_t i = 0;
  alignas(32) int32_t out[8];
  for (; i + 8 <= n; i += 8) {
    __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x + i), vr);
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(y, y, _CMP_UNORD_Q));
    const __m256i b = _mm256_castps_si256(y);
    const __m256i neg = _mm256_srai_epi32(b, 31);  // all ones where the sign bit is set
    const __m256i key = _mm256_blendv_epi8(_mm256_or_si256(b, sign), _mm256_xor_si256(b, ones), neg);
    __m256i c = _mm256_i32gather_epi32(base, _mm256_srli_epi32(key, 16), 4);
    for (int s = 0; s < steps; ++s) {
      const __m256 m = _mm256_i32gather_ps(mid, c, 4);
      // the compare mask is -1 where y > m: subtracting it adds 1
      c = _mm256_sub_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(y, m, _CMP_GT_OQ)));
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), c);
    for (int j = 0; j < 8; ++j) codes[i + j] = static_cast<uint8_t>(out[j]);
  }
  encode_code8_scalar(x + i, r, n - i, base, mid, steps, codes + i);
}

}  // namespace

void encode_code8_span(const float* x, float r, int64_t n, const int32_t* base, const float* mid, int steps,
                       uint8_t* codes) {
  const int level = simd_level();
  if (level == 2) {
    encode_code8_avx512(x, r, n, base, mid, steps, codes);
  } else if (level == 1) {
    encode_code8_avx2(x, r, n, base, mid, steps, codes);
  } else {
    encode_code8_scalar(x, r, n, base, mid, steps, codes);
  }
}

namespace {

void decode4_scalar(const uint8_t* packed, int64_t count, const float* table, float m, float* out) {
  for (int64_t j = 0; j < count / 2; ++j) {
    out[2 * j] = table[packed[j] >> 4] * m;
    out[2 * j + 1] = table[packed[j] & 0xfu] * m;
  }
  if (count % 2) out[count - 1] = table[packed[count / 2] >> 4] * m;
}

// 8 bytes -> 16 codes: each byte doubled, then shifted by 4 (even element,
// high nibble) or 0, masked; the 16-entry table sits in one register.
__attribute__((target("avx512f"))) void decode4_avx512(const uint8_t* packed, int64_t count, const float* table,
                                                       float m, float* out) {
  const __m512 tab = _mm512_loadu_ps(table);
  const __m512 vm = _mm512_set1_ps(m);
  const __m512i shifts = _mm512_set_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  const __m512i low4 = _mm512_set1_epi32(15);
  int64_t j = 0;
  for (; 2 * (j + 8) <= count; j += 8) {
    const __m128i b8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + j));
    const __m512i v = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b8, b8));
    const __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(v, shifts), low4);
    _mm512_storeu_ps(out + 2 * j, _mm512_mul_ps(_mm512_permutexvar_ps(idx, tab), vm));
  }
  decode4_scalar(packed + j, count - 2 * j, table, m, out + 2 * j);
}

// 16 bytes -> 32 values (table[code] * m, IEEE products) of blocks of `bs`
// (a multiple of 32) elements, as float or as bf16 rounded as
// core::f32_to_bf16 does (store16): the nibbles looked up 16 at a time, the
// high (even elements) and low (odd) interleaved by vpermt2ps.
#define LOWBIT_DECODE4_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512bf16")))

LOWBIT_DECODE4_TARGET __attribute__((always_inline)) inline void store16(float* o, __m512 v) { _mm512_storeu_ps(o, v); }
// bf16 by vcvtneps2bf16 (nearest even) where no lane is NaN or an fp32
// subnormal, which the instruction flushes; else by f32_to_bf16's integer
// rounding, NaN kept quiet with its sign and high payload.
LOWBIT_DECODE4_TARGET __attribute__((always_inline)) inline void store16(BFloat16* o, __m512 v) {
  if (_mm512_fpclass_ps_mask(v, 0x01 | 0x20 | 0x80) == 0) {  // QNaN, denormal, SNaN
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), (__m256i)_mm512_cvtneps_pbh(v));
    return;
  }
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm512_cvtepi32_epi16(r));
}

template <class T>
LOWBIT_DECODE4_TARGET void decode4_blocks_avx512(const uint8_t* packed, int64_t count, int64_t bs, const float* scales,
                                                 const float* table, T* out) {
  const __m512 tab = _mm512_loadu_ps(table);
  const __m512i low4 = _mm512_set1_epi32(15);
  const __m512i first = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i second = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  for (int64_t b = 0, k0 = 0; k0 < count; ++b, k0 += bs) {
    const __m512 vm = _mm512_set1_ps(scales[b]);
    const int64_t end = std::min(count, k0 + bs);
    int64_t k = k0;
    for (; k + 32 <= end; k += 32) {
      const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + k / 2)));
      const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), tab);
      const __m512 lo = _mm512_permutexvar_ps(_mm512_and_si512(c, low4), tab);
      store16(out + k, _mm512_mul_ps(_mm512_permutex2var_ps(hi, first, lo), vm));
      store16(out + k + 16, _mm512_mul_ps(_mm512_permutex2var_ps(hi, second, lo), vm));
    }
    for (; k < end; ++k) {  // the last block's ragged tail
      const uint8_t byte = packed[k / 2];
      out[k] = from_f32<T>(table[k % 2 ? byte & 0xfu : byte >> 4] * scales[b]);
    }
  }
}

void decode8_scalar(const uint8_t* q, int64_t n, const float* code, float m, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = code[q[i]] * m;
}

__attribute__((target("avx512f"))) void decode8_avx512(const uint8_t* q, int64_t n, const float* code, float m,
                                                       float* out) {
  const __m512 vm = _mm512_set1_ps(m);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i)));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_i32gather_ps(idx, code, 4), vm));
  }
  decode8_scalar(q + i, n - i, code, m, out + i);
}

}  // namespace

void decode4_span(const uint8_t* packed, int64_t count, const float* table16, float m, float* out) {
  if (simd_level() == 2) return decode4_avx512(packed, count, table16, m, out);
  hwy_decode4::blocks(packed, count, count, &m, table16, out);  // one block
}

namespace {

// The fused loop: AVX-512 with BW, DQ and BF16, else Highway's (decode4_hwy.cpp); an AVX-512 CPU without
// them keeps the per-block path (its AVX-512 decoder, then the conversion).
int decode4_blocks_level() {
  static const int level = simd_level() < 2 ? 1
                           : supports(Feature::avx512bw) && supports(Feature::avx512dq) && supports(Feature::avx512bf16)
                               ? 2
                               : 0;
  return level;
}

template <class T>
bool decode4_blocks(const uint8_t* packed, int64_t count, int64_t bs, const float* scales, const float* table16,
                    T* out) {
  if (bs % 32 != 0) return false;
  switch (decode4_blocks_level()) {
    case 2: decode4_blocks_avx512(packed, count, bs, scales, table16, out); return true;
    case 1: hwy_decode4::blocks(packed, count, bs, scales, table16, out); return true;
    default: return false;
  }
}

}  // namespace

bool decode4_blocks_span(const uint8_t* packed, int64_t count, int64_t bs, const float* scales, const float* table16,
                         float* out) {
  return decode4_blocks(packed, count, bs, scales, table16, out);
}
bool decode4_blocks_span(const uint8_t* packed, int64_t count, int64_t bs, const float* scales, const float* table16,
                         BFloat16* out) {
  return decode4_blocks(packed, count, bs, scales, table16, out);
}

#undef LOWBIT_DECODE4_TARGET

void decode8_span(const uint8_t* q, int64_t n, const float* code256, float m, float* out) {
  if (simd_level() == 2) {
    decode8_avx512(q, n, code256, m, out);
  } else {
    decode8_scalar(q, n, code256, m, out);
  }
}

LOWBIT_SIMD_CLONES void encode_fp4_span(const float* x, float r, int64_t n, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(encode_fp4(x[i] * r));
}

LOWBIT_SIMD_CLONES void pack_nibbles(const uint8_t* codes, int64_t n, uint8_t* out) {
  for (int64_t j = 0; j < n / 2; ++j) out[j] = static_cast<uint8_t>(codes[2 * j] << 4 | codes[2 * j + 1]);
}

}  // namespace lowbit::core::cpu
