// Known-answer tests of the code maps and of the 4-bit encoders in
// src/core/tables.h. Expected values are written out here or re-derived in
// double precision from the definitions; where bitsandbytes' own float32
// output is known (NF4, the published dump of its dynamic map) the match is
// checked bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/tables.h"
#include "lowbit/code_maps.h"
#include "lowbit/error.h"

namespace {

using lowbit::ErrorCode;

constexpr double kTol = 1e-7;  // maps reproduce bitsandbytes to 1e-7

// NF4 values, index = code (docs/formats.md, "4-bit").
constexpr double kNf4Spec[16] = {-1.0,
                                 -0.6961928009986877,
                                 -0.5250730514526367,
                                 -0.39491748809814453,
                                 -0.28444138169288635,
                                 -0.18477343022823334,
                                 -0.09105003625154495,
                                 0.0,
                                 0.07958029955625534,
                                 0.16093020141124725,
                                 0.24611230194568634,
                                 0.33791524171829224,
                                 0.44070982933044434,
                                 0.5626170039176941,
                                 0.7229568362236023,
                                 1.0};

void expect_invalid(const std::function<void()>& fn, const std::string& message) {
  try {
    fn();
    ADD_FAILURE() << "expected lowbit::Error \"" << message << "\"";
  } catch (const lowbit::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(std::string(e.what()), message);
  }
}

void expect_sorted(const std::vector<float>& v) {
  EXPECT_TRUE(std::is_sorted(v.begin(), v.end())) << "map is not ascending";
}

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double tol = kTol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "index " << i;
}

size_t count_zeros(const std::vector<float>& v) { return static_cast<size_t>(std::count(v.begin(), v.end(), 0.0f)); }

// ------------------------------------------------------------ 4-bit types
TEST(CodeMaps, Nf4TableMatchesSpec) {
  const auto t = lowbit::get_4bit_type("nf4");
  for (int i = 0; i < 16; ++i) {
    EXPECT_NEAR(t[static_cast<size_t>(i)], kNf4Spec[i], kTol) << i;
    EXPECT_EQ(t[static_cast<size_t>(i)], static_cast<float>(kNf4Spec[i])) << i;
    EXPECT_EQ(lowbit::core::kNf4Table[i], static_cast<float>(kNf4Spec[i])) << i;
  }
  EXPECT_EQ(lowbit::get_4bit_type("nf4", 128), t);  // blocksize matters for af4 only
}

TEST(CodeMaps, Fp4Table) {
  constexpr double kMagnitude[8] = {0, 0.0625, 8, 12, 4, 6, 2, 3};
  const auto t = lowbit::get_4bit_type("fp4");
  for (int k = 0; k < 8; ++k) {
    EXPECT_NEAR(t[static_cast<size_t>(k)], kMagnitude[k] / 12.0, kTol) << k;
    EXPECT_NEAR(t[static_cast<size_t>(8 + k)], -kMagnitude[k] / 12.0, kTol) << 8 + k;
    EXPECT_EQ(std::fabs(lowbit::core::kFp4Table[8 + k]), lowbit::core::kFp4Table[k]) << k;
  }
  EXPECT_EQ(t[3], 1.0f);
  EXPECT_EQ(t[11], -1.0f);
  // bitsandbytes' quant_map holds +0 at code 8 (its list has the int -0);
  // the kernel table keeps the sign bit (bnb's kernels decode sign * 0).
  EXPECT_FALSE(std::signbit(t[8]));
  EXPECT_TRUE(std::signbit(lowbit::core::kFp4Table[8]));
}

TEST(CodeMaps, Int4Table) {
  const auto t = lowbit::get_4bit_type("int4");
  for (int k = 0; k < 8; ++k) {
    EXPECT_NEAR(t[static_cast<size_t>(k)], (7 - k) / 7.0, kTol) << k;
    EXPECT_NEAR(t[static_cast<size_t>(8 + k)], -k / 7.0, kTol) << 8 + k;
  }
  EXPECT_EQ(t[0], 1.0f);
  EXPECT_EQ(t[15], -1.0f);
  EXPECT_FALSE(std::signbit(t[8]));
}

