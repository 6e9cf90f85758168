// The CUDA attention ops against the CPU reference (float64 sums) on fresh
// random inputs, with poisoned outputs so that an element left unwritten
// shows: every head-dim instance of the tensor-core kernel (64, 128, 256) and
// head dims that run the next instance with the rest masked (40, 96, D != Dv),
// fp16 and bf16; the SIMT path (float32, D not a multiple of 8, bdhs keys not
// a multiple of 8); causal and not, Sq < Skv and Sq > Skv (queries that see
// no key: zeros and -inf), grouped-query and multi-query heads, k in bdhs,
// a scale of its own (negative too), ragged key counts (1, 63, 65, 1000, 0);
// split key ranges (few CTAs, long keys); varlen with empty sequences and a
// sequence without keys; KV caches contiguous and paged (P = 16, 64, 256, 7)
// with a length of 0, decode and chunked prefill; out-of-range lengths and
// pages giving NaN on their own rows only; a decode call captured in a CUDA
// graph and replayed on new lengths, pages and values.
//
// The bound: the GPU rounds P to the dtype before P·V, so each output is off
// by up to u·Σ_j p_j·|v_j| besides the two roundings of the output (the
// reference's and its own); the magnitude Σ_j p_j·|v_j| is the reference run
// on |v|. fp32 scores and sums add a little on that scale, and for float32
// inputs the scores' own rounding bounds it (score_errors).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "attention/bdhs.h"
#include "core/registry.h"
#include "cuda_test_util.h"
#include "harness/compare.h"
#include "harness/harness.h"
#include "lowbit/ops/attention.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

const Device kGpu = Device::cuda(0);

// |t| in t's dtype (the sign bit cleared: exact).
Tensor abs_values(const Tensor& t) {
  Tensor r = Tensor::copy_of(t.ref(), Device::cpu());
  const size_t bytes = dtype_storage_bytes(t.dtype(), 1);
  auto* p = static_cast<uint8_t*>(r.data());
  for (int64_t i = 0; i < r.numel(); ++i) p[static_cast<size_t>(i) * bytes + bytes - 1] &= 0x7f;
  return r;
}

Tensor i32_tensor(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(Shape(shape), DType::i32);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

// Runs args on the GPU with a workspace of the size the op asks for.
template <class Args>
void run_with_workspace(const Args& a, Stream stream = {}) {
  const size_t bytes = workspace_size(a);
  const Tensor ws = bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, kGpu) : Tensor();
  run(a, bytes ? ws.data() : nullptr, stream);
}

// The reference's outputs (host tensors of the op's shapes).
struct Want {
  Tensor out, lse, mag;
  // Per row of q (token and head): how far fp32 scores can take the output, as a multiple of mag (below).
  std::vector<double> score_err;
};

// fp32 scores: s = scale * q·k is off by up to (D + 2) u |scale| Σ|q_d||k_d| (the D-term dot product and
// the scaling), so each weight p_j by a factor up to e^±that and the output by up to twice that times
// Σ p_j |v_j|; bounded per row of q by its |q|₁ times the largest |k|. Inputs whose blocks reach 20 standard
// deviations make this the largest term for float32 (the fp16/bf16 bounds already hold P's rounding).
std::vector<double> score_errors(const Tensor& q, const Tensor& k, double scale) {
  const std::vector<float> qf = to_floats(q.ref()), kf = to_floats(k.ref());
  const int64_t D = q.size(q.ndim() - 1);
  double kmax = 0.0;
  for (const float x : kf) kmax = std::max(kmax, double{std::fabs(x)});
  const double s = scale != 0.0 ? std::fabs(scale) : 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> err(qf.size() / static_cast<size_t>(D));
  for (size_t r = 0; r < err.size(); ++r) {
    double l1 = 0.0;
    for (int64_t d = 0; d < D; ++d) l1 += std::fabs(qf[r * static_cast<size_t>(D) + static_cast<size_t>(d)]);
    err[r] = 2.0 * static_cast<double>(D + 2) * 0x1p-24 * s * l1 * kmax;
  }
  return err;
}

