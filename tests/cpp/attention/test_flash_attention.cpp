// flash_attention (the fast path, and the reference within its rounding alone) against attention written out
// here in float64: every
// dtype, grouped-query and multi-query heads, Sq < Skv, Sq == Skv and
// Sq > Skv under the bottom-right causal mask (queries that see no key give
// zeros and a log-sum-exp of -inf), no keys at all, K in either layout, a
// scale of its own, different head dims for k and v; and the errors. The
// KV-cache form: a paged cache, a contiguous one and the dense op agree bit for
// bit; its errors. The varlen form: each packed sequence gives the dense op's bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attention/bdhs.h"
#include "core/registry.h"
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

// out and lse in float64 from the tensors' own values (k given as [B, Skv, Hkv, D]), and the error a float32
// computation of them may make (the fast path's): each score off by up to (D + 2) ulps of its terms' magnitudes,
// which moves the output by up to twice that times the largest |v| it weighs, plus the sums' own rounding.
void expected(const Case& c, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
              std::vector<double>& out, std::vector<double>& lse, std::vector<double>& out_err,
              std::vector<double>& lse_err) {
  const double scale = c.scale != 0.0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
  out.assign(static_cast<size_t>(c.B * c.Sq * c.H * c.Dv), 0.0);
  lse.assign(static_cast<size_t>(c.B * c.H * c.Sq), -std::numeric_limits<double>::infinity());
  out_err.assign(out.size(), 0.0);
  lse_err.assign(lse.size(), 0.0);
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t g = h / (c.H / c.Hkv);
      for (int64_t i = 0; i < c.Sq; ++i) {
        std::vector<double> s;
        double ds = 0.0, vmax = 0.0;  // the largest score error, the largest |v|
        for (int64_t j = 0; j < c.Skv; ++j) {
          if (c.causal && j > i + c.Skv - c.Sq) break;
          double dot = 0.0, mag = 0.0;
          for (int64_t d = 0; d < c.D; ++d) {
            const double t = double{q[static_cast<size_t>(((b * c.Sq + i) * c.H + h) * c.D + d)]} *
                             k[static_cast<size_t>(((b * c.Skv + j) * c.Hkv + g) * c.D + d)];
            dot += t;
            mag += std::fabs(t);
          }
          s.push_back(scale * dot);
          ds = std::max(ds, (static_cast<double>(c.D) + 2.0) * 0x1p-24 * std::fabs(scale) * mag);
          for (int64_t e = 0; e < c.Dv; ++e) {
            vmax = std::max(vmax, double{std::fabs(v[static_cast<size_t>(((b * c.Skv + j) * c.Hkv + g) * c.Dv + e)])});
          }
        }
        if (s.empty()) continue;
        const double n = static_cast<double>(s.size());
        for (int64_t e = 0; e < c.Dv; ++e) {
          out_err[static_cast<size_t>(((b * c.Sq + i) * c.H + h) * c.Dv + e)] = (4.0 * ds + (n + 4.0) * 0x1p-22) * vmax;
        }
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
        lse_err[static_cast<size_t>((b * c.H + h) * c.Sq + i)] = 2.0 * ds + (n + 4.0) * 0x1p-22 * (1.0 + std::fabs(peak));
      }
    }
  }
}