TEST(CodeMaps, Af4TableDescending) {
  // AbnormalFloat (arXiv:2306.06965) for blocksize 64, stored descending.
  constexpr double kAscending[16] = {-1.,         -0.69441008, -0.51243739, -0.3736951, -0.25607552, -0.14982478,
                                     -0.04934812, 0.,          0.04273164,  0.12934483, 0.21961274,  0.31675666,
                                     0.42563882,  0.55496234,  0.72424863,  1.};
  const auto t = lowbit::get_4bit_type("af4", 64);
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(t[static_cast<size_t>(i)], kAscending[15 - i], kTol) << i;
  EXPECT_TRUE(std::is_sorted(t.rbegin(), t.rend()));
  EXPECT_EQ(t[0], 1.0f);
  EXPECT_EQ(t[15], -1.0f);
}

TEST(CodeMaps, Fp4E2m1TableNotNormalized) {
  constexpr double kMagnitude[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const auto t = lowbit::get_4bit_type("fp4_e2m1");
  for (int k = 0; k < 8; ++k) {
    EXPECT_EQ(t[static_cast<size_t>(k)], kMagnitude[k]) << k;
    EXPECT_EQ(t[static_cast<size_t>(8 + k)], -kMagnitude[k]) << 8 + k;
  }
  EXPECT_TRUE(std::signbit(t[8]));  // OCP: code 8 is -0
}

TEST(CodeMaps, Get4bitTypeRejectsBadArguments) {
  expect_invalid([] { lowbit::get_4bit_type("nf5"); },
                 "get_4bit_type: name must be one of nf4, fp4, int4, af4, fp4_e2m1 (got 'nf5')");
  expect_invalid([] { lowbit::get_4bit_type(""); },
                 "get_4bit_type: name must be one of nf4, fp4, int4, af4, fp4_e2m1 (got '')");
  expect_invalid([] { lowbit::get_4bit_type("NF4"); },
                 "get_4bit_type: name must be one of nf4, fp4, int4, af4, fp4_e2m1 (got 'NF4')");
  expect_invalid([] { lowbit::get_4bit_type("af4", 128); },
                 "get_4bit_type: af4 is defined for blocksize 64 only (got 128)");
}

// ------------------------------------------------------------ dynamic map
// The dynamic map re-derived in exact (double) arithmetic from docs/formats.md, "Code maps".
std::vector<double> dynamic_map_exact(bool is_signed) {
  std::vector<double> v;
  for (int i = 0; i < 7; ++i) {
    const int n = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
    for (int k = 0; k + 1 < n; ++k) {
      const double b0 = 0.1 + 0.9 * k / (n - 1), b1 = 0.1 + 0.9 * (k + 1) / (n - 1);
      const double m = (b0 + b1) / 2 * std::pow(10.0, i - 6);
      v.push_back(m);
      if (is_signed) v.push_back(-m);
    }
  }
  v.push_back(0.0);
  v.push_back(1.0);
  std::sort(v.begin(), v.end());
  return v;
}

TEST(CodeMaps, DynamicSigned) {
  const std::vector<float> m = lowbit::create_dynamic_map();
  ASSERT_EQ(m.size(), 256u);
  EXPECT_TRUE(std::adjacent_find(m.begin(), m.end(), std::greater_equal<float>()) == m.end())
      << "not strictly ascending";
  EXPECT_EQ(m.back(), 1.0f);
  EXPECT_NEAR(m.front(), -0.99296875, kTol);  // not -1: the signed map is asymmetric
  EXPECT_EQ(count_zeros(m), 1u);
  EXPECT_EQ(m[127], 0.0f);
  expect_near_all(m, dynamic_map_exact(true));
  // Spot values derived by hand: smallest magnitude 0.55e-6, the last means.
  EXPECT_NEAR(m[128], 0.55e-6, 1e-12);
  EXPECT_NEAR(m[126], -0.55e-6, 1e-12);
  EXPECT_NEAR(m[129], 0.325e-5, 1e-11);
  EXPECT_NEAR(m[254], 1.0 - 0.9 / 128, kTol);
  EXPECT_NEAR(m[253], 1.0 - 3 * 0.9 / 128, kTol);

  // Bit-exact entries of bitsandbytes' create_dynamic_map() as torch prints
  // it (a published dump). They pin the float32 arithmetic, including torch's
  // single-rounding (fused) linspace: entry 36 would be -0.4867187440395355
  // with the product rounded separately.
  const struct {
    int index;
    float value;
  } kTorch[] = {{0, -0.992968738079071f},        {20, -0.7117187976837158f},
                {25, -0.6414062976837158f},      {36, -0.48671871423721313f},
                {41, -0.4164062440395355f},      {65, -0.09578125923871994f},
                {97, -0.009156249463558197f},    {111, -0.001281249918974936f},
                {119, -0.00015625001105945557f}, {123, -2.1249998098937795e-05f},
                {126, -5.500000384017767e-07f},  {128, 5.500000384017767e-07f},
                {213, 0.4164062440395355f},      {255, 1.0f}};
  for (const auto& e : kTorch) EXPECT_EQ(m[static_cast<size_t>(e.index)], e.value) << "index " << e.index;
  for (int i = 0; i < 127; ++i) EXPECT_EQ(m[static_cast<size_t>(254 - i)], -m[static_cast<size_t>(i)]) << i;
}

TEST(CodeMaps, DynamicUnsigned) {
  const std::vector<float> m = lowbit::create_dynamic_map(false);
  ASSERT_EQ(m.size(), 256u);
  expect_sorted(m);
  EXPECT_EQ(m.front(), 0.0f);
  EXPECT_EQ(m.back(), 1.0f);
  EXPECT_EQ(count_zeros(m), 1u);
  expect_near_all(m, dynamic_map_exact(false));
  EXPECT_NEAR(m[1], 0.325e-6, 1e-12);          // linspace(0.1, 1, 3) means at 10^-6
  EXPECT_NEAR(m[254], 1.0 - 0.9 / 256, kTol);  // last of 128 means at 10^0
}

TEST(CodeMaps, DynamicOtherWidths) {
  // 4 bits, 3 exponent bits: 7 means a side + 0 + 1, padded with zeros.
  const std::vector<float> m4 = lowbit::create_dynamic_map(true, 3, 4);
  ASSERT_EQ(m4.size(), 256u);
  expect_sorted(m4);
  EXPECT_EQ(count_zeros(m4), 256u - 15u);
  EXPECT_EQ(m4.back(), 1.0f);
  EXPECT_NEAR(m4.front(), -(0.775 + 1.0) / 2, kTol);  // mean of linspace(0.1, 1, 5)'s last pair
  EXPECT_NEAR(m4[1], -(0.55 + 0.775) / 2, kTol);
  EXPECT_NEAR(m4[2], -(0.325 + 0.55) / 2, kTol);
  // 8 bits, 5 exponent bits: 3 extra means (linspace(0.1, 1, 4)) at 10^0.
  const std::vector<float> m5 = lowbit::create_dynamic_map(true, 5, 8);
  ASSERT_EQ(m5.size(), 256u);
  expect_sorted(m5);
  EXPECT_EQ(count_zeros(m5), 1u);
  for (double extra : {0.25, 0.55, 0.85}) {
    EXPECT_TRUE(std::any_of(m5.begin(), m5.end(), [&](float x) { return std::fabs(x - extra) < kTol; })) << extra;
    EXPECT_TRUE(std::any_of(m5.begin(), m5.end(), [&](float x) { return std::fabs(x + extra) < kTol; })) << extra;
  }
}

TEST(CodeMaps, DynamicRejectsBadArguments) {
  expect_invalid([] { lowbit::create_dynamic_map(true, 7, 9); },
                 "create_dynamic_map: total_bits must be in 1..8 (got 9)");
  expect_invalid([] { lowbit::create_dynamic_map(true, 7, 0); },
                 "create_dynamic_map: total_bits must be in 1..8 (got 0)");
  expect_invalid([] { lowbit::create_dynamic_map(true, 0, 8); },
                 "create_dynamic_map: max_exponent_bits must be in 1..8 (got 0)");
  expect_invalid([] { lowbit::create_dynamic_map(false, 5, 8); },
                 "create_dynamic_map: max_exponent_bits=5 with total_bits=8 (unsigned) gives 253 values, "
                 "expected 2^total_bits = 256");
}

// ------------------------------------------------------------- linear map
TEST(CodeMaps, LinearSigned) {
  const std::vector<float> m = lowbit::create_linear_map();
  ASSERT_EQ(m.size(), 256u);
  expect_sorted(m);
  // linspace(-1, 1, 255) with one zero inserted before its middle (zero) element.
  std::vector<double> want;
  for (int i = 0; i < 255; ++i) want.push_back(-1.0 + 2.0 * i / 254);
  want.insert(want.begin() + 127, 0.0);
  expect_near_all(m, want);
  EXPECT_EQ(m.front(), -1.0f);
  EXPECT_EQ(m.back(), 1.0f);
  EXPECT_EQ(m[127], 0.0f);
  // linspace's middle element is 1 - 127 * fl(2/254) in one rounding, as in
  // torch: 2^-28, not 0.
  EXPECT_EQ(m[128], std::ldexp(1.0f, -28));
  EXPECT_NEAR(m[129], 1.0 / 127, kTol);

  // No added zero: linspace(-1, 1, 256), no exact zero.
  const std::vector<float> nz = lowbit::create_linear_map(true, 8, false);
  std::vector<double> want_nz;
  for (int i = 0; i < 256; ++i) want_nz.push_back(-1.0 + 2.0 * i / 255);
  expect_near_all(nz, want_nz);
  EXPECT_EQ(count_zeros(nz), 0u);

  // 4 bits: linspace(-1, 1, 15), 241 zeros in the middle.
  // Its middle element comes out -3 * 2^-26 (the same one-rounding effect),
  // so this map is ascending only to within 1e-7, as in bitsandbytes.
  const std::vector<float> m4 = lowbit::create_linear_map(true, 4);
  std::vector<double> want4;
  for (int i = 0; i < 15; ++i) want4.push_back(-1.0 + 2.0 * i / 14);
  want4.insert(want4.begin() + 7, 241, 0.0);
  expect_near_all(m4, want4);
  EXPECT_EQ(count_zeros(m4), 241u);
  EXPECT_EQ(m4[248], -3.0f * std::ldexp(1.0f, -26));
}

TEST(CodeMaps, LinearUnsigned) {
  const std::vector<float> m = lowbit::create_linear_map(false);
  std::vector<double> want;
  for (int i = 0; i < 256; ++i) want.push_back(i / 255.0);
  expect_near_all(m, want);
  expect_sorted(m);
  // Fewer bits: bitsandbytes inserts the zero padding in the middle of
  // linspace(0, 1, 16) -- not ascending, reproduced as is.
  const std::vector<float> m4 = lowbit::create_linear_map(false, 4);
  ASSERT_EQ(m4.size(), 256u);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(m4[static_cast<size_t>(i)], i / 15.0, kTol) << i;
  for (int i = 8; i < 248; ++i) EXPECT_EQ(m4[static_cast<size_t>(i)], 0.0f) << i;
  for (int i = 248; i < 256; ++i) EXPECT_NEAR(m4[static_cast<size_t>(i)], (i - 240) / 15.0, kTol) << i;
}

TEST(CodeMaps, LinearRejectsBadArguments) {
  expect_invalid([] { lowbit::create_linear_map(true, 9); }, "create_linear_map: total_bits must be in 1..8 (got 9)");
  expect_invalid([] { lowbit::create_linear_map(false, 0); }, "create_linear_map: total_bits must be in 1..8 (got 0)");
}

// ------------------------------------------------------------- normal map
TEST(CodeMaps, NormalMapWithExtraValueGivesNf4) {
  const std::vector<float> m = lowbit::create_normal_map();
  ASSERT_EQ(m.size(), 256u);
  expect_sorted(m);
  EXPECT_EQ(m.back(), 1.0f);
  EXPECT_EQ(m.front(), -1.0f);
  std::vector<float> nonzero;
  for (float x : m) {
    if (x != 0.0f) nonzero.push_back(x);
  }
  ASSERT_EQ(nonzero.size(), 15u);
  // NF4 is this map's nonzeros plus 0: bit for bit.
  for (int i = 0, j = 0; i < 16; ++i) {
    if (i == 7) continue;
    EXPECT_EQ(nonzero[static_cast<size_t>(j++)], static_cast<float>(kNf4Spec[i])) << i;
  }
  // And close to the exact construction (float32 quantiles move it ~1e-7).
  EXPECT_NEAR(m[255 - 1], lowbit::normal_ppf(0.9677083 - (0.9677083 - 0.5) / 8) / lowbit::normal_ppf(0.9677083), 2e-7);
}

TEST(CodeMaps, NormalMapSymmetric) {
  const std::vector<float> m = lowbit::create_normal_map(0.9677083, false);
  ASSERT_EQ(m.size(), 256u);
  expect_sorted(m);
  EXPECT_EQ(count_zeros(m), 242u);
  // 7 values a side, the negative half of NF4 mirrored.
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(m[static_cast<size_t>(i)], static_cast<float>(kNf4Spec[i])) << i;
    EXPECT_EQ(m[static_cast<size_t>(255 - i)], -static_cast<float>(kNf4Spec[i])) << i;
  }
}

