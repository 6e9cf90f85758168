// fp32 <-> fp16 / bf16 / fp8 (OCP E4M3FN, E5M2) conversions, bit-exact,
// round-to-nearest-even, usable from host and device. The one definition of
// these formats in lowbit (docs/formats.md §Floats).
//
// NaN in gives a quiet NaN out. Narrowing overflow: fp16/bf16/e5m2 give ±Inf;
// e4m3 (no Inf) gives NaN — unless `saturate`, which clamps finite overflow
// and ±Inf to ±max (the PTX cvt.satfinite rule).
#pragma once

#include <cstdint>

#include "core/hd.h"

namespace lowbit::core {

// ------------------------------------------------------------------ fp16
LOWBIT_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0) {
    // zero or subnormal: m * 2^-24 is exact in fp32
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return bits_float(float_bits(v) | sign);
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

LOWBIT_HD uint16_t f32_to_f16(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 -> Inf
  if (ax >= 0x38800000u) {                                              // normal in fp16
    return static_cast<uint16_t>(sign | (shift_right_rne(ax, 13) - (112u << 10)));
  }
  const uint32_t e = ax >> 23;
  if (e < 102) return static_cast<uint16_t>(sign);  // < 2^-25 (2^-25 itself ties to 0)
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  return static_cast<uint16_t>(sign | shift_right_rne(m, static_cast<int>(126 - e)));
}

// ------------------------------------------------------------------ bf16
LOWBIT_HD float bf16_to_f32(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

LOWBIT_HD uint16_t f32_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// ------------------------------------------------------------------ fp8
// kExp exponent bits, kMan mantissa bits; kIeee: E5M2 (Inf/NaN at max
// exponent) versus E4M3FN (only S.1111.111 is NaN).
template <int kExp, int kMan, bool kIeeeLike>
struct Fp8Format {
  static constexpr bool kIeee = kIeeeLike;
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr uint32_t kNaN = 0x7f;
  // fp32 bits of the largest finite value, and of the smallest magnitude
  // that rounds past it (ties round to even: away for E5M2's odd max).
  static constexpr uint32_t kMaxBits =
      kIeee ? ((static_cast<uint32_t>(127 + (1 << kExp) - 2 - kBias) << 23) | (((1u << kMan) - 1) << (23 - kMan)))
            : ((static_cast<uint32_t>(127 + (1 << kExp) - 1 - kBias) << 23) | (((1u << kMan) - 2) << (23 - kMan)));
  static constexpr uint32_t kMaxCode = kIeee ? ((((1u << kExp) - 2) << kMan) | ((1u << kMan) - 1))
                                             : ((((1u << kExp) - 1) << kMan) | ((1u << kMan) - 2));
  static constexpr uint32_t kHalfUlpAtMax = 1u << (23 - kMan - 1);
};
using E4M3 = Fp8Format<4, 3, false>;
using E5M2 = Fp8Format<5, 2, true>;

template <class F, int kExp, int kMan>
LOWBIT_HD uint8_t f32_to_fp8(float f, bool saturate) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint8_t>(sign | F::kNaN);
  // Overflow: E4M3's max has an even mantissa, so the tie at max + half ulp
  // stays at max; E5M2's max is odd, so that tie goes up (to Inf).
  const bool overflow = (F::kMaxCode & 1u) ? ax >= F::kMaxBits + F::kHalfUlpAtMax
                                           : ax > F::kMaxBits + F::kHalfUlpAtMax;
  if (overflow) {
    if (saturate) return static_cast<uint8_t>(sign | F::kMaxCode);
    return static_cast<uint8_t>(sign | (F::kIeee ? ((1u << kExp) - 1u) << kMan : F::kNaN));
  }
  constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 + 1 - F::kBias) << 23;
  if (ax >= kMinNormalBits) {
    return static_cast<uint8_t>(sign |
                                (shift_right_rne(ax, 23 - kMan) - (static_cast<uint32_t>(127 - F::kBias) << kMan)));
  }
  // Subnormal in fp8: units of 2^(1 - bias - kMan).
  const int e = static_cast<int>(ax >> 23);
  const int s = 151 - F::kBias - kMan - e;
  if (e == 0 || s > 25) return static_cast<uint8_t>(sign);
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  return static_cast<uint8_t>(sign | shift_right_rne(m, s));
}

template <class F, int kExp, int kMan>
LOWBIT_HD float fp8_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> kMan) & ((1u << kExp) - 1u);
  const uint32_t m = b & ((1u << kMan) - 1u);
  if (F::kIeee) {
    if (e == (1u << kExp) - 1u) return bits_float(sign | 0x7f800000u | (m ? 0x400000u : 0u));
  } else if ((b & 0x7fu) == 0x7fu) {
    return bits_float(sign | 0x7fc00000u);
  }
  if (e == 0) {
    // m * 2^(1 - bias - kMan), exact
    const float unit = bits_float(static_cast<uint32_t>(127 + 1 - F::kBias - kMan) << 23);
    return bits_float(float_bits(static_cast<float>(m) * unit) | sign);
  }
  return bits_float(sign | ((e - F::kBias + 127u) << 23) | (m << (23 - kMan)));
}

LOWBIT_HD uint8_t f32_to_e4m3(float f, bool saturate = true) { return f32_to_fp8<E4M3, 4, 3>(f, saturate); }
LOWBIT_HD uint8_t f32_to_e5m2(float f, bool saturate = false) { return f32_to_fp8<E5M2, 5, 2>(f, saturate); }
LOWBIT_HD float e4m3_to_f32(uint8_t b) { return fp8_to_f32<E4M3, 4, 3>(b); }
LOWBIT_HD float e5m2_to_f32(uint8_t b) { return fp8_to_f32<E5M2, 5, 2>(b); }

// ---------------------------------------------- typed load / store helpers
// Storage types for the float dtypes an op reads or writes elementwise.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

LOWBIT_HD float to_f32(float v) { return v; }
LOWBIT_HD float to_f32(Half v) { return f16_to_f32(v.bits); }
LOWBIT_HD float to_f32(BFloat16 v) { return bf16_to_f32(v.bits); }

template <class T>
LOWBIT_HD T from_f32(float v);
template <>
LOWBIT_HD float from_f32<float>(float v) {
  return v;
}
template <>
LOWBIT_HD Half from_f32<Half>(float v) {
  return Half{f32_to_f16(v)};
}
template <>
LOWBIT_HD BFloat16 from_f32<BFloat16>(float v) {
  return BFloat16{f32_to_bf16(v)};
}

}  // namespace lowbit::core
