// Exhaustive tests of src/core/float_convert.h against references written
// independently here: a textbook decode formula (ldexp) and a brute-force
// encoder (nearest value in a sorted table of every finite value, ties to the
// even code, with the overflow rules float_convert.h states). fp16 is also
// checked against the compiler's _Float16 where it has one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/float_convert.h"

namespace {

using namespace lowbit::core;

float f32_of(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ----------------------------------------------------------- references
struct Format {
  int ebits;
  int mbits;
  int bias;
  bool ieee;  // Inf/NaN at the all-ones exponent; false: E4M3FN (only S.1111.111 is NaN)
  uint32_t sign_bit() const { return 1u << (ebits + mbits); }
  uint32_t inf_code() const { return ((1u << ebits) - 1u) << mbits; }
};
constexpr Format kF16{5, 10, 15, true};
constexpr Format kBF16{8, 7, 127, true};
constexpr Format kE4M3{4, 3, 7, false};
constexpr Format kE5M2{5, 2, 15, true};

// The value of a code by the textbook formula.
double decode_ref(const Format& f, uint32_t code) {
  const bool neg = (code & f.sign_bit()) != 0;
  const uint32_t e = (code >> f.mbits) & ((1u << f.ebits) - 1u);
  const uint32_t m = code & ((1u << f.mbits) - 1u);
  const uint32_t emax = (1u << f.ebits) - 1u;
  double v;
  if (f.ieee && e == emax) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (!f.ieee && e == emax && m == (1u << f.mbits) - 1u) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias - f.mbits);
  } else {
    v = std::ldexp(static_cast<double>((1u << f.mbits) + m), static_cast<int>(e) - f.bias - f.mbits);
  }
  return neg ? -v : v;
}

constexpr uint32_t kRefNaN = 0xffffffffu;  // "the result must be a NaN"

// Brute-force round-to-nearest-even encoder. Above the largest finite value
// sits one virtual value, max + ulp(max), with the code after max's: values
// rounding to it overflow. IEEE formats (max has an odd code) therefore send
// the tie max + ulp/2 to Inf; E4M3 (max 448 = 0x7e, even) keeps 464 at 448.
class RefEncoder {
 public:
  explicit RefEncoder(const Format& f) : f_(f) {
    for (uint32_t c = 0; c < f.sign_bit(); ++c) {
      const double v = decode_ref(f, c);
      if (!std::isfinite(v)) break;  // positive codes ascend in value up to Inf / NaN
      vals_.push_back(v);
      codes_.push_back(c);
    }
    const double ulp = vals_.back() - vals_[vals_.size() - 2];
    vals_.push_back(vals_.back() + ulp);
    codes_.push_back(codes_.back() + 1u);
  }

  uint32_t encode(float x, bool saturate) const {
    if (std::isnan(x)) return kRefNaN;
    const uint32_t sign = std::signbit(x) ? f_.sign_bit() : 0u;
    const double a = std::fabs(static_cast<double>(x));
    const size_t hi = static_cast<size_t>(std::upper_bound(vals_.begin(), vals_.end(), a) - vals_.begin());
    size_t pick;
    if (hi == vals_.size()) {
      pick = hi - 1;  // beyond the virtual value: overflow
    } else {
      const size_t lo = hi - 1;  // vals_[0] == 0 <= a
      // 2a against lo + hi: both sides exact in double (adjacent small-format values).
      const double twice = 2.0 * a, sum = vals_[lo] + vals_[hi];
      pick = twice < sum ? lo : twice > sum ? hi : ((codes_[lo] & 1u) == 0 ? lo : hi);
    }
    if (pick == vals_.size() - 1) {  // overflow
      if (saturate) return sign | codes_[pick - 1];
      return f_.ieee ? (sign | f_.inf_code()) : kRefNaN;
    }
    return sign | codes_[pick];
  }

  // Every non-negative finite value, ascending, plus the virtual overflow value.
  const std::vector<double>& values() const { return vals_; }

 private:
  Format f_;
  std::vector<double> vals_;
  std::vector<uint32_t> codes_;
};

