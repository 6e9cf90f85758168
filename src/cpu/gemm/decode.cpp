// Decoders of the fast path: packed codes to fp32 values, the same bits as
// the reference's src/core/weight_format.h. Dequantization must not change
// with the vector width, so no multiply-add here may become an FMA (GCC
// contracts a * b + c in C++ by default wherever FMA exists).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cstring>

#include "core/float_convert.h"
#include "cpu/gemm/kernels.h"
#include "cpu/isa.h"
#include "cpu/simd_clones.h"

#if defined(__x86_64__)
#include <immintrin.h>
#if !defined(__clang__)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() as the unused
// merge source, which -Wmaybe-uninitialized reports inside its own headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace lowbit::core::cpu::gemm {
namespace {

void decode_small_scalar(const uint8_t* p, int bits, int64_t len, const float* table, float* out) {
  const int per = 8 / bits;
  const uint32_t mask = code_mask(bits);
  const int64_t bytes = len / per;
  for (int64_t i = 0; i < bytes; ++i) {
    for (int j = 0; j < per; ++j) out[i * per + j] = table[(p[i] >> (j * bits)) & mask];
  }
  for (int64_t i = bytes * per; i < len; ++i) out[i] = table[stream_read(p, i, bits)];
}

// bitsandbytes' 4-bit stream from an even element: the high nibble of a byte first.
void decode_bnb4_scalar(const uint8_t* p, int64_t len, const float* table, float scale, float* out) {
  for (int64_t i = 0; i < len; ++i) out[i] = table[(i & 1) ? p[i / 2] & 0xfu : p[i / 2] >> 4] * scale;
}

#if defined(__x86_64__)
// 16 codes at a time: the 16/per bytes holding them are spread so each
// 32-bit lane gets its code's byte (pshufb), shifted by the code's place in
// the byte, masked, and looked up in the 16-float table held in a register
// (vpermps) — a handful of instructions per 16 weights.
// Per bit width (1, 2, 4): for lane j of 16, the byte holding code j and
// the code's shift within it.
struct SmallLanes {
  alignas(16) uint8_t byte[16];
  alignas(64) uint32_t shift[16];
};
constexpr SmallLanes small_lanes(int bits) {
  SmallLanes l{};
  for (int j = 0; j < 16; ++j) {
    l.byte[j] = static_cast<uint8_t>(j * bits / 8);
    l.shift[j] = static_cast<uint32_t>(j * bits % 8);
  }
  return l;
}
constexpr SmallLanes kSmallLanes[3] = {small_lanes(1), small_lanes(2), small_lanes(4)};
// bitsandbytes' order: the high nibble of a byte is the earlier code.
constexpr SmallLanes nibbles_high_first() {
  SmallLanes l{};
  for (int j = 0; j < 16; ++j) {
    l.byte[j] = static_cast<uint8_t>(j / 2);
    l.shift[j] = j % 2 == 0 ? 4u : 0u;
  }
  return l;
}
constexpr SmallLanes kHighFirst = nibbles_high_first();

__attribute__((target("avx512f"))) void decode_small_avx512(const uint8_t* p, int bits, int64_t len, const float* table,
                                                            float* out) {
  const SmallLanes& lanes = kSmallLanes[bits == 1 ? 0 : bits == 2 ? 1 : 2];
  const int per = 8 / bits;
  const __m128i selv = _mm_load_si128(reinterpret_cast<const __m128i*>(lanes.byte));
  const __m512i shiftv = _mm512_load_si512(lanes.shift);
  const __m512i mask = _mm512_set1_epi32(static_cast<int>(code_mask(bits)));
  const __m512 tab = _mm512_loadu_ps(table);
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    const uint8_t* src = p + i / per;
    __m128i raw;
    if (per == 2) {
      uint64_t x;
      std::memcpy(&x, src, 8);
      raw = _mm_cvtsi64_si128(static_cast<long long>(x));
    } else if (per == 4) {
      uint32_t x;
      std::memcpy(&x, src, 4);
      raw = _mm_cvtsi32_si128(static_cast<int>(x));
    } else {
      uint16_t x;
      std::memcpy(&x, src, 2);
      raw = _mm_cvtsi32_si128(x);
    }
    const __m512i codes = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(raw, selv));
    const __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(codes, shiftv), mask);
    _mm512_storeu_ps(out + i, _mm512_permutexvar_ps(idx, tab));
  }
  if (i < len) decode_small_scalar(p + i / per, bits, len - i, table, out + i);
}