// got and got_lse (the GPU's) against the reference: the bound of the header per element, lse within fp32
// sums of the scores, -inf where the reference has -inf (a query that sees no key), NaN where asked.
void expect_close(const Want& want, const Tensor& got, const Tensor& got_lse, DType dtype, const std::string& what) {
  const std::vector<float> w = to_floats(want.out.ref()), m = to_floats(want.mag.ref());
  const std::vector<float> g = to_floats(Tensor::copy_of(got.ref(), Device::cpu()).ref());
  ASSERT_EQ(w.size(), g.size()) << what;
  const double u = unit_roundoff(dtype);
  const double terms = dtype == DType::f32 ? 0x1p-14 : 4.0 * u + 0x1p-12;
  int bad = 0;
  const size_t row_len = want.score_err.empty() ? 1 : w.size() / want.score_err.size();
  for (size_t i = 0; i < w.size() && bad < 5; ++i) {
    const double scores = dtype == DType::f32 && !want.score_err.empty() ? want.score_err[i / row_len] : 0.0;
    const double bound = 2.0 * u * std::fabs(w[i]) + (terms + scores) * m[i] + 1e-5;
    if (!(std::fabs(double{g[i]} - w[i]) <= bound)) {  // NaN fails too (poison left unwritten)
      ADD_FAILURE() << what << ": out element " << i << " is " << g[i] << ", the reference's " << w[i] << " (bound "
                    << bound << ")";
      ++bad;
    }
  }
  if (!want.lse.defined()) return;
  const std::vector<float> wl = to_floats(want.lse.ref());
  const std::vector<float> gl = to_floats(Tensor::copy_of(got_lse.ref(), Device::cpu()).ref());
  ASSERT_EQ(wl.size(), gl.size()) << what;
  for (size_t i = 0; i < wl.size() && bad < 10; ++i) {
    const bool ok = std::isinf(wl[i]) ? (std::isinf(gl[i]) && gl[i] < 0)
                                      : std::fabs(double{gl[i]} - wl[i]) <= 1e-3 * (1.0 + std::fabs(wl[i]));
    if (!ok) {
      ADD_FAILURE() << what << ": lse element " << i << " is " << gl[i] << ", the reference's " << wl[i];
      ++bad;
    }
  }
}

// ------------------------------------------------------------------ dense

struct DenseCase {
  int64_t B, Sq, Skv, H, Hkv, D, Dv;
  bool causal;
  KLayout layout;
  DType dtype;
  double scale = 0.0;
};

std::string name_of(const DenseCase& c) {
  return std::string(dtype_name(c.dtype)) + " B" + std::to_string(c.B) + " Sq" + std::to_string(c.Sq) + " Skv" +
         std::to_string(c.Skv) + " H" + std::to_string(c.H) + "/" + std::to_string(c.Hkv) + " D" + std::to_string(c.D) +
         " Dv" + std::to_string(c.Dv) + (c.causal ? " causal" : "") + (c.layout == KLayout::bdhs ? " bdhs" : "") +
         (c.scale != 0.0 ? " scale " + std::to_string(c.scale) : "");
}