const RefEncoder& ref_f16() {
  static const RefEncoder r(kF16);
  return r;
}
const RefEncoder& ref_bf16() {
  static const RefEncoder r(kBF16);
  return r;
}
const RefEncoder& ref_e4m3() {
  static const RefEncoder r(kE4M3);
  return r;
}
const RefEncoder& ref_e5m2() {
  static const RefEncoder r(kE5M2);
  return r;
}

// Checks one conversion result against the reference: a NaN result is any
// NaN code with the input's sign (fp8 NaNs carry the sign too).
void expect_code(const Format& f, uint32_t got, uint32_t want, float x, const char* what) {
  if (want == kRefNaN) {
    EXPECT_TRUE(std::isnan(decode_ref(f, got)))
        << what << "(" << x << " = 0x" << std::hex << bits_of(x) << ") gave 0x" << got << ", want a NaN";
    EXPECT_EQ((got & f.sign_bit()) != 0, std::signbit(x)) << what << " NaN sign, input 0x" << std::hex << bits_of(x);
  } else {
    EXPECT_EQ(got, want) << what << "(" << x << " = 0x" << std::hex << bits_of(x) << ")";
  }
}

// Every fp32 pattern whose upper 16 bits take all 65536 values, each with
// these low halves: 0 (exact ties for bf16 and fp8), bf16 ties (0x8000) and
// their neighbours, fp16 ties at bit 12 (0x1000, 0x3000, ...) and neighbours.
constexpr uint16_t kLowHalves[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x2fff, 0x3000, 0x3001,
                                   0x7fff, 0x8000, 0x8001, 0xc000, 0xefff, 0xf000, 0xffff};

template <class Fn>
void for_each_swept_float(Fn&& fn) {
  for (uint32_t hi = 0; hi <= 0xffffu; ++hi) {
    for (uint16_t lo : kLowHalves) fn(f32_of((hi << 16) | lo));
  }
}

// Each midpoint between consecutive non-negative values of the format (and
// the overflow threshold), one float ulp either side, both signs.
template <class Fn>
void for_each_midpoint_probe(const RefEncoder& ref, Fn&& fn) {
  const auto& v = ref.values();
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    const double mid = 0.5 * (v[i] + v[i + 1]);
    const float m = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(m), mid) << "midpoint not a float";
    for (float x : {m, std::nextafter(m, 0.0f), std::nextafter(m, std::numeric_limits<float>::infinity())}) {
      fn(x);
      fn(-x);
    }
  }
}

// ------------------------------------------------------------------ fp16
TEST(FloatConvert, F16DecodeAndRoundTripAll65536) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const double want = decode_ref(kF16, h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << h;
      const uint16_t back = f32_to_f16(f);
      ASSERT_TRUE(std::isnan(decode_ref(kF16, back))) << std::hex << h;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << h;
      if (h & 0x0200u) {
        ASSERT_EQ(back, h) << "quiet NaN payload kept, " << std::hex << h;
      }
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << h;
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
#if defined(__FLT16_MAX__)
    _Float16 hv;
    const uint16_t hb = static_cast<uint16_t>(h);
    std::memcpy(&hv, &hb, 2);
    ASSERT_EQ(bits_of(static_cast<float>(hv)), bits_of(f)) << std::hex << h;
#endif
  }
}

TEST(FloatConvert, F32ToF16SweepMatchesReference) {
  const RefEncoder& ref = ref_f16();
  int failures = 0;
  auto check = [&](float x) {
    const uint16_t got = f32_to_f16(x);
    const uint32_t want = ref.encode(x, false);
    if (failures < 20 && (want == kRefNaN ? !std::isnan(decode_ref(kF16, got)) : got != want)) {
      ++failures;
      expect_code(kF16, got, want, x, "f32_to_f16");
    }
#if defined(__FLT16_MAX__)
    const _Float16 hv = static_cast<_Float16>(x);
    uint16_t hb;
    std::memcpy(&hb, &hv, 2);
    if (want != kRefNaN && failures < 20 && hb != want) {
      ++failures;
      ADD_FAILURE() << "reference disagrees with _Float16 at 0x" << std::hex << bits_of(x);
    }
#endif
  };
  for_each_swept_float(check);
  for_each_midpoint_probe(ref, check);
  EXPECT_EQ(failures, 0);
}