// The same 16-lane lookup for bitsandbytes' nibble order, then the block's
// scale: table[code] * scale, one rounding, as dequantize_4bit computes it.
__attribute__((target("avx512f"))) void decode_bnb4_avx512(const uint8_t* p, int64_t len, const float* table,
                                                           float scale, float* out) {
  const __m128i selv = _mm_load_si128(reinterpret_cast<const __m128i*>(kHighFirst.byte));
  const __m512i shiftv = _mm512_load_si512(kHighFirst.shift);
  const __m512i mask = _mm512_set1_epi32(0xf);
  const __m512 tab = _mm512_loadu_ps(table), s = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    uint64_t x;
    std::memcpy(&x, p + i / 2, 8);
    const __m512i codes = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(_mm_cvtsi64_si128(static_cast<long long>(x)), selv));
    const __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(codes, shiftv), mask);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_permutexvar_ps(idx, tab), s));
  }
  if (i < len) decode_bnb4_scalar(p + i / 2, len - i, table, scale, out + i);
}
#endif

// out[i] = table[code i of p] (4-bit codes, the low nibble first).
void decode4_bf16_scalar(const uint8_t* p, int64_t len, const uint16_t* table, uint16_t* out) {
  for (int64_t i = 0; i < len; ++i) out[i] = table[i & 1 ? p[i / 2] >> 4 : p[i / 2] & 15];
}

void decode4_row_bf16_scalar(const uint8_t* row, int64_t K, int64_t gl, const float* vtab16, DequantRule rule,
                             const float* scales, const float* zeros, uint16_t* out) {
  for (int64_t k = 0, g = 0; k < K; k += gl, ++g) {
    float folded[16];
    for (int c = 0; c < 16; ++c) folded[c] = dequant(rule, vtab16[c], scales ? scales[g] : 1.0f, zeros ? zeros[g] : 0.0f);
    uint16_t tab[16];
    for (int c = 0; c < 16; ++c) tab[c] = f32_to_bf16(folded[c]);
    decode4_bf16_scalar(row + k / 2, std::min(gl, K - k), tab, out + k);
  }
}

#if defined(__x86_64__)
// Per group: its 16 finished values by vector ops in dequant's order (no contraction: the file is built with
// fp-contract=off), rounded to bf16 as f32_to_bf16, then its codes looked up 32 at a time by vpermw (16 bytes
// -> 32 codes as 16-bit lanes, the low nibble first).
__attribute__((target("avx512f,avx512bw"))) void decode4_row_bf16_avx512(const uint8_t* row, int64_t K, int64_t gl,
                                                                        const float* vtab16, DequantRule rule,
                                                                        const float* scales, const float* zeros,
                                                                        uint16_t* out) {
  const __m512 v = _mm512_loadu_ps(vtab16);
  const __m512i low4 = _mm512_set1_epi32(15);
  for (int64_t k = 0, g = 0; k < K; k += gl, ++g) {
    const __m512 sv = _mm512_set1_ps(scales ? scales[g] : 1.0f), zv = _mm512_set1_ps(zeros ? zeros[g] : 0.0f);
    __m512 f = v;
    switch (rule) {
      case DequantRule::value: break;
      case DequantRule::scale: f = _mm512_mul_ps(v, sv); break;
      case DequantRule::subtract: f = _mm512_mul_ps(_mm512_sub_ps(v, zv), sv); break;
      case DequantRule::rescale: f = _mm512_sub_ps(_mm512_mul_ps(v, sv), zv); break;
    }
    const __m512i u = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    const __m256i t16 = _mm512_cvtepi32_epi16(r);
    const __m512i tab = _mm512_inserti64x4(_mm512_castsi256_si512(t16), t16, 1);
    const int64_t len = std::min(gl, K - k);
    const uint8_t* p = row + k / 2;
    uint16_t* o = out + k;
    int64_t i = 0;
    for (; i + 32 <= len; i += 32) {
      const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i / 2)));
      const __m512i pair = _mm512_or_si512(_mm512_and_si512(d, low4),
                                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(d, 4), low4), 16));
      _mm512_storeu_si512(o + i, _mm512_permutexvar_epi16(pair, tab));
    }
    if (i < len) {
      alignas(32) uint16_t t[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(t), t16);
      decode4_bf16_scalar(p + i / 2, len - i, t, o + i);
    }
  }
}
#endif

using Decode4RowBf16 = void (*)(const uint8_t*, int64_t, int64_t, const float*, DequantRule, const float*,
                                const float*, uint16_t*);

Decode4RowBf16 pick_decode4_row_bf16() {
#if defined(__x86_64__)
  if (supports(Feature::avx512f) && supports(Feature::avx512bw)) return decode4_row_bf16_avx512;
#endif
  return decode4_row_bf16_scalar;
}

using DecodeSmall = void (*)(const uint8_t*, int, int64_t, const float*, float*);
using DecodeBnb4 = void (*)(const uint8_t*, int64_t, const float*, float, float*);