void check_dense(const DenseCase& c) {
  const std::string what = name_of(c);
  SCOPED_TRACE(what);
  const Tensor q = random_floats({c.B, c.Sq, c.H, c.D}, c.dtype);
  const Tensor k = random_floats({c.B, c.Skv, c.Hkv, c.D}, c.dtype);
  const Tensor v = random_floats({c.B, c.Skv, c.Hkv, c.Dv}, c.dtype);
  const Tensor kk = c.layout == KLayout::bdhs ? to_bdhs(k) : k;
  const auto& reference = core::OpRegistry<FlashAttentionArgs>::find("cpu-reference");
  Want want{Tensor::empty({c.B, c.Sq, c.H, c.Dv}, c.dtype), Tensor::empty({c.B, c.H, c.Sq}, DType::f32),
            Tensor::empty({c.B, c.Sq, c.H, c.Dv}, c.dtype), {}};
  want.score_err = score_errors(q, k, c.scale);
  reference.run(FlashAttentionArgs{q, kk, v, want.out, want.lse, c.scale, c.causal, c.layout}, nullptr, {});
  const Tensor av = abs_values(v);
  reference.run(FlashAttentionArgs{q, kk, av, want.mag, {}, c.scale, c.causal, c.layout}, nullptr, {});

  const Tensor gq = q.to(kGpu), gk = kk.to(kGpu), gv = v.to(kGpu);
  const Tensor out = poisoned({c.B, c.Sq, c.H, c.Dv}, c.dtype), lse = poisoned({c.B, c.H, c.Sq}, DType::f32);
  run_with_workspace(FlashAttentionArgs{gq, gk, gv, out, lse, c.scale, c.causal, c.layout});
  expect_close(want, out, lse, c.dtype, what);
  // Without lse, through the allocating call.
  const FlashAttentionResult r = flash_attention(gq, gk, gv, c.causal, c.scale, false, c.layout);
  expect_close(Want{want.out, Tensor(), want.mag, want.score_err}, r.out, Tensor(), c.dtype, what + " (no lse)");
}

TEST(CudaAttention, DenseMatchesTheReference) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const KLayout n = KLayout::bshd, t = KLayout::bdhs;
  const DType f16 = DType::f16, bf16 = DType::bf16;
  const std::vector<DenseCase> cases = {
      {2, 128, 128, 4, 4, 64, 64, false, n, f16},
      {2, 128, 128, 4, 4, 64, 64, true, n, bf16},
      {1, 65, 1000, 8, 2, 128, 128, true, n, f16},  // Sq < Skv, grouped-query, ragged tiles
      {1, 65, 1000, 8, 2, 128, 128, false, n, bf16},
      {2, 200, 63, 2, 1, 256, 256, true, n, bf16},  // multi-query, Sq > Skv: 137 queries see no key
      {1, 70, 65, 4, 4, 256, 256, false, n, f16},
      {1, 100, 65, 4, 2, 40, 40, true, n, bf16},   // D 40: the 64 instance, masked
      {2, 33, 1, 3, 3, 96, 96, false, n, f16},     // one key; D 96: the 128 instance
      {1, 50, 77, 4, 2, 64, 128, true, n, f16},    // Dv != D
      {1, 90, 136, 8, 2, 128, 128, true, t, f16},  // k as [B, D, Hkv, Skv]
      {2, 17, 64, 2, 1, 64, 64, false, t, bf16},
      {1, 40, 520, 4, 1, 256, 256, true, t, bf16},
      {1, 1, 1000, 32, 8, 128, 128, false, n, f16},     // a decode row of 4 heads a kv head: split key ranges
      {1, 3, 700, 16, 2, 64, 64, true, n, bf16, -0.2},  // a negative scale
      {1, 512, 512, 2, 2, 128, 128, true, n, bf16},     // causal tiles skipped past the diagonal
      {1, 5, 0, 2, 1, 64, 64, false, n, f16},           // no keys at all
      {2, 30, 45, 4, 2, 64, 64, true, n, bf16, 0.3},
  };
  for (const DenseCase& c : cases) check_dense(c);
}

TEST(CudaAttention, DenseSlowPathMatchesTheReference) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const KLayout n = KLayout::bshd, t = KLayout::bdhs;
  const std::vector<DenseCase> cases = {
      {1, 33, 70, 4, 2, 64, 64, true, n, DType::f32},  // float32
      {2, 20, 9, 2, 1, 16, 24, false, t, DType::f32},
      {1, 40, 50, 4, 2, 20, 20, true, n, DType::f16},     // D not a multiple of 8
      {1, 30, 65, 4, 2, 64, 64, true, t, DType::bf16},    // bdhs with Skv not a multiple of 8
      {1, 9, 40, 2, 2, 320, 200, false, n, DType::bf16},  // D above 256; Dv above 128 (two column passes)
  };
  for (const DenseCase& c : cases) check_dense(c);
}