TEST(FloatConvert, F16EdgeCases) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bffu);                        // max
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bffu);  // just under the tie
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00u);                        // tie: max is odd -> Inf
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00u);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00u);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400u);  // min normal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001u);  // min subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000u);  // tie -> even (0)
  EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001u);
  EXPECT_EQ(f32_to_f16(3.0f * std::ldexp(1.0f, -25)), 0x0002u);  // tie 1|2 -> 2
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::quiet_NaN()), 0x7e00u);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00u);  // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f * std::ldexp(1.0f, -11)), 0x3c02u);
}

// ------------------------------------------------------------------ bf16
TEST(FloatConvert, Bf16DecodeAndRoundTripAll65536) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    const double want = decode_ref(kBF16, b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      const uint16_t back = f32_to_bf16(f);
      ASSERT_TRUE(std::isnan(decode_ref(kBF16, back))) << std::hex << b;
      ASSERT_EQ(back & 0x8000u, b & 0x8000u) << std::hex << b;
      if (b & 0x0040u) {
        ASSERT_EQ(back, b) << "quiet NaN payload kept, " << std::hex << b;
      }
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << b;
    ASSERT_EQ(std::signbit(f), (b & 0x8000u) != 0) << std::hex << b;
    ASSERT_EQ(f32_to_bf16(f), b) << std::hex << b;
  }
}

TEST(FloatConvert, F32ToBf16SweepMatchesReference) {
  const RefEncoder& ref = ref_bf16();
  int failures = 0;
  auto check = [&](float x) {
    const uint16_t got = f32_to_bf16(x);
    const uint32_t want = ref.encode(x, false);
    if (failures < 20 && (want == kRefNaN ? !std::isnan(decode_ref(kBF16, got)) : got != want)) {
      ++failures;
      expect_code(kBF16, got, want, x, "f32_to_bf16");
    }
  };
  for_each_swept_float(check);
  for_each_midpoint_probe(ref, check);
  EXPECT_EQ(failures, 0);
}

TEST(FloatConvert, Bf16EdgeCases) {
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);   // rounds past max -> Inf
  EXPECT_EQ(f32_to_bf16(f32_of(0x7f7f7fffu)), 0x7f7fu);                 // just under the tie
  EXPECT_EQ(f32_to_bf16(f32_of(0x7f7f8000u)), 0x7f80u);                 // tie, max odd -> Inf
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80u);         // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f * std::ldexp(1.0f, -8)), 0x3f82u);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_EQ(f32_to_bf16(f32_of(0x00008001u)), 0x0001u);  // f32 subnormal rounds into bf16 subnormal
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80u);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()), 0x7fc0u);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f32_of(0x7f800001u)))));  // signalling NaN stays NaN
}

