// Code-map generators (docs/formats.md, "Code maps"), reproducing bitsandbytes' functional.py.
//
// bitsandbytes builds these maps from torch float32 tensors, so every value is
// the result of a particular sequence of float32 operations. We replay that
// sequence so the maps match bitsandbytes bit for bit (the contract is 1e-7):
//  - torch.linspace(start, end, steps) on the CPU: step = (end - start) /
//    (steps - 1) in float32; element i = start + step * i for i < steps / 2,
//    else end - step * (steps - 1 - i). torch's kernel is compiled with FMA
//    contraction, so each element is ONE fused multiply-add (one rounding):
//    published dumps of create_dynamic_map() made with torch match that and
//    not the separately rounded product (e.g. entry 36 is -0.48671871423721313).
//  - tensor arithmetic (means, scalar multiply, normalizing division) is one
//    IEEE float32 operation per element; a Python scalar is cast to float32.
//  - Python's list.sort() is stable, so equal values (0.0 and -0.0) keep their
//    insertion order: we use std::stable_sort with operator<.
#include "lowbit/code_maps.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/tables.h"

namespace lowbit {
namespace {

using core::cat;

// torch.linspace(start, end, steps, dtype=float32) on the CPU.
std::vector<float> linspace_f32(float start, float end, int steps) {
  std::vector<float> out;
  if (steps <= 0) return out;
  if (steps == 1) return {start};
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int halfway = steps / 2;
  out.reserve(static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    out.push_back(i < halfway ? std::fma(step, static_cast<float>(i), start)
                              : std::fma(-step, static_cast<float>(steps - 1 - i), end));
  }
  return out;
}

// (b[:-1] + b[1:]) / 2.0 in float32.
std::vector<float> adjacent_means(const std::vector<float>& b) {
  std::vector<float> means;
  for (size_t k = 0; k + 1 < b.size(); ++k) means.push_back((b[k] + b[k + 1]) / 2.0f);
  return means;
}

void stable_sort_ascending(std::vector<float>& v) {
  std::stable_sort(v.begin(), v.end(), [](float a, float b) { return a < b; });
}

void pad_to_256(std::vector<float>& v) {
  if (v.size() < 256) v.resize(256, 0.0f);
}

// Python's int(2 ** k + 1) for an integer k: a fraction for k < 0, truncated.
int pow2_plus_one_items(int k) { return k >= 0 ? (1 << k) + 1 : 1; }

// Python's 2 ** k - 1 for an integer k, as a count (negative k: never > 0).
int pow2_minus_one_items(int k) { return k >= 0 ? (1 << k) - 1 : 0; }

// 10 ** e for an integer e <= 0 as Python computes it (an int for e == 0, else
// the double pow(10.0, e)), then cast to float32 as torch casts a scalar.
float power_of_ten_f32(int e) { return e == 0 ? 1.0f : static_cast<float>(std::pow(10.0, e)); }

}  // namespace

// ------------------------------------------------------------ dynamic map
std::vector<float> create_dynamic_map(bool is_signed, int max_exponent_bits, int total_bits) {
  constexpr const char* op = "create_dynamic_map";
  LOWBIT_REQUIRE(total_bits >= 1 && total_bits <= 8, ErrorCode::invalid_argument, op,
                 ": total_bits must be in 1..8 (got ", total_bits, ")");
  LOWBIT_REQUIRE(max_exponent_bits >= 1 && max_exponent_bits <= 8, ErrorCode::invalid_argument, op,
                 ": max_exponent_bits must be in 1..8 (got ", max_exponent_bits, ")");

  // As in bitsandbytes: one bit is set aside for the sign even when unsigned.
  const int non_sign_bits = total_bits - 1;
  const int additional_items = pow2_minus_one_items(non_sign_bits - max_exponent_bits);

  // bitsandbytes asserts the count; some (signedness, bits) combinations do
  // not add up, so check up front with a message saying why.
  int count = 2;  // the appended 0 and 1.0
  for (int i = 0; i < max_exponent_bits; ++i) {
    const int k = is_signed ? i + non_sign_bits - max_exponent_bits : i + non_sign_bits - max_exponent_bits + 1;
    count += (pow2_plus_one_items(k) - 1) * (is_signed ? 2 : 1);
  }
  count += additional_items * (is_signed ? 2 : 1);
  LOWBIT_REQUIRE(count == (1 << total_bits), ErrorCode::invalid_argument, op, ": max_exponent_bits=", max_exponent_bits,
                 " with total_bits=", total_bits, (is_signed ? " (signed)" : " (unsigned)"), " gives ", count,
                 " values, expected 2^total_bits = ", (1 << total_bits));

  std::vector<float> data;
  auto add_scaled = [&](const std::vector<float>& means, int exponent) {
    const float scale = power_of_ten_f32(exponent);
    for (float m : means) data.push_back(scale * m);
    if (is_signed) {
      for (float m : means) data.push_back(-scale * m);
    }
  };
  for (int i = 0; i < max_exponent_bits; ++i) {
    const int k = is_signed ? i + non_sign_bits - max_exponent_bits : i + non_sign_bits - max_exponent_bits + 1;
    add_scaled(adjacent_means(linspace_f32(0.1f, 1.0f, pow2_plus_one_items(k))), i - (max_exponent_bits - 1));
  }
  if (additional_items > 0) {
    // bitsandbytes reuses the loop's last i here: the scale is 10^0.
    add_scaled(adjacent_means(linspace_f32(0.1f, 1.0f, additional_items + 1)), 0);
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  pad_to_256(data);
  stable_sort_ascending(data);
  return data;
}

// ------------------------------------------------------------- linear map
// Not always ascending, as in bitsandbytes (reproduced as is): the zero
// padding goes into the middle of linspace(sign, 1, n), which for an unsigned
// map of fewer than 8 bits puts zeros between positive values; and the
// middle element of a signed linspace is 1 - k * fl(step) in one rounding,
// a tiny nonzero (2^-28 at 8 bits, -3 * 2^-26 at 4 bits) beside the zeros.
std::vector<float> create_linear_map(bool is_signed, int total_bits, bool add_zero) {
  constexpr const char* op = "create_linear_map";
  LOWBIT_REQUIRE(total_bits >= 1 && total_bits <= 8, ErrorCode::invalid_argument, op,
                 ": total_bits must be in 1..8 (got ", total_bits, ")");
  const float sign = is_signed ? -1.0f : 0.0f;
  int total_values = 1 << total_bits;
  // A zero in a signed map costs one value, to keep the map centered on zero.
  if (add_zero || total_bits < 8) total_values = is_signed ? (1 << total_bits) - 1 : (1 << total_bits);
  const std::vector<float> values = linspace_f32(sign, 1.0f, total_values);
  const size_t gap = 256 - values.size();
  if (gap == 0) return values;
  const size_t half = values.size() / 2;
  std::vector<float> out(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(half));
  out.insert(out.end(), gap, 0.0f);
  out.insert(out.end(), values.begin() + static_cast<std::ptrdiff_t>(half), values.end());
  return out;
}

// ------------------------------------------------------------- normal map
std::vector<float> create_normal_map(double offset, bool use_extra_value) {
  constexpr const char* op = "create_normal_map";
  const float off = static_cast<float>(offset);  // torch.linspace takes it as float32
  LOWBIT_REQUIRE(off > 0.5f && off < 1.0f, ErrorCode::invalid_argument, op, ": offset must be in (0.5, 1) (got ",
                 offset, ")");
  // scipy's norm.ppf of float32 quantiles; the double result becomes float32
  // in torch.Tensor(v).
  auto ppf_of = [](const std::vector<float>& q, size_t n, float sign) {
    std::vector<float> out;
    for (size_t i = 0; i < n; ++i) out.push_back(static_cast<float>(sign * normal_ppf(q[i])));
    return out;
  };
  // Positive side: 8 values (15 nonzeros in all) or 7 (symmetric, 14).
  const int pos_steps = use_extra_value ? 9 : 8;
  std::vector<float> v = ppf_of(linspace_f32(off, 0.5f, pos_steps), static_cast<size_t>(pos_steps - 1), 1.0f);
  const size_t nonzeros = static_cast<size_t>(pos_steps - 1) + 7;
  v.insert(v.end(), 256 - nonzeros, 0.0f);
  const std::vector<float> neg = ppf_of(linspace_f32(off, 0.5f, 8), 7, -1.0f);
  v.insert(v.end(), neg.begin(), neg.end());
  stable_sort_ascending(v);
  const float max = *std::max_element(v.begin(), v.end());
  for (float& x : v) x /= max;
  return v;
}

// ---------------------------------------------------------------- fp8 map
// bitsandbytes' construction, exponent bias 2^(e-1) and the exponent of a
// normal value running downward (2^-(E - bias - 1)); values are exact
// doubles, then float32, then divided by the max in float32.
std::vector<float> create_fp8_map(bool is_signed, int exponent_bits, int precision_bits, int total_bits) {
  constexpr const char* op = "create_fp8_map";
  LOWBIT_REQUIRE(total_bits >= 1 && total_bits <= 8, ErrorCode::invalid_argument, op,
                 ": total_bits must be in 1..8 (got ", total_bits, ")");
  // Above 7 exponent bits the largest value 2^(2^(e-1)) overflows float32.
  LOWBIT_REQUIRE(exponent_bits >= 1 && exponent_bits <= 7, ErrorCode::invalid_argument, op,
                 ": exponent_bits must be in 1..7 (got ", exponent_bits, ")");
  LOWBIT_REQUIRE(precision_bits >= 0, ErrorCode::invalid_argument, op, ": precision_bits must be >= 0 (got ",
                 precision_bits, ")");
  const int has_sign = is_signed ? 1 : 0;
  LOWBIT_REQUIRE(exponent_bits + precision_bits == total_bits - has_sign, ErrorCode::invalid_argument, op,
                 ": exponent_bits + precision_bits must equal total_bits - ", has_sign,
                 (is_signed ? " (sign bit)" : " (unsigned)"), " = ", total_bits - has_sign, " (got ", exponent_bits,
                 " + ", precision_bits, " = ", exponent_bits + precision_bits, ")");

  const int bias = 1 << (exponent_bits - 1);
  std::vector<double> values;
  for (int evalue = 0; evalue < (1 << exponent_bits); ++evalue) {
    // itertools.product([0, 1], repeat=p): pattern bits from the most significant.
    for (int pattern = 0; pattern < (1 << precision_bits); ++pattern) {
      double value = evalue != 0 ? 1.0 : 0.0;
      for (int i = 0; i < precision_bits; ++i) {
        if ((pattern >> (precision_bits - 1 - i)) & 1) value += std::ldexp(1.0, -(i + 1));
      }
      value = evalue == 0 ? std::ldexp(value, -bias) : std::ldexp(value, -(evalue - bias - 1));
      values.push_back(value);
      if (is_signed) values.push_back(-value);  // -0.0 for the zero, as in Python
    }
  }
  std::stable_sort(values.begin(), values.end(), [](double a, double b) { return a < b; });
  std::vector<float> code(values.begin(), values.end());
  pad_to_256(code);  // Python: append int zeros, then sort again
  stable_sort_ascending(code);
  const float max = *std::max_element(code.begin(), code.end());
  for (float& x : code) x /= max;
  return code;
}

// ----------------------------------------------------------- quantile map
std::vector<float> quantile_map_from_quantiles(const std::vector<float>& quantiles) {
  constexpr const char* op = "quantile_map_from_quantiles";
  LOWBIT_REQUIRE(!quantiles.empty() && quantiles.size() <= 255, ErrorCode::invalid_argument, op,
                 ": quantiles must hold 1..255 values (got ", quantiles.size(), ")");
  float max_abs = 0.0f;
  for (size_t i = 0; i < quantiles.size(); ++i) {
    LOWBIT_REQUIRE(std::isfinite(quantiles[i]), ErrorCode::invalid_argument, op, ": quantiles must be finite (got ",
                   quantiles[i], " at index ", i, ")");
    max_abs = std::max(max_abs, std::fabs(quantiles[i]));
  }
  LOWBIT_REQUIRE(max_abs > 0.0f, ErrorCode::invalid_argument, op,
                 ": quantiles must not all be zero (the map is divided by max |value|)");
  std::vector<float> q = quantiles;
  q.push_back(0.0f);
  pad_to_256(q);
  stable_sort_ascending(q);
  for (float& x : q) x /= max_abs;
  return q;
}

// ---------------------------------------------------------- 4-bit tables
std::array<float, 16> get_4bit_type(std::string_view name, int blocksize) {
  constexpr const char* op = "get_4bit_type";
  const float* table = nullptr;
  bool normalize = true;
  if (name == "nf4") {
    table = core::kNf4Table;
  } else if (name == "fp4") {
    table = core::kFp4Table;
  } else if (name == "int4") {
    table = core::kInt4Table;
  } else if (name == "af4") {
    LOWBIT_REQUIRE(blocksize == 64, ErrorCode::invalid_argument, op, ": af4 is defined for blocksize 64 only (got ",
                   blocksize, ")");
    table = core::kAf4Table;
  } else if (name == "fp4_e2m1") {
    table = core::kFp4E2m1Table;
    normalize = false;  // OCP element: the scales carry the range
  } else {
    core::fail(ErrorCode::invalid_argument,
               cat(op, ": name must be one of nf4, fp4, int4, af4, fp4_e2m1 (got '", name, "')"));
  }
  std::array<float, 16> out{};
  float max_abs = 0.0f;
  for (int i = 0; i < 16; ++i) max_abs = std::max(max_abs, std::fabs(table[i]));
  for (int i = 0; i < 16; ++i) {
    float v = normalize ? table[i] / max_abs : table[i];
    // bitsandbytes writes the fp4 / int4 negative zero as the Python int
    // literal -0, which is +0: its quant_map holds +0.0 at code 8. (Kernels
    // decoding code 8 as sign * 0 may still produce -0.0; equal in value.)
    if (normalize && v == 0.0f) v = 0.0f;
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

// ------------------------------------------------------- inverse normal CDF
// Wichura's algorithm AS241 (PPND16, Applied Statistics 37(3), 1988): rational
// approximations in three regions, about 1e-16 relative error, which is why
// no refinement step follows (a Newton step through erfc would only add the
// erfc rounding error back near p = 0.5).
namespace {

double horner(const double (&c)[8], double x) {
  double r = c[7];
  for (int i = 6; i >= 0; --i) r = r * x + c[i];
  return r;
}

constexpr double kA[8] = {3.3871328727963666080e0, 1.3314166789178437745e2, 1.9715909503065514427e3,
                          1.3731693765509461125e4, 4.5921953931549871457e4, 6.7265770927008700853e4,
                          3.3430575583588128105e4, 2.5090809287301226727e3};
constexpr double kB[8] = {1.0,
                          4.2313330701600911252e1,
                          6.8718700749205790830e2,
                          5.3941960214247511077e3,
                          2.1213794301586595867e4,
                          3.9307895800092710610e4,
                          2.8729085735721942674e4,
                          5.2264952788528545610e3};
constexpr double kC[8] = {1.42343711074968357734e0,  4.63033784615654529590e0, 5.76949722146069140550e0,
                          3.64784832476320460504e0,  1.27045825245236838258e0, 2.41780725177450611770e-1,
                          2.27238449892691845833e-2, 7.74545014278341407640e-4};
constexpr double kD[8] = {1.0,
                          2.05319162663775882187e0,
                          1.67638483018380384940e0,
                          6.89767334985100004550e-1,
                          1.48103976427480074590e-1,
                          1.51986665636164571966e-2,
                          5.47593808499534494600e-4,
                          1.05075007164441684324e-9};
constexpr double kE[8] = {6.65790464350110377720e0,  5.46378491116411436990e0,  1.78482653991729133580e0,
                          2.96560571828504891230e-1, 2.65321895265761230930e-2, 1.24266094738807843860e-3,
                          2.71155556874348757815e-5, 2.01033439929228813265e-7};
constexpr double kF[8] = {1.0,
                          5.99832206555887937690e-1,
                          1.36929880922735805310e-1,
                          1.48753612908506148525e-2,
                          7.86869131145613259100e-4,
                          1.84631831751005468180e-5,
                          1.42151175831644588870e-7,
                          2.04426310338993978564e-15};

}  // namespace

double normal_ppf(double p) {
  LOWBIT_REQUIRE(p > 0.0 && p < 1.0, ErrorCode::invalid_argument,
                 "normal_ppf: p must be in the open interval (0, 1) (got ", p, ")");
  const double q = p - 0.5;
  if (std::fabs(q) <= 0.425) {
    const double r = 0.180625 - q * q;
    return q * horner(kA, r) / horner(kB, r);
  }
  // Tails: r = sqrt(-log(min(p, 1 - p))); 1 - p is exact for p >= 0.5.
  double r = std::sqrt(-std::log(q < 0.0 ? p : 1.0 - p));
  double x;
  if (r <= 5.0) {
    r -= 1.6;
    x = horner(kC, r) / horner(kD, r);
  } else {
    r -= 5.0;
    x = horner(kE, r) / horner(kF, r);
  }
  return q < 0.0 ? -x : x;
}

}  // namespace lowbit