DecodeBnb4 pick_decode_bnb4() {
#if defined(__x86_64__)
  if (supports(Feature::avx512f)) return decode_bnb4_avx512;
#endif
  return decode_bnb4_scalar;
}

DecodeSmall pick_decode_small() {
#if defined(__x86_64__)
  if (supports(Feature::avx512f)) return decode_small_avx512;
#endif
  return decode_small_scalar;
}

}  // namespace

void decode4_row_bf16(const uint8_t* row, int64_t K, int64_t gl, const float* vtab16, DequantRule rule,
                      const float* scales, const float* zeros, uint16_t* out) {
  static const Decode4RowBf16 fn = pick_decode4_row_bf16();
  fn(row, K, gl, vtab16, rule, scales, zeros, out);
}

void decode_small(const uint8_t* row, int bits, int64_t k0, int64_t len, const float* table16, float* out) {
  static const DecodeSmall fn = pick_decode_small();
  fn(row + k0 * bits / 8, bits, len, table16, out);
}

void decode_bnb4(const uint8_t* packed, int64_t e0, int64_t len, const float* table16, float scale, float* out) {
  static const DecodeBnb4 fn = pick_decode_bnb4();
  if (len > 0 && e0 % 2 == 1) {  // the odd first element: the low nibble of its byte
    *out++ = table16[packed[e0 / 2] & 0xfu] * scale;
    ++e0, --len;
  }
  fn(packed + e0 / 2, len, table16, scale, out);
}

LOWBIT_SIMD_CLONES void decode_bytes(const uint8_t* row, WeightKind kind, int64_t k0, int64_t len, const float* vtab,
                                     float* out) {
  const uint8_t* p = row + k0;
  if (kind == WeightKind::sint) {
    for (int64_t i = 0; i < len; ++i) out[i] = static_cast<float>(static_cast<int8_t>(p[i]));
  } else if (kind == WeightKind::uint) {
    for (int64_t i = 0; i < len; ++i) out[i] = static_cast<float>(p[i]);
  } else if (kind == WeightKind::fp8) {
    // Branch-free E4M3: exponent and mantissa moved into an fp32's place
    // read as a float times 2^120 rebias exactly (subnormals included);
    // 0x7f / 0xff are NaN, sign | 0x7fc00000 (core::e4m3_to_f32's bits).
    for (int64_t i = 0; i < len; ++i) {
      const uint32_t em = p[i] & 0x7fu;
      const uint32_t nan = 0u - static_cast<uint32_t>(em == 0x7fu);  // all ones for NaN
      const uint32_t mag = float_bits(bits_float(em << 20) * 0x1p120f);
      out[i] = bits_float((mag & ~nan) | (0x7fc00000u & nan) | (static_cast<uint32_t>(p[i] & 0x80u) << 24));
    }
  } else {
    for (int64_t i = 0; i < len; ++i) out[i] = vtab[p[i]];
  }
}

LOWBIT_SIMD_CLONES void decode_halves(const uint8_t* row, bool bf16, int64_t k0, int64_t len, float* out) {
  const uint8_t* p = row + 2 * k0;
  if (bf16) {
    for (int64_t i = 0; i < len; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = bits_float(static_cast<uint32_t>(h) << 16);
    }
    return;
  }
  // Branch-free f16 -> f32: exponent and mantissa moved into place read as
  // a float times 2^112 rebias exactly (subnormals included); exponent 31
  // (Inf, NaN) keeps its mantissa under an all-ones exponent.
  for (int64_t i = 0; i < len; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    const uint32_t em = static_cast<uint32_t>(h & 0x7fffu) << 13;
    const uint32_t scaled = float_bits(bits_float(em) * 0x1p112f);
    const uint32_t special = 0u - static_cast<uint32_t>((h & 0x7c00u) == 0x7c00u);  // all ones for Inf / NaN
    const uint32_t b = (scaled & ~special) | ((em | 0x7f800000u) & special);        // a select, so it vectorizes
    out[i] = bits_float(b | (static_cast<uint32_t>(h & 0x8000u) << 16));
  }
}

LOWBIT_SIMD_CLONES void apply_rule(DequantRule rule, float* t, int64_t len, float s, float z) {
  switch (rule) {
    case DequantRule::value: return;
    case DequantRule::scale:
      for (int64_t i = 0; i < len; ++i) t[i] = t[i] * s;
      return;
    case DequantRule::subtract:
      for (int64_t i = 0; i < len; ++i) t[i] = (t[i] - z) * s;
      return;
    case DequantRule::rescale:
      for (int64_t i = 0; i < len; ++i) t[i] = t[i] * s - z;
      return;
  }
}

}  // namespace lowbit::core::cpu::gemm