TEST(CodeMaps, NormalMapOtherOffset) {
  const double off = 0.99;
  const std::vector<float> m = lowbit::create_normal_map(off);
  ASSERT_EQ(m.size(), 256u);
  expect_sorted(m);
  const double top = lowbit::normal_ppf(off);
  for (int i = 0; i < 8; ++i) {  // positives: ppf(linspace(off, 0.5, 9)[:-1]) / max
    EXPECT_NEAR(m[static_cast<size_t>(255 - i)], lowbit::normal_ppf(off + (0.5 - off) * i / 8) / top, 2e-7) << i;
  }
  for (int i = 0; i < 7; ++i) {  // negatives: -ppf(linspace(off, 0.5, 8)[:-1]) / max
    EXPECT_NEAR(m[static_cast<size_t>(i)], -lowbit::normal_ppf(off + (0.5 - off) * i / 7) / top, 2e-7) << i;
  }
}

TEST(CodeMaps, NormalMapRejectsBadOffset) {
  expect_invalid([] { lowbit::create_normal_map(1.0); }, "create_normal_map: offset must be in (0.5, 1) (got 1)");
  expect_invalid([] { lowbit::create_normal_map(0.5); }, "create_normal_map: offset must be in (0.5, 1) (got 0.5)");
  expect_invalid([] { lowbit::create_normal_map(std::numeric_limits<double>::quiet_NaN()); },
                 "create_normal_map: offset must be in (0.5, 1) (got nan)");
}

