// flash_attention against attention written out here in float64: every
// dtype, grouped-query and multi-query heads, Sq < Skv, Sq == Skv and
// Sq > Skv under the bottom-right causal mask (queries that see no key give
// zeros and a log-sum-exp of -inf), no keys at all, K in either layout, a
// scale of its own, different head dims for k and v; and the errors.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "lowbit/ops/attention.h"

namespace lowbit::test {
namespace {

struct Case {
  int64_t B, Sq, Skv, H, Hkv, D, Dv;
  bool causal;
  double scale;
  KLayout layout;
  DType dtype;
};

// out and lse in float64 from the tensors' own values (k given as [B, Skv, Hkv, D]).
void expected(const Case& c, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
              std::vector<double>& out, std::vector<double>& lse) {
  const double scale = c.scale != 0.0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
  out.assign(static_cast<size_t>(c.B * c.Sq * c.H * c.Dv), 0.0);
  lse.assign(static_cast<size_t>(c.B * c.H * c.Sq), -std::numeric_limits<double>::infinity());
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t g = h / (c.H / c.Hkv);
      for (int64_t i = 0; i < c.Sq; ++i) {
        std::vector<double> s;
        for (int64_t j = 0; j < c.Skv; ++j) {
          if (c.causal && j > i + c.Skv - c.Sq) break;
          double dot = 0.0;
          for (int64_t d = 0; d < c.D; ++d) {
            dot += double{q[static_cast<size_t>(((b * c.Sq + i) * c.H + h) * c.D + d)]} *
                   k[static_cast<size_t>(((b * c.Skv + j) * c.Hkv + g) * c.D + d)];
          }
          s.push_back(scale * dot);
        }
        if (s.empty()) continue;
        double peak = s[0], sum = 0.0;
        for (double x : s) peak = std::max(peak, x);
        for (double x : s) sum += std::exp(x - peak);
        for (size_t j = 0; j < s.size(); ++j) {
          const double p = std::exp(s[j] - peak) / sum;
          for (int64_t e = 0; e < c.Dv; ++e) {
            out[static_cast<size_t>(((b * c.Sq + i) * c.H + h) * c.Dv + e)] +=
                p * v[static_cast<size_t>(((b * c.Skv + static_cast<int64_t>(j)) * c.Hkv + g) * c.Dv + e)];
          }
        }
        lse[static_cast<size_t>((b * c.H + h) * c.Sq + i)] = peak + std::log(sum);
      }
    }
  }
}

// k [B, Skv, Hkv, D] as [B, D, Hkv, Skv].
Tensor to_bdhs(const Tensor& k) {
  const int64_t B = k.size(0), S = k.size(1), G = k.size(2), D = k.size(3);
  Tensor t = Tensor::empty({B, D, G, S}, k.dtype());
  const size_t e = dtype_storage_bytes(k.dtype(), 1);
  const auto* src = static_cast<const uint8_t*>(k.data());
  auto* dst = static_cast<uint8_t*>(t.data());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t d = 0; d < D; ++d)
          std::memcpy(dst + (((b * D + d) * G + g) * S + s) * e, src + (((b * S + s) * G + g) * D + d) * e, e);
  return t;
}