// ------------------------------------------------------------------- fp8
TEST(FloatConvert, Fp8DecodeAndRoundTripAll256) {
  for (uint32_t c = 0; c < 256; ++c) {
    const uint8_t b = static_cast<uint8_t>(c);
    for (int fmt = 0; fmt < 2; ++fmt) {
      const Format& f = fmt == 0 ? kE4M3 : kE5M2;
      const char* name = fmt == 0 ? "e4m3" : "e5m2";
      const float v = fmt == 0 ? e4m3_to_f32(b) : e5m2_to_f32(b);
      const double want = decode_ref(f, c);
      for (bool sat : {false, true}) {
        const uint8_t back = fmt == 0 ? f32_to_e4m3(v, sat) : f32_to_e5m2(v, sat);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(v)) << name << " code " << c;
          ASSERT_EQ(std::signbit(v), (c & 0x80u) != 0) << name << " code " << c;
          ASSERT_EQ(back, (c & 0x80u) | 0x7fu) << name << " NaN re-encodes to the canonical NaN, code " << c;
        } else if (std::isinf(want) && sat) {
          ASSERT_EQ(back, (c & 0x80u) | 0x7bu) << name << " Inf saturates to max, code " << c;
        } else {
          ASSERT_EQ(back, c) << name << " code " << c << " sat " << sat;
        }
      }
      if (std::isnan(want)) continue;
      ASSERT_EQ(static_cast<double>(v), want) << name << " code " << c;
      ASSERT_EQ(std::signbit(v), (c & 0x80u) != 0) << name << " code " << c;
    }
  }
  // Named OCP values.
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x07), 7.0f * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x78), 256.0f);  // exponent 15 is finite in E4M3FN
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  EXPECT_EQ(e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_EQ(e5m2_to_f32(0x3c), 1.0f);
  EXPECT_EQ(e5m2_to_f32(0x04), std::ldexp(1.0f, -14));
  EXPECT_EQ(e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(e5m2_to_f32(0x7c), std::numeric_limits<float>::infinity());
  EXPECT_EQ(e5m2_to_f32(0xfc), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(e5m2_to_f32(0x7d)));
  EXPECT_TRUE(std::isnan(e5m2_to_f32(0x7e)));
  EXPECT_TRUE(std::isnan(e5m2_to_f32(0x7f)));
}

void sweep_fp8(const Format& f, const RefEncoder& ref, uint8_t (*conv)(float, bool), const char* name) {
  int failures = 0;
  auto check = [&](float x) {
    for (bool sat : {false, true}) {
      const uint8_t got = conv(x, sat);
      const uint32_t want = ref.encode(x, sat);
      const bool bad =
          want == kRefNaN ? !(std::isnan(decode_ref(f, got)) && ((got & 0x80u) != 0) == std::signbit(x)) : got != want;
      if (bad && failures < 20) {
        ++failures;
        SCOPED_TRACE(sat ? "saturate=true" : "saturate=false");
        expect_code(f, got, want, x, name);
      }
    }
  };
  for_each_swept_float(check);
  for_each_midpoint_probe(ref, check);
  EXPECT_EQ(failures, 0) << name;
}

TEST(FloatConvert, F32ToE4m3SweepMatchesReference) {
  sweep_fp8(
      kE4M3, ref_e4m3(), [](float x, bool s) { return f32_to_e4m3(x, s); }, "f32_to_e4m3");
}

TEST(FloatConvert, F32ToE5m2SweepMatchesReference) {
  sweep_fp8(
      kE5M2, ref_e5m2(), [](float x, bool s) { return f32_to_e5m2(x, s); }, "f32_to_e5m2");
}

TEST(FloatConvert, E4m3EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (bool sat : {false, true}) {
    EXPECT_EQ(f32_to_e4m3(448.0f, sat), 0x7eu);
    EXPECT_EQ(f32_to_e4m3(-448.0f, sat), 0xfeu);
    EXPECT_EQ(f32_to_e4m3(464.0f, sat), 0x7eu);  // max + ulp/2: tie to the even max code
    EXPECT_EQ(f32_to_e4m3(-464.0f, sat), 0xfeu);
    EXPECT_EQ(f32_to_e4m3(std::nextafter(464.0f, 0.0f), sat), 0x7eu);
    EXPECT_EQ(f32_to_e4m3(nan, sat), 0x7fu);  // NaN stays NaN even saturating
    EXPECT_EQ(f32_to_e4m3(-nan, sat), 0xffu);
    EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -9), sat), 0x01u);   // min subnormal
    EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10), sat), 0x00u);  // tie -> even (0)
    EXPECT_EQ(f32_to_e4m3(-std::ldexp(1.0f, -10), sat), 0x80u);
    EXPECT_EQ(f32_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f), sat), 0x01u);
    EXPECT_EQ(f32_to_e4m3(3.0f * std::ldexp(1.0f, -10), sat), 0x02u);   // tie 1|2 -> 2
    EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -6), sat), 0x08u);           // min normal
    EXPECT_EQ(f32_to_e4m3(15.0f * std::ldexp(1.0f, -10), sat), 0x08u);  // 7.5 units -> 8 (even)
    EXPECT_EQ(f32_to_e4m3(0.0f, sat), 0x00u);
    EXPECT_EQ(f32_to_e4m3(-0.0f, sat), 0x80u);
  }
  const float above = std::nextafter(464.0f, inf);
  EXPECT_EQ(f32_to_e4m3(above, false), 0x7fu);  // overflow -> NaN
  EXPECT_EQ(f32_to_e4m3(above, true), 0x7eu);   // saturates to 448
  EXPECT_EQ(f32_to_e4m3(-above, false), 0xffu);
  EXPECT_EQ(f32_to_e4m3(-above, true), 0xfeu);
  EXPECT_EQ(f32_to_e4m3(480.0f, false), 0x7fu);
  EXPECT_EQ(f32_to_e4m3(1e30f, true), 0x7eu);
  EXPECT_EQ(f32_to_e4m3(inf, false), 0x7fu);
  EXPECT_EQ(f32_to_e4m3(inf, true), 0x7eu);
  EXPECT_EQ(f32_to_e4m3(-inf, false), 0xffu);
  EXPECT_EQ(f32_to_e4m3(-inf, true), 0xfeu);
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7eu);  // default saturates (DeepSeek act_quant)
  EXPECT_EQ(f32_to_e4m3(inf), 0x7eu);
}