// ---------------------------------------------------------------- fp8 map
// bitsandbytes' fp8 construction in double: bias 2^(e-1), subnormals
// m * 2^-bias, normals (1 + m) * 2^-(E - bias - 1); sorted, padded, / max.
std::vector<double> fp8_map_exact(bool is_signed, int e, int p) {
  std::vector<double> v;
  const int bias = 1 << (e - 1);
  for (int E = 0; E < (1 << e); ++E) {
    for (int mant = 0; mant < (1 << p); ++mant) {
      const double frac = std::ldexp(static_cast<double>(mant), -p);
      const double x = E == 0 ? std::ldexp(frac, -bias) : std::ldexp(1.0 + frac, -(E - bias - 1));
      v.push_back(x);
      if (is_signed) v.push_back(-x);
    }
  }
  v.resize(std::max<size_t>(v.size(), 256), 0.0);
  std::sort(v.begin(), v.end());
  const double max = v.back();
  for (double& x : v) x /= max;
  return v;
}

TEST(CodeMaps, Fp8MapE4m3Like) {
  const std::vector<float> m = lowbit::create_fp8_map(true, 4, 3, 8);
  ASSERT_EQ(m.size(), 256u);
  expect_sorted(m);
  expect_near_all(m, fp8_map_exact(true, 4, 3));
  // bias 8: the largest value is 1.875 * 2^8 = 480.
  EXPECT_EQ(m.back(), 1.0f);
  EXPECT_EQ(m.front(), -1.0f);
  EXPECT_NEAR(m[254], 448.0 / 480, kTol);
  EXPECT_NEAR(m[129], std::ldexp(1.0, -11) / 480, 1e-7 * std::ldexp(1.0, -11) / 480);  // smallest subnormal 2^-3 * 2^-8
  // +0 then -0, as Python's stable sort leaves them.
  EXPECT_EQ(m[127], 0.0f);
  EXPECT_EQ(m[128], 0.0f);
  EXPECT_FALSE(std::signbit(m[127]));
  EXPECT_TRUE(std::signbit(m[128]));
}