// ----------------------------------------------------------------- kvcache

struct KvCase {
  int64_t B, Sq, H, Hkv, D;
  int64_t S_max;  // contiguous: the cache's length; paged: max_pages * P
  int64_t P;      // 0: contiguous
  std::vector<int32_t> lens;
  bool causal;
  DType dtype;
};

std::string name_of(const KvCase& c) {
  std::string lens;
  for (int32_t l : c.lens) lens += (lens.empty() ? "" : ",") + std::to_string(l);
  return std::string(dtype_name(c.dtype)) + " B" + std::to_string(c.B) + " Sq" + std::to_string(c.Sq) + " H" +
         std::to_string(c.H) + "/" + std::to_string(c.Hkv) + " D" + std::to_string(c.D) + " S_max" +
         std::to_string(c.S_max) + (c.P ? " paged P" + std::to_string(c.P) : " contiguous") + " lens " + lens +
         (c.causal ? " causal" : "");
}

// The case's cache (pages shuffled, and two spare pages nobody reads), its table and lengths.
struct KvInputs {
  Tensor q, kc, vc, lens, table;
};

KvInputs kv_inputs(const KvCase& c) {
  KvInputs x;
  x.q = random_floats({c.B, c.Sq, c.H, c.D}, c.dtype);
  x.lens = i32_tensor(c.lens, {c.B});
  if (c.P == 0) {
    x.kc = random_floats({c.B, c.S_max, c.Hkv, c.D}, c.dtype);
    x.vc = random_floats({c.B, c.S_max, c.Hkv, c.D}, c.dtype);
    return x;
  }
  const int64_t max_pages = c.S_max / c.P, pages = c.B * max_pages + 2;
  x.kc = random_floats({pages, c.P, c.Hkv, c.D}, c.dtype);
  x.vc = random_floats({pages, c.P, c.Hkv, c.D}, c.dtype);
  std::vector<int32_t> perm(static_cast<size_t>(pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng());
  perm.resize(static_cast<size_t>(c.B * max_pages));
  x.table = i32_tensor(perm, {c.B, max_pages});
  return x;
}

Want kv_reference(const KvInputs& x, bool causal, DType dtype) {
  const auto& reference = core::OpRegistry<FlashAttentionKvcacheArgs>::find("cpu-reference");
  const int64_t B = x.q.size(0), Sq = x.q.size(1), H = x.q.size(2), Dv = x.vc.size(3);
  Want want{Tensor::empty({B, Sq, H, Dv}, dtype), Tensor::empty({B, H, Sq}, DType::f32),
            Tensor::empty({B, Sq, H, Dv}, dtype), {}};
  want.score_err = score_errors(x.q, x.kc, 0.0);
  const TensorRef table = x.table.defined() ? x.table.ref() : TensorRef{};
  reference.run(FlashAttentionKvcacheArgs{x.q, x.kc, x.vc, x.lens, table, want.out, want.lse, 0.0, causal}, nullptr,
                {});
  const Tensor av = abs_values(x.vc);
  reference.run(FlashAttentionKvcacheArgs{x.q, x.kc, av, x.lens, table, want.mag, {}, 0.0, causal}, nullptr, {});
  return want;
}

void check_kvcache(const KvCase& c) {
  const std::string what = name_of(c);
  SCOPED_TRACE(what);
  const KvInputs x = kv_inputs(c);
  const Want want = kv_reference(x, c.causal, c.dtype);
  const Tensor gq = x.q.to(kGpu), gk = x.kc.to(kGpu), gv = x.vc.to(kGpu), glens = x.lens.to(kGpu);
  const Tensor gtable = x.table.defined() ? x.table.to(kGpu) : Tensor();
  const Tensor out = poisoned({c.B, c.Sq, c.H, c.D}, c.dtype), lse = poisoned({c.B, c.H, c.Sq}, DType::f32);
  run_with_workspace(FlashAttentionKvcacheArgs{gq, gk, gv, glens, gtable.defined() ? gtable.ref() : TensorRef{}, out,
                                               lse, 0.0, c.causal});
  expect_close(want, out, lse, c.dtype, what);
}

TEST(CudaAttention, KvcacheMatchesTheReference) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const DType f16 = DType::f16, bf16 = DType::bf16;
  const std::vector<KvCase> cases = {
      {3, 1, 8, 2, 128, 300, 0, {300, 0, 129}, false, f16},   // contiguous, one empty sequence
      {3, 4, 8, 2, 128, 320, 16, {300, 0, 129}, true, bf16},  // paged, P 16
      {2, 1, 32, 8, 128, 1024, 64, {1000, 65}, false, f16},   // P 64
      {2, 2, 4, 4, 64, 768, 256, {700, 256}, true, bf16},     // P 256
      {3, 3, 6, 3, 64, 70, 7, {70, 1, 0}, true, f16},         // P 7: pages not a multiple of the tile
      {2, 1, 8, 1, 256, 210, 7, {209, 64}, false, bf16},      // multi-query, D 256
      {2, 20, 8, 2, 128, 512, 16, {500, 20}, true, f16},      // chunked prefill: 80 rows a kv head, causal
      {1, 16, 4, 4, 96, 256, 0, {100}, true, bf16},           // D 96, Sq 16
      {2, 2, 4, 2, 64, 64, 1, {64, 5}, true, f16},            // P 1
  };
  for (const KvCase& c : cases) check_kvcache(c);
}