TEST(FlashAttention, MatchesFloat64Attention) {
  const std::vector<Case> cases = {
      {2, 5, 7, 4, 2, 16, 16, false, 0.0, KLayout::bshd, DType::f32},
      {1, 6, 6, 3, 3, 8, 8, true, 0.0, KLayout::bshd, DType::f32},
      {2, 3, 9, 4, 1, 32, 16, true, 0.3, KLayout::bdhs, DType::f32},  // multi-query, Sq < Skv, Dv != D
      {1, 8, 5, 2, 1, 16, 16, true, 0.0, KLayout::bshd, DType::f32},  // Sq > Skv: the first 3 queries see no key
      {2, 4, 11, 4, 2, 64, 64, true, 0.0, KLayout::bdhs, DType::f16},
      {1, 7, 7, 2, 2, 32, 32, false, 0.0, KLayout::bshd, DType::bf16},
      {1, 2, 0, 2, 1, 8, 8, false, 0.0, KLayout::bshd, DType::f32},  // no keys
  };
  for (const Case& c : cases) {
    const std::string what = std::string(dtype_name(c.dtype)) + " B" + std::to_string(c.B) + " Sq" +
                             std::to_string(c.Sq) + " Skv" + std::to_string(c.Skv) + " H" + std::to_string(c.H) +
                             "/" + std::to_string(c.Hkv) + " D" + std::to_string(c.D) + (c.causal ? " causal" : "") +
                             (c.layout == KLayout::bdhs ? " bdhs" : "");
    SCOPED_TRACE(what);
    const Tensor q = random_floats({c.B, c.Sq, c.H, c.D}, c.dtype), k = random_floats({c.B, c.Skv, c.Hkv, c.D}, c.dtype),
                 v = random_floats({c.B, c.Skv, c.Hkv, c.Dv}, c.dtype);
    const Tensor kk = c.layout == KLayout::bdhs ? to_bdhs(k) : k;
    const FlashAttentionResult r = flash_attention(q, kk, v, c.causal, c.scale, true, c.layout);
    std::vector<double> want, want_lse;
    expected(c, to_floats(q.ref()), to_floats(k.ref()), to_floats(v.ref()), want, want_lse);
    const std::vector<float> got = to_floats(r.out.ref()), got_lse = to_floats(r.lse.ref());
    // Each output is a convex combination of v's values, rounded once to the dtype.
    const double u = c.dtype == DType::f32 ? 0x1p-24 : c.dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 2.0 * u * std::fabs(want[i]) + 1e-6) << "out " << i;
    }
    for (size_t i = 0; i < want_lse.size(); ++i) {
      if (std::isinf(want_lse[i])) {
        ASSERT_TRUE(std::isinf(got_lse[i]) && got_lse[i] < 0) << "lse " << i << " = " << got_lse[i];
      } else {
        ASSERT_NEAR(got_lse[i], want_lse[i], 1e-5 * (1.0 + std::fabs(want_lse[i]))) << "lse " << i;
      }
    }
  }
}

TEST(FlashAttention, Errors) {
  const ErrorCode bad = ErrorCode::invalid_argument, dtype = ErrorCode::unsupported_dtype;
  const Tensor q = random_floats({1, 4, 4, 8}, DType::f32), k = random_floats({1, 6, 2, 8}, DType::f32),
               v = random_floats({1, 6, 2, 8}, DType::f32);
  expect_error([&] { flash_attention(q, random_floats({6, 2, 8}, DType::f32), v); }, bad,
               {"flash_attention: k must be 4-D", "[B, Skv, Hkv, D]"});
  expect_error([&] { flash_attention(q, random_floats({1, 6, 3, 8}, DType::f32), random_floats({1, 6, 3, 8}, DType::f32)); },
               bad, {"flash_attention: q's heads must be a multiple of k's", "H = 4, Hkv = 3"});
  expect_error([&] { flash_attention(q, random_floats({1, 6, 2, 16}, DType::f32), v); }, bad,
               {"flash_attention: k's head dim must be q's 8 (got 16)"});
  expect_error([&] { flash_attention(q, k, random_floats({1, 5, 2, 8}, DType::f32)); }, bad,
               {"flash_attention: v must be [B, Skv, Hkv, Dv] with k's Skv 6"});
  expect_error([&] { flash_attention(q, random_floats({1, 6, 2, 8}, DType::f16), v); }, dtype,
               {"flash_attention: k", "float32", "(got float16)"});
  expect_error([&] { flash_attention(random_bytes({1, 4, 4, 8}, DType::i8), k, v); }, dtype,
               {"flash_attention: q", "(got int8)"});
  expect_error([&] { flash_attention(q, k, v, false, std::nan("")); }, bad, {"flash_attention: scale must be finite"});
  Tensor out = Tensor::empty({1, 4, 4, 7}, DType::f32);
  expect_error([&] { run(FlashAttentionArgs{q, k, v, out, {}, 0.0, false, KLayout::bshd}); }, bad,
               {"flash_attention: out", "[1, 4, 4, 8]"});
}

}  // namespace
}  // namespace lowbit::test