TEST(CodeMaps, Fp8MapE5m2Like) {
  const std::vector<float> m = lowbit::create_fp8_map();  // signed, 5, 2, 8
  ASSERT_EQ(m.size(), 256u);
  expect_sorted(m);
  expect_near_all(m, fp8_map_exact(true, 5, 2));
  EXPECT_EQ(m.back(), 1.0f);
  EXPECT_NEAR(m[254], 1.5 / 1.75, kTol);  // max is 1.75 * 2^16
  EXPECT_NEAR(m[253], 1.25 / 1.75, kTol);
  EXPECT_NEAR(m[129], std::ldexp(1.0, -34) / 1.75, 1e-7 * std::ldexp(1.0, -34) / 1.75);
}

TEST(CodeMaps, Fp8MapUnsignedAndNarrow) {
  const std::vector<float> u = lowbit::create_fp8_map(false, 4, 4, 8);
  ASSERT_EQ(u.size(), 256u);
  expect_sorted(u);
  expect_near_all(u, fp8_map_exact(false, 4, 4));
  EXPECT_EQ(u.front(), 0.0f);
  EXPECT_EQ(count_zeros(u), 1u);
  // 4 bits, e2m1 layout with bias 2: {0, 0.125, 1, 1.5, 2, 3, 4, 6} / 6 a side.
  const std::vector<float> n = lowbit::create_fp8_map(true, 2, 1, 4);
  ASSERT_EQ(n.size(), 256u);
  expect_sorted(n);
  expect_near_all(n, fp8_map_exact(true, 2, 1));
  EXPECT_EQ(count_zeros(n), 242u);
  EXPECT_NEAR(n[0], -1.0, kTol);
  EXPECT_NEAR(n[1], -4.0 / 6, kTol);
  EXPECT_NEAR(n[254], 4.0 / 6, kTol);
  EXPECT_NEAR(n[249], 0.125 / 6, kTol);
}