// One or two CTAs of work against long caches: the keys split into ranges merged by the combine kernel.
TEST(CudaAttention, KvcacheSplitKeysMatchTheReference) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const std::vector<KvCase> cases = {
      {1, 1, 8, 1, 128, 4096, 0, {3001}, false, DType::f16},
      {1, 1, 8, 1, 128, 4096, 16, {4096}, true, DType::bf16},
      {1, 3, 8, 1, 64, 2048, 256, {1999}, true, DType::f16},
      {2, 1, 4, 2, 256, 1536, 64, {1500, 3}, false, DType::bf16},  // one long and one short sequence
      {1, 1, 2, 1, 128, 4096, 0, {0}, false, DType::f16},          // every range empty
  };
  for (const KvCase& c : cases) check_kvcache(c);
}

TEST(CudaAttention, KvcacheSlowPathMatchesTheReference) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const std::vector<KvCase> cases = {
      {2, 2, 4, 2, 64, 112, 16, {100, 0}, true, DType::f32},
      {2, 1, 4, 1, 20, 50, 0, {50, 13}, false, DType::bf16},
  };
  for (const KvCase& c : cases) check_kvcache(c);
}

// A length past the cache or a page outside it: the GPU does not stop to read them, so that sequence's
// outputs (and lse) are NaN; the other sequences' are right.
TEST(CudaAttention, KvcacheBadLengthsAndPagesGiveNaN) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  for (const DType dtype : {DType::f16, DType::f32}) {
    for (const bool split : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (split ? " split" : ""));
      const int64_t B = 3, Sq = 1, H = 4, Hkv = split ? 1 : 4, D = 64, P = 16, max_pages = split ? 64 : 8;
      KvCase c{B, Sq, H, Hkv, D, max_pages * P, P, {40, 5, 7}, false, dtype};
      const KvInputs x = kv_inputs(c);
      // Sequence 1 asks for more keys than its pages hold, sequence 2 reads a page past the cache.
      std::vector<int32_t> lens{40, static_cast<int32_t>(max_pages * P + 1), 7};
      std::vector<int32_t> table(static_cast<size_t>(B * max_pages));
      std::memcpy(table.data(), x.table.data(), table.size() * 4);
      table[static_cast<size_t>(2 * max_pages)] = static_cast<int32_t>(x.kc.size(0));
      const Tensor gq = x.q.to(kGpu), gk = x.kc.to(kGpu), gv = x.vc.to(kGpu);
      const Tensor glens = i32_tensor(lens, {B}).to(kGpu), gtable = i32_tensor(table, {B, max_pages}).to(kGpu);
      const Tensor out = poisoned({B, Sq, H, D}, dtype), lse = poisoned({B, H, Sq}, DType::f32);
      run_with_workspace(FlashAttentionKvcacheArgs{gq, gk, gv, glens, gtable, out, lse, 0.0, false});
      const std::vector<float> o = to_floats(out.to(Device::cpu()).ref()), l = to_floats(lse.to(Device::cpu()).ref());
      const Want want = kv_reference(x, false, dtype);  // the first sequence as given
      const std::vector<float> w = to_floats(want.out.ref());
      const size_t row = static_cast<size_t>(Sq * H * D);
      for (size_t i = 0; i < row; ++i) ASSERT_NEAR(o[i], w[i], 0.02) << "sequence 0, element " << i;
      for (size_t i = row; i < 3 * row; ++i) ASSERT_TRUE(std::isnan(o[i])) << "element " << i << " = " << o[i];
      for (size_t i = static_cast<size_t>(H * Sq); i < l.size(); ++i) ASSERT_TRUE(std::isnan(l[i])) << "lse " << i;
    }
  }
}