TEST(FloatConvert, E5m2EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  for (bool sat : {false, true}) {
    EXPECT_EQ(f32_to_e5m2(57344.0f, sat), 0x7bu);
    EXPECT_EQ(f32_to_e5m2(std::nextafter(61440.0f, 0.0f), sat), 0x7bu);
    EXPECT_EQ(f32_to_e5m2(std::ldexp(1.0f, -16), sat), 0x01u);  // min subnormal
    EXPECT_EQ(f32_to_e5m2(std::ldexp(1.0f, -17), sat), 0x00u);  // tie -> even (0)
    EXPECT_EQ(f32_to_e5m2(std::nextafter(std::ldexp(1.0f, -17), 1.0f), sat), 0x01u);
    EXPECT_EQ(f32_to_e5m2(std::ldexp(1.0f, -14), sat), 0x04u);  // min normal
    EXPECT_EQ(f32_to_e5m2(-0.0f, sat), 0x80u);
    EXPECT_TRUE(std::isnan(e5m2_to_f32(f32_to_e5m2(std::numeric_limits<float>::quiet_NaN(), sat))));
  }
  EXPECT_EQ(f32_to_e5m2(61440.0f, false), 0x7cu);  // max + ulp/2: max is odd -> Inf
  EXPECT_EQ(f32_to_e5m2(61440.0f, true), 0x7bu);
  EXPECT_EQ(f32_to_e5m2(-61440.0f, false), 0xfcu);
  EXPECT_EQ(f32_to_e5m2(-61440.0f, true), 0xfbu);
  EXPECT_EQ(f32_to_e5m2(inf, false), 0x7cu);
  EXPECT_EQ(f32_to_e5m2(inf, true), 0x7bu);
  EXPECT_EQ(f32_to_e5m2(-inf, false), 0xfcu);
  EXPECT_EQ(f32_to_e5m2(1e30f), 0x7cu);  // default does not saturate
}

// The typed helpers route through the same conversions.
TEST(FloatConvert, TypedHelpers) {
  EXPECT_EQ(to_f32(from_f32<Half>(1.5f)), 1.5f);
  EXPECT_EQ(from_f32<Half>(65520.0f).bits, 0x7c00u);
  EXPECT_EQ(to_f32(from_f32<BFloat16>(-2.25f)), -2.25f);
  EXPECT_EQ(from_f32<BFloat16>(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80u);
  EXPECT_EQ(to_f32(from_f32<float>(0.1f)), 0.1f);
}

}  // namespace