TEST(CodeMaps, Fp8MapRejectsBadArguments) {
  expect_invalid([] { lowbit::create_fp8_map(true, 4, 4, 8); },
                 "create_fp8_map: exponent_bits + precision_bits must equal total_bits - 1 (sign bit) = 7 "
                 "(got 4 + 4 = 8)");
  expect_invalid([] { lowbit::create_fp8_map(false, 4, 3, 8); },
                 "create_fp8_map: exponent_bits + precision_bits must equal total_bits - 0 (unsigned) = 8 "
                 "(got 4 + 3 = 7)");
  expect_invalid([] { lowbit::create_fp8_map(true, 5, 2, 9); }, "create_fp8_map: total_bits must be in 1..8 (got 9)");
  expect_invalid([] { lowbit::create_fp8_map(false, 8, 0, 8); },
                 "create_fp8_map: exponent_bits must be in 1..7 (got 8)");
  expect_invalid([] { lowbit::create_fp8_map(true, 0, 7, 8); },
                 "create_fp8_map: exponent_bits must be in 1..7 (got 0)");
  expect_invalid([] { lowbit::create_fp8_map(true, 8, -1, 8); },
                 "create_fp8_map: exponent_bits must be in 1..7 (got 8)");
  expect_invalid([] { lowbit::create_fp8_map(true, 4, -1, 4); },
                 "create_fp8_map: precision_bits must be >= 0 (got -1)");
}

// ----------------------------------------------------------- quantile map
TEST(CodeMaps, QuantileMapFromQuantiles) {
  const std::vector<float> m = lowbit::quantile_map_from_quantiles({-3.0f, 2.0f, -1.0f, 0.5f});
  ASSERT_EQ(m.size(), 256u);
  expect_sorted(m);
  EXPECT_EQ(m[0], -1.0f);
  EXPECT_EQ(m[1], -1.0f / 3.0f);
  EXPECT_EQ(count_zeros(m), 252u);
  EXPECT_EQ(m[254], 0.5f / 3.0f);
  EXPECT_EQ(m[255], 2.0f / 3.0f);

  // 255 quantiles (8 bits) fill the map with one zero.
  std::vector<float> q;
  for (int i = 0; i < 255; ++i) q.push_back(static_cast<float>(i - 100) / 10.0f);
  const std::vector<float> full = lowbit::quantile_map_from_quantiles(q);
  ASSERT_EQ(full.size(), 256u);
  expect_sorted(full);
  EXPECT_EQ(full.back(), 1.0f);
  EXPECT_EQ(full.front(), -10.0f / 15.4f);
  EXPECT_EQ(count_zeros(full), 2u);  // the quantile 0 and the appended 0
}