// One case against float64 (expected) and the float64 reference op, inputs of standard deviation `stddev`
// (times the harness' block scales).
void check_case(const Case& c, float stddev) {
  const std::string what = std::string(dtype_name(c.dtype)) + " B" + std::to_string(c.B) + " Sq" +
                           std::to_string(c.Sq) + " Skv" + std::to_string(c.Skv) + " H" + std::to_string(c.H) +
                           "/" + std::to_string(c.Hkv) + " D" + std::to_string(c.D) + (c.causal ? " causal" : "") +
                           (c.layout == KLayout::bdhs ? " bdhs" : "");
  SCOPED_TRACE(what);
  const Tensor q = random_floats({c.B, c.Sq, c.H, c.D}, c.dtype, stddev),
               k = random_floats({c.B, c.Skv, c.Hkv, c.D}, c.dtype, stddev),
               v = random_floats({c.B, c.Skv, c.Hkv, c.Dv}, c.dtype, stddev);
  const Tensor kk = c.layout == KLayout::bdhs ? to_bdhs(k) : k;
  const FlashAttentionResult r = flash_attention(q, kk, v, c.causal, c.scale, true, c.layout);
  std::vector<double> want, want_lse, out_err, lse_err;
  expected(c, to_floats(q.ref()), to_floats(k.ref()), to_floats(v.ref()), want, want_lse, out_err, lse_err);
  const std::vector<float> got = to_floats(r.out.ref()), got_lse = to_floats(r.lse.ref());
  // Each output is a convex combination of v's values, rounded once to the dtype; the fast path's float32
  // scores and sums add out_err (the reference, run too, stays within the rounding alone).
  const double u = c.dtype == DType::f32 ? 0x1p-24 : c.dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
  Tensor ref_out = Tensor::empty(r.out.sizes(), c.dtype), ref_lse = Tensor::empty(r.lse.sizes(), DType::f32);
  core::OpRegistry<FlashAttentionArgs>::find("cpu-reference")
      .run(FlashAttentionArgs{q, kk, v, ref_out, ref_lse, c.scale, c.causal, c.layout}, nullptr, {});
  const std::vector<float> ref = to_floats(ref_out.ref()), ref_l = to_floats(ref_lse.ref());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(ref[i], want[i], 2.0 * u * std::fabs(want[i]) + 1e-30) << "reference out " << i;
    ASSERT_NEAR(got[i], want[i], 2.0 * u * std::fabs(want[i]) + out_err[i] + 1e-30) << "out " << i;
  }
  for (size_t i = 0; i < want_lse.size(); ++i) {
    if (std::isinf(want_lse[i])) {
      ASSERT_TRUE(std::isinf(got_lse[i]) && got_lse[i] < 0) << "lse " << i << " = " << got_lse[i];
    } else {
      ASSERT_NEAR(ref_l[i], want_lse[i], 1e-6 * (1.0 + std::fabs(want_lse[i]))) << "reference lse " << i;
      ASSERT_NEAR(got_lse[i], want_lse[i], lse_err[i] + 1e-6 * (1.0 + std::fabs(want_lse[i]))) << "lse " << i;
    }
  }
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
      // The fast path's blocks of 128 queries and chunks of 128 keys, ragged, with D and Dv not whole tiles.
      {1, 300, 290, 2, 1, 40, 72, true, 0.0, KLayout::bshd, DType::f32},
      {1, 130, 260, 2, 2, 64, 64, false, 0.0, KLayout::bdhs, DType::bf16},
      {1, 300, 140, 1, 1, 16, 16, true, 0.0, KLayout::bshd, DType::f32},  // the first 160 queries see no key
      // Blocks of one row (one query, heads of their own kv heads): k read as rows, several chunks.
      {1, 1, 300, 2, 2, 40, 72, false, 0.0, KLayout::bshd, DType::f32},
      {2, 1, 290, 3, 3, 24, 16, true, 0.0, KLayout::bshd, DType::bf16},
  };
  for (const Case& c : cases) check_case(c, 1.0f);
}