// ------------------------------------------------------------------ varlen

TEST(CudaAttention, VarlenMatchesTheReference) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  // Sequences of 100, 0, 63, 1, 200 queries with 120, 10, 0, 1000, 150 keys: an empty one, one without keys
  // (its queries: zeros and -inf), one decode row, and one with more queries than keys.
  const std::vector<int32_t> cq{0, 100, 100, 163, 164, 364}, ck{0, 120, 130, 130, 1130, 1280};
  const int64_t B = 5, tq = cq.back(), tk = ck.back();
  struct VarCase {
    int64_t H, Hkv, D;
    DType dtype;
    bool causal;
  };
  const std::vector<VarCase> cases = {{4, 2, 64, DType::f16, false},  {4, 2, 64, DType::bf16, true},
                                      {8, 1, 128, DType::bf16, true}, {2, 2, 256, DType::f16, true},
                                      {4, 4, 40, DType::f16, true},   {4, 2, 32, DType::f32, true}};
  const auto& reference = core::OpRegistry<FlashAttentionVarlenArgs>::find("cpu-reference");
  for (const VarCase& c : cases) {
    const std::string what = std::string(dtype_name(c.dtype)) + " H" + std::to_string(c.H) + "/" +
                             std::to_string(c.Hkv) + " D" + std::to_string(c.D) + (c.causal ? " causal" : "");
    SCOPED_TRACE(what);
    const Tensor q = random_floats({tq, c.H, c.D}, c.dtype), k = random_floats({tk, c.Hkv, c.D}, c.dtype),
                 v = random_floats({tk, c.Hkv, c.D}, c.dtype);
    const Tensor hcq = i32_tensor(cq, {B + 1}), hck = i32_tensor(ck, {B + 1});
    Want want{Tensor::empty({tq, c.H, c.D}, c.dtype), Tensor::empty({c.H, tq}, DType::f32),
              Tensor::empty({tq, c.H, c.D}, c.dtype), {}};
    want.score_err = score_errors(q, k, 0.0);
    reference.run(FlashAttentionVarlenArgs{q, k, v, hcq, hck, want.out, want.lse, 0.0, c.causal}, nullptr, {});
    const Tensor av = abs_values(v);
    reference.run(FlashAttentionVarlenArgs{q, k, av, hcq, hck, want.mag, {}, 0.0, c.causal}, nullptr, {});
    const Tensor out = poisoned({tq, c.H, c.D}, c.dtype), lse = poisoned({c.H, tq}, DType::f32);
    run_with_workspace(FlashAttentionVarlenArgs{q.to(kGpu), k.to(kGpu), v.to(kGpu), hcq.to(kGpu), hck.to(kGpu), out,
                                                lse, 0.0, c.causal});
    expect_close(want, out, lse, c.dtype, what);
  }
}