TEST(CodeMaps, QuantileMapRejectsBadArguments) {
  expect_invalid([] { lowbit::quantile_map_from_quantiles({}); },
                 "quantile_map_from_quantiles: quantiles must hold 1..255 values (got 0)");
  expect_invalid([] { lowbit::quantile_map_from_quantiles(std::vector<float>(256, 1.0f)); },
                 "quantile_map_from_quantiles: quantiles must hold 1..255 values (got 256)");
  expect_invalid(
      [] {
        lowbit::quantile_map_from_quantiles({0.0f, 0.0f});
      },
      "quantile_map_from_quantiles: quantiles must not all be zero (the map is divided by max |value|)");
  expect_invalid(
      [] {
        lowbit::quantile_map_from_quantiles({1.0f, std::numeric_limits<float>::quiet_NaN()});
      },
      "quantile_map_from_quantiles: quantiles must be finite (got nan at index 1)");
}

// ------------------------------------------------------------- normal_ppf
TEST(NormalPpf, KnownValues) {
  // Reference values: 40-digit mpmath, the root of ncdf(x) = p for the double p.
  const struct {
    double p, x;
  } kCases[] = {
      {0.975, 1.9599639845400538556},    {0.025, -1.9599639845400542118},  {0.9, 1.2815515655446005935},
      {0.99, 2.3263478740408407676},     {0.75, 0.6744897501960817432},    {0.95, 1.6448536269514722843},
      {0.999, 3.0902323061678132778},    {0.3, -0.52440051270804081597},   {0.574, 0.18656718183651926358},
      {0.08, -1.4050715603096325447},    {0.92, 1.4050715603096328248},    {0.9677083, 1.8481309597573733693},
      {0.999999, 4.7534243088170877657}, {1e-5, -4.2648907939228246102},   {1e-10, -6.3613409024040561991},
      {1e-20, -9.2623400897984075796},   {1e-200, -30.205594179579643063}, {1e-300, -37.047096299361199237},
  };
  for (const auto& c : kCases) {
    EXPECT_NEAR(lowbit::normal_ppf(c.p), c.x, 1e-13 * std::fabs(c.x)) << "p = " << c.p;
  }
  EXPECT_EQ(lowbit::normal_ppf(0.5), 0.0);
  EXPECT_NEAR(lowbit::normal_ppf(0.975), 1.959963984540054, 1e-9 * 1.959963984540054);
}

TEST(NormalPpf, InvertsTheCdf) {
  // Phi(ppf(p)) = p through erfc, over 1e-300 .. 0.5, and the symmetry.
  for (double lg = -300.0; lg <= std::log10(0.5); lg += 0.37) {
    const double p = std::pow(10.0, lg);
    const double x = lowbit::normal_ppf(p);
    EXPECT_NEAR(0.5 * std::erfc(-x / std::sqrt(2.0)), p, 1e-11 * p) << "p = " << p;
  }
  for (int k = 1; k < 1024; ++k) {
    const double p = k / 1024.0;  // 1 - p is exact
    EXPECT_NEAR(lowbit::normal_ppf(1.0 - p), -lowbit::normal_ppf(p), 1e-15 + 1e-15 * std::fabs(lowbit::normal_ppf(p)))
        << k;
  }
}

TEST(NormalPpf, RejectsOutOfRange) {
  for (double p : {0.0, 1.0, -0.25, 1.5}) {
    std::ostringstream want;
    want << "normal_ppf: p must be in the open interval (0, 1) (got " << p << ")";
    expect_invalid([p] { lowbit::normal_ppf(p); }, want.str());
  }
  expect_invalid([] { lowbit::normal_ppf(std::numeric_limits<double>::quiet_NaN()); },
                 "normal_ppf: p must be in the open interval (0, 1) (got nan)");
}