// Small scores (weights spread over many keys): each key's share of the output is large enough that a wrong
// row, chunk rescale or tile shows beyond the bound, in every path of the fast kernel (blocks of 4-row tiles,
// of one row, several chunks, causal tiles skipped).
TEST(FlashAttention, SpreadWeightsMatchFloat64) {
  for (const Case& c : std::vector<Case>{{1, 1, 300, 2, 2, 40, 72, false, 0.0, KLayout::bshd, DType::f32},
                                         {1, 300, 290, 2, 1, 40, 72, true, 0.0, KLayout::bshd, DType::f32},
                                         {1, 130, 260, 2, 2, 64, 64, false, 0.0, KLayout::bdhs, DType::f32}}) {
    check_case(c, 0.02f);
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

namespace lowbit::test {
namespace {

Tensor i32_tensor(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(Shape(shape), DType::i32);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

// Rows [b, 0, g, 0] .. [b, n - 1, g, last] of t [B, S, G, E], as a [1, n, G, E] tensor.
Tensor first_rows(const Tensor& t, int64_t b, int64_t n) {
  const int64_t S = t.size(1), G = t.size(2), E = t.size(3);
  const size_t row = static_cast<size_t>(G * E) * dtype_storage_bytes(t.dtype(), 1);
  Tensor r = Tensor::empty({1, n, G, E}, t.dtype());
  std::memcpy(r.data(), static_cast<const uint8_t*>(t.data()) + static_cast<size_t>(b * S) * row,
              static_cast<size_t>(n) * row);
  return r;
}

// The cache of each sequence given three ways: contiguous [B, S_max, Hkv, D], paged over shuffled pages of P
// tokens, and as its own first tokens to the dense op; the three give the same bits (the same sums in the same
// order), and the dense op is checked against float64 above.
TEST(FlashAttentionKvcache, PagedContiguousAndDenseAgree) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (bool causal : {false, true}) {
      const int64_t B = 3, Sq = 2, H = 4, Hkv = 2, D = 16, Dv = 8, S_max = 13, P = 4, max_pages = 4;
      const std::vector<int32_t> lens{13, 1, 7};
      const Tensor q = random_floats({B, Sq, H, D}, dtype);
      const Tensor kc = random_floats({B, S_max, Hkv, D}, dtype), vc = random_floats({B, S_max, Hkv, Dv}, dtype);
      // Pages: sequence b's page p holds tokens p*P .. p*P + P - 1, at slot perm[b * max_pages + p].
      std::vector<int32_t> perm(static_cast<size_t>(B * max_pages));
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int32_t>(i);
      std::shuffle(perm.begin(), perm.end(), rng());
      const int64_t slots = B * max_pages;
      Tensor kp = Tensor::empty({slots, P, Hkv, D}, dtype), vp = Tensor::empty({slots, P, Hkv, Dv}, dtype);
      std::memset(kp.data(), 0, kp.nbytes());
      std::memset(vp.data(), 0, vp.nbytes());
      const size_t e = dtype_storage_bytes(dtype, 1);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t j = 0; j < S_max && j < max_pages * P; ++j) {
          const int64_t slot = perm[static_cast<size_t>(b * max_pages + j / P)], r = j % P;
          std::memcpy(static_cast<uint8_t*>(kp.data()) + ((slot * P + r) * Hkv * D) * e,
                      static_cast<const uint8_t*>(kc.data()) + ((b * S_max + j) * Hkv * D) * e, Hkv * D * e);
          std::memcpy(static_cast<uint8_t*>(vp.data()) + ((slot * P + r) * Hkv * Dv) * e,
                      static_cast<const uint8_t*>(vc.data()) + ((b * S_max + j) * Hkv * Dv) * e, Hkv * Dv * e);
        }
      }
      const Tensor seqlens = i32_tensor(lens, {B}), table = i32_tensor(perm, {B, max_pages});
      const FlashAttentionResult contiguous = flash_attention_kvcache(q, kc, vc, seqlens, {}, causal, 0.0, true);
      const FlashAttentionResult paged = flash_attention_kvcache(q, kp, vp, seqlens, table, causal, 0.0, true);
      ASSERT_EQ(std::memcmp(contiguous.out.data(), paged.out.data(), paged.out.nbytes()), 0);
      ASSERT_EQ(std::memcmp(contiguous.lse.data(), paged.lse.data(), paged.lse.nbytes()), 0);
      const size_t q_row = static_cast<size_t>(Sq * H * D) * e, o_row = static_cast<size_t>(Sq * H * Dv) * e;
      for (int64_t b = 0; b < B; ++b) {
        Tensor qb = Tensor::empty({1, Sq, H, D}, dtype);
        std::memcpy(qb.data(), static_cast<const uint8_t*>(q.data()) + b * q_row, q_row);
        const FlashAttentionResult dense = flash_attention(qb, first_rows(kc, b, lens[static_cast<size_t>(b)]),
                                                           first_rows(vc, b, lens[static_cast<size_t>(b)]), causal,
                                                           0.0, true);
        EXPECT_EQ(std::memcmp(dense.out.data(), static_cast<const uint8_t*>(paged.out.data()) + b * o_row, o_row), 0)
            << dtype_name(dtype) << (causal ? " causal" : "") << " sequence " << b;
        EXPECT_EQ(std::memcmp(dense.lse.data(), static_cast<const float*>(paged.lse.data()) + b * H * Sq,
                              static_cast<size_t>(H * Sq) * 4),
                  0)
            << "lse, sequence " << b;
      }
    }
  }
}

TEST(FlashAttentionKvcache, Errors) {
  const ErrorCode bad = ErrorCode::invalid_argument;
  const Tensor q = random_floats({2, 1, 2, 8}, DType::f32);
  const Tensor kc = random_floats({2, 6, 1, 8}, DType::f32), vc = random_floats({2, 6, 1, 8}, DType::f32);
  const Tensor kp = random_floats({5, 4, 1, 8}, DType::f32), vp = random_floats({5, 4, 1, 8}, DType::f32);
  expect_error([&] { flash_attention_kvcache(q, kc, vc, i32_tensor({6, 7}, {2})); }, bad,
               {"flash_attention_kvcache: cache_seqlens[1] must be in [0, 6] (got 7)"});
  expect_error([&] { flash_attention_kvcache(q, kp, vp, i32_tensor({5, 2}, {2}), i32_tensor({0, 5, 1, 2}, {2, 2})); },
               bad, {"flash_attention_kvcache: block_table[0, 1] must be a page of the cache in [0, 5) (got 5)"});
  expect_error([&] { flash_attention_kvcache(q, kp, vp, i32_tensor({5, 2}, {2})); }, bad,
               {"a contiguous k_cache holds one sequence per batch row: 2 (got 5", "block_table"});
  expect_error([&] { flash_attention_kvcache(q, kp, vp, i32_tensor({1, 1}, {2}), i32_tensor({0, 1, 2}, {3})); },
               bad, {"flash_attention_kvcache: block_table", "[2, 0]"});
  expect_error([&] { flash_attention_kvcache(q, kc, vc, i32_tensor({1}, {1})); }, bad,
               {"flash_attention_kvcache: cache_seqlens", "[2]"});
  expect_error([&] { flash_attention_kvcache(q, kc, random_floats({2, 5, 1, 8}, DType::f32), i32_tensor({1, 1}, {2})); },
               bad, {"v_cache must share k_cache's leading dims"});
}

}  // namespace
}  // namespace lowbit::test