// ------------------------------------------------------------- CUDA graph

// A paged decode call (split key ranges) captured once, replayed on new lengths, pages and values: its
// results equal an eager run's on the same inputs, bit for bit, and the reference's within the bound.
TEST(CudaAttention, DecodeCapturesInACudaGraph) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  const DType dtype = DType::bf16;
  const int64_t B = 2, Sq = 1, H = 16, Hkv = 2, D = 128, P = 16, max_pages = 64;
  const KvCase shape{B, Sq, H, Hkv, D, max_pages * P, P, {1000, 17}, true, dtype};
  const KvInputs first = kv_inputs(shape);
  const Tensor gq = first.q.to(kGpu), gk = first.kc.to(kGpu), gv = first.vc.to(kGpu), glens = first.lens.to(kGpu),
               gtable = first.table.to(kGpu);
  const Tensor out = poisoned({B, Sq, H, D}, dtype), lse = poisoned({B, H, Sq}, DType::f32);
  const FlashAttentionKvcacheArgs args{gq, gk, gv, glens, gtable, out, lse, 0.0, true};
  const size_t bytes = workspace_size(args);
  ASSERT_GT(bytes, 0u) << "expected split key ranges at this shape";
  const Tensor ws = Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, kGpu);
  cudaStream_t s = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  run(args, ws.data(), Stream{s});  // warm-up: lazy loading and the shared-memory attribute outside the capture
  LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(s));

  cudaGraph_t graph = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  bool threw = false;
  try {
    run(args, ws.data(), Stream{s});
  } catch (const Error& e) {
    threw = true;
    ADD_FAILURE() << "the op failed under capture: " << e.what();
  }
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  ASSERT_FALSE(threw);
  ASSERT_EQ(end, cudaSuccess) << "capture broken (a synchronizing call in the op?): " << cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  LOWBIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  for (const std::vector<int32_t>& lens : {std::vector<int32_t>{1024, 0}, std::vector<int32_t>{333, 1023}}) {
    KvCase c = shape;
    c.lens = lens;
    const KvInputs x = kv_inputs(c);
    copy(gq.ref(), x.q.ref());
    copy(gk.ref(), x.kc.ref());
    copy(gv.ref(), x.vc.ref());
    copy(glens.ref(), x.lens.ref());
    copy(gtable.ref(), x.table.ref());
    LOWBIT_ASSERT_CUDA(cudaMemset(out.data(), 0xff, out.nbytes()));
    LOWBIT_ASSERT_CUDA(cudaMemset(lse.data(), 0xff, lse.nbytes()));
    LOWBIT_ASSERT_CUDA(cudaDeviceSynchronize());
    LOWBIT_ASSERT_CUDA(cudaGraphLaunch(exec, s));
    LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(s));
    const Tensor replay_out = out.to(Device::cpu()), replay_lse = lse.to(Device::cpu());
    expect_close(kv_reference(x, true, dtype), replay_out, replay_lse, dtype, "graph replay");
    LOWBIT_ASSERT_CUDA(cudaMemset(out.data(), 0xff, out.nbytes()));
    LOWBIT_ASSERT_CUDA(cudaDeviceSynchronize());
    run(args, ws.data(), Stream{s});
    LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(s));
    expect_same_bits(replay_out.ref(), out.ref(), "graph replay against an eager run");
    expect_same_bits(replay_lse.ref(), lse.ref(), "graph replay's lse against an eager run");
  }
  LOWBIT_ASSERT_CUDA(cudaGraphExecDestroy(exec));
  LOWBIT_ASSERT_CUDA(cudaGraphDestroy(graph));
  LOWBIT_ASSERT_CUDA(cudaStreamDestroy(s));
#endif
}

}  // namespace