// ------------------------------------------------------ 4-bit encoders
TEST(Encode4bit, Nf4ByMidpoints) {
  const float* t = lowbit::core::kNf4Table;
  float mid[15];
  lowbit::core::table_midpoints(t, 16, mid);
  for (uint32_t c = 0; c < 16; ++c) EXPECT_EQ(lowbit::core::encode_by_midpoints<4>(t[c], mid), c) << c;
  for (uint32_t i = 0; i < 15; ++i) {
    const float m = (t[i] + t[i + 1]) * 0.5f;  // the float32 midpoint
    EXPECT_EQ(mid[i], m);
    EXPECT_EQ(lowbit::core::encode_by_midpoints<4>(m, mid), i) << "exact midpoint takes the lower code";
    EXPECT_EQ(lowbit::core::encode_by_midpoints<4>(std::nextafter(m, 2.0f), mid), i + 1) << i;
    EXPECT_EQ(lowbit::core::encode_by_midpoints<4>(std::nextafter(m, -2.0f), mid), i) << i;
  }
  EXPECT_EQ(lowbit::core::encode_by_midpoints<4>(std::numeric_limits<float>::quiet_NaN(), mid), 7u);  // NaN as 0
  EXPECT_EQ(lowbit::core::encode_by_midpoints<4>(-0.0f, mid), 7u);
  EXPECT_EQ(lowbit::core::encode_by_midpoints<4>(5.0f, mid), 15u);
  EXPECT_EQ(lowbit::core::encode_by_midpoints<4>(-5.0f, mid), 0u);
  EXPECT_EQ(lowbit::core::encode_by_midpoints<4>(std::numeric_limits<float>::infinity(), mid), 15u);
}

TEST(Encode4bit, DynamicMapByMidpoints) {
  const std::vector<float> code = lowbit::create_dynamic_map();
  std::vector<float> mid(255);
  lowbit::core::table_midpoints(code.data(), 256, mid.data());
  for (uint32_t c = 0; c < 256; ++c) {
    EXPECT_EQ(lowbit::core::encode_by_midpoints<8>(code[c], mid.data()), c) << c;
    if (c < 255) {
      EXPECT_EQ(lowbit::core::encode_by_midpoints<8>(mid[c], mid.data()), c) << c;
      EXPECT_EQ(lowbit::core::encode_by_midpoints<8>(std::nextafter(mid[c], 2.0f), mid.data()), c + 1) << c;
    }
  }
}

TEST(Encode4bit, Fp4DecisionConstants) {
  using lowbit::core::encode_fp4;
  // bitsandbytes' thresholds: above t -> `above`, at t -> `below`.
  const struct {
    float t;
    uint32_t above, below;
  } kCases[] = {{0.8333333f, 0b011, 0b010},  {0.583333f, 0b010, 0b101},   {0.4166667f, 0b101, 0b100},
                {0.29166667f, 0b100, 0b111}, {0.20833333f, 0b111, 0b110}, {0.0859375f, 0b110, 0b001},
                {0.00260417f, 0b001, 0b000}};
  for (const auto& c : kCases) {
    const float up = std::nextafter(c.t, 2.0f);
    EXPECT_EQ(encode_fp4(c.t), c.below) << c.t;
    EXPECT_EQ(encode_fp4(up), c.above) << c.t;
    EXPECT_EQ(encode_fp4(-c.t), 8u | c.below) << c.t;
    EXPECT_EQ(encode_fp4(-up), 8u | c.above) << c.t;
  }
  EXPECT_EQ(encode_fp4(0.0f), 0u);
  EXPECT_EQ(encode_fp4(-0.0f), 0u);  // -0 is not < 0
  EXPECT_EQ(encode_fp4(-1e-6f), 8u);
  EXPECT_EQ(encode_fp4(1.0f), 0b011u);
  EXPECT_EQ(encode_fp4(7.0f), 0b011u);
  EXPECT_EQ(encode_fp4(-1.0f), 0b1011u);
  EXPECT_EQ(encode_fp4(std::numeric_limits<float>::quiet_NaN()), 0u);
  // Every table value encodes to its own code (code 8, -0, to 0).
  for (uint32_t c = 0; c < 16; ++c) {
    EXPECT_EQ(encode_fp4(lowbit::core::kFp4Table[c]), c == 8 ? 0u : c) << c;
  }
}

}  // namespace