namespace lowbit::test {
namespace {

// Rows [r0, r0 + n) of t [total, G, E] as a [1, n, G, E] tensor (one sequence for the dense op).
Tensor packed_rows(const Tensor& t, int64_t r0, int64_t n) {
  const size_t row = static_cast<size_t>(t.size(1) * t.size(2)) * dtype_storage_bytes(t.dtype(), 1);
  Tensor r = Tensor::empty({1, n, t.size(1), t.size(2)}, t.dtype());
  std::memcpy(r.data(), static_cast<const uint8_t*>(t.data()) + static_cast<size_t>(r0) * row,
              static_cast<size_t>(n) * row);
  return r;
}

// Sequences of their own lengths packed along the tokens (one empty, one with fewer keys than queries) give,
// sequence by sequence, the dense op's bits; the offsets' errors.
TEST(FlashAttentionVarlen, EachSequenceIsTheDenseOp) {
  const std::vector<int32_t> cq{0, 3, 3, 8, 9}, ck{0, 5, 7, 9, 14};
  const int64_t H = 4, Hkv = 2, D = 16, Dv = 8, tq = cq.back(), tk = ck.back(), B = 4;
  for (DType dtype : {DType::f32, DType::f16}) {
    for (bool causal : {false, true}) {
      const Tensor q = random_floats({tq, H, D}, dtype), k = random_floats({tk, Hkv, D}, dtype),
                   v = random_floats({tk, Hkv, Dv}, dtype);
      const FlashAttentionResult r =
          flash_attention_varlen(q, k, v, i32_tensor(cq, {B + 1}), i32_tensor(ck, {B + 1}), causal, 0.0, true);
      ASSERT_EQ(r.lse.size(0), H);
      const size_t e = dtype_storage_bytes(dtype, 1);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t q0 = cq[b], nq = cq[b + 1] - cq[b], k0 = ck[b], nk = ck[b + 1] - ck[b];
        if (nq == 0) continue;
        const FlashAttentionResult dense =
            flash_attention(packed_rows(q, q0, nq), packed_rows(k, k0, nk), packed_rows(v, k0, nk), causal, 0.0, true);
        EXPECT_EQ(std::memcmp(dense.out.data(), static_cast<const uint8_t*>(r.out.data()) + q0 * H * Dv * e,
                              static_cast<size_t>(nq * H * Dv) * e),
                  0)
            << dtype_name(dtype) << (causal ? " causal" : "") << " sequence " << b;
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t i = 0; i < nq; ++i) {
            const float want = static_cast<const float*>(dense.lse.data())[h * nq + i];
            const float got = static_cast<const float*>(r.lse.data())[h * tq + q0 + i];
            EXPECT_TRUE(got == want || (std::isinf(got) && std::isinf(want))) << "lse " << b << " " << h << " " << i;
          }
        }
      }
    }
  }
  const ErrorCode bad = ErrorCode::invalid_argument;
  const Tensor q = random_floats({tq, H, D}, DType::f32), k = random_floats({tk, Hkv, D}, DType::f32),
               v = random_floats({tk, Hkv, Dv}, DType::f32);
  expect_error([&] { flash_attention_varlen(q, k, v, i32_tensor({0, 3, 2, 8, 9}, {5}), i32_tensor(ck, {5})); }, bad,
               {"flash_attention_varlen: cu_seqlens_q must not decrease", "cu_seqlens_q[2] = 2"});
  expect_error([&] { flash_attention_varlen(q, k, v, i32_tensor(cq, {5}), i32_tensor({0, 5, 7, 9, 13}, {5})); }, bad,
               {"flash_attention_varlen: cu_seqlens_k[4] must be the tokens' total 14 (got 13)"});
  expect_error([&] { flash_attention_varlen(q, k, v, i32_tensor({1, 3, 3, 8, 9}, {5}), i32_tensor(ck, {5})); }, bad,
               {"flash_attention_varlen: cu_seqlens_q[0] must be 0 (got 1)"});
  expect_error([&] { flash_attention_varlen(q, k, v, i32_tensor(cq, {5}), i32_tensor({0, 5, 7, 14}, {4})); }, bad,
               {"flash_attention_varlen: cu_seqlens_k", "[5]"});
}

}  // namespace
}  // namespace lowbit::test
