// The block-scaled FP8 GEMMs: every implementation against a float64 oracle
// written here, ragged shapes, the grouped layouts' padding and masks, NaN,
// and the argument errors.
#include <cmath>
#include <limits>

#include <cstring>

#include "core/float_convert.h"
#include "cpu/gemm/kernels.h"
#include "harness/harness.h"
#include "lowbit/ops/fp8_gemm.h"

namespace lowbit::test {
namespace {

constexpr int64_t kB = kFp8ScaleBlock;
int64_t blocks(int64_t n) { return (n + kB - 1) / kB; }

// Positive scales near 1/(16 * 448) (random codes are large; the sums stay in
// fp16's range), powers of two when ue8m0.
Tensor random_scales(std::vector<int64_t> shape, bool ue8m0) {
  Tensor t = Tensor::empty(Shape(shape), DType::f32);
  float* p = t.ptr<float>();
  std::uniform_real_distribution<float> exponent(-2.0f, 2.0f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float s = std::exp2(exponent(rng())) / (16.0f * 448.0f);
    p[i] = ue8m0 ? std::exp2(std::ceil(std::log2(s))) : s;
  }
  return t;
}

// out[m, n] in float64 and the sum of the magnitudes of its terms (what an
// fp32 accumulation's error scales with). b and its scales of one expert.
struct Oracle {
  std::vector<double> value, magnitude;
};

Oracle oracle(const uint8_t* ap, const float* asp, const uint8_t* b, const float* b_s, const float* bias,
              int64_t rows, int64_t N, int64_t K) {
  Oracle o;
  o.value.assign(static_cast<size_t>(rows * N), 0.0);
  o.magnitude.assign(static_cast<size_t>(rows * N), 0.0);
  const int64_t kb = blocks(K);
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double v = 0, mag = 0;
      for (int64_t j = 0; j < kb; ++j) {
        double sum = 0, abs_sum = 0;
        for (int64_t k = j * kB; k < std::min(K, (j + 1) * kB); ++k) {
          const double p = static_cast<double>(core::e4m3_to_f32(ap[m * K + k])) * core::e4m3_to_f32(b[n * K + k]);
          sum += p;
          abs_sum += std::fabs(p);
        }
        const double s = static_cast<double>(asp[m * kb + j]) * b_s[(n / kB) * kb + j];
        v += sum * s;
        mag += abs_sum * s;
      }
      if (bias != nullptr) {
        v += bias[n];
        mag += std::fabs(bias[n]);
      }
      o.value[static_cast<size_t>(m * N + n)] = v;
      o.magnitude[static_cast<size_t>(m * N + n)] = mag;
    }
  }
  return o;
}

// got (rows [row0, row0 + rows) of an [*, N] output) within fp32 accumulation
// plus the output dtype's rounding of the oracle.
// On CUDA the tolerance is the tensor cores' (kFp8TensorCoreError, docs/fp8_gemm.md).
void expect_near(const Oracle& want, const std::vector<float>& got, int64_t row0, int64_t rows, int64_t N,
                 DType out_dtype, const std::string& what) {
  const double eps = out_dtype == DType::bf16 ? 1.0 / 256 : out_dtype == DType::f16 ? 1.0 / 2048 : 1e-6;
  // fp16's subnormal spacing (fp32 and bf16 share fp32's range).
  const double tiny = out_dtype == DType::f16 ? std::exp2(-24) : 1e-30;
  const double rel = what.find("[cuda") != std::string::npos ? kFp8TensorCoreError : 1e-5;
  int bad = 0;
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t n = 0; n < N && bad < 5; ++n) {
      const size_t w = static_cast<size_t>(m * N + n);
      const double g = got[static_cast<size_t>((row0 + m) * N + n)];
      const double tol = rel * want.magnitude[w] + eps * std::fabs(want.value[w]) + tiny;
      if (!(std::fabs(g - want.value[w]) <= tol)) {
        ADD_FAILURE() << what << ": out[" << row0 + m << ", " << n << "] = " << g << ", want " << want.value[w]
                      << " (tolerance " << tol << ")";
        ++bad;
      }
    }
  }
}

TEST(Fp8Gemm, CpuDecodeGivesEveryCodeTheCoreConversionsBits) {
  // The fast path's vectorized E4M3 decode (shared with Matmul's fp8 weights).
  uint8_t codes[256 + 16];
  for (int i = 0; i < 256 + 16; ++i) codes[i] = static_cast<uint8_t>(i);
  float got[256 + 16];
  core::cpu::gemm::decode_bytes(codes, core::WeightKind::fp8, 0, 256 + 16, nullptr, got);
  for (int i = 0; i < 256 + 16; ++i) {
    const float want = core::e4m3_to_f32(codes[i]);
    uint32_t w = 0, g = 0;
    std::memcpy(&w, &want, 4);
    std::memcpy(&g, &got[i], 4);
    EXPECT_EQ(g, w) << "code 0x" << std::hex << i % 256;
  }
}

TEST(Fp8Gemm, EveryBackendMatchesFloat64) {
  SCOPED_TRACE("impls: " + impl_names<Fp8GemmArgs>());
  struct Shape {
    std::vector<int64_t> lead;
    int64_t N, K;
  };
  const Shape shapes[] = {{{1}, 1, 16},   {{7}, 130, 272},    {{3, 5}, 256, 128},
                          {{0}, 64, 128}, {{129}, 300, 512}, {{65}, 129, 144}};
  int i = 0;
  for (const Shape& s : shapes) {
    for (DType out_dtype : {DType::f32, DType::f16, DType::bf16}) {
      const bool bias = i % 2 == 1, ue8m0 = i % 3 == 2;
      ++i;
      int64_t rows = 1;
      for (int64_t d : s.lead) rows *= d;
      std::vector<int64_t> a_shape = s.lead, as_shape = s.lead, out_shape = s.lead;
      a_shape.push_back(s.K);
      as_shape.push_back(blocks(s.K));
      out_shape.push_back(s.N);
      OpCase<Fp8GemmArgs> c;
      c.name = "fp8_gemm " + std::to_string(rows) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K) + " " +
               std::string(dtype_name(out_dtype)) + (bias ? " bias" : "") + (ue8m0 ? " ue8m0" : "");
      c.inputs = {random_e4m3(a_shape), random_scales(as_shape, ue8m0), random_e4m3({s.N, s.K}),
                  random_scales({blocks(s.N), blocks(s.K)}, ue8m0), random_floats({s.N}, DType::f32)};
      c.outputs = {{out_shape, out_dtype}};
      c.make = [bias](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
        return Fp8GemmArgs{in[0], in[1], in[2], in[3], bias ? in[4] : TensorRef{}, out[0], {}};
      };
      const Oracle want = oracle(static_cast<const uint8_t*>(c.inputs[0].data()), c.inputs[1].ptr<float>(),
                                 static_cast<const uint8_t*>(c.inputs[2].data()), c.inputs[3].ptr<float>(),
                                 bias ? c.inputs[4].ptr<float>() : nullptr, rows, s.N, s.K);
      for (const auto& [name, outs] : run_every_impl(c)) {
        expect_near(want, to_floats(outs[0]), 0, rows, s.N, out_dtype, c.name + " [" + name + "]");
      }
    }
  }
}

TEST(Fp8Gemm, NanInARowReachesOnlyThatRow) {
  const int64_t M = 3, N = 5, K = 128;
  Tensor a = random_e4m3({M, K});
  static_cast<uint8_t*>(a.data())[1 * K + 7] = 0x7f;  // NaN in row 1
  const Tensor a_s = random_scales({M, 1}, false), b = random_e4m3({N, K}), b_s = random_scales({1, 1}, false);
  OpCase<Fp8GemmArgs> c;
  c.name = "fp8_gemm NaN";
  c.inputs = {a, a_s, b, b_s};
  c.outputs = {{{M, N}, DType::f32}};
  c.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
    return Fp8GemmArgs{in[0], in[1], in[2], in[3], {}, out[0], {}};
  };
  for (const auto& [name, outs] : run_every_impl(c)) {
    const std::vector<float> got = to_floats(outs[0]);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        EXPECT_EQ(std::isnan(got[static_cast<size_t>(m * N + n)]), m == 1) << name << " out[" << m << ", " << n << "]";
      }
    }
  }
}

TEST(Fp8GroupedGemm, ContiguousRunsAndPaddingRows) {
  SCOPED_TRACE("impls: " + impl_names<Fp8GroupedGemmContiguousArgs>());
  const int64_t E = 3, N = 136, K = 400 - 400 % 16;
  const std::vector<int32_t> ids = {0, 0, 0, -1, 2, 2, 1, 1, 1, 1, -1, -1, 2, 0};
  const int64_t M = static_cast<int64_t>(ids.size());
  Tensor m_indices = Tensor::empty({M}, DType::i32);
  std::copy(ids.begin(), ids.end(), m_indices.ptr<int32_t>());
  for (DType out_dtype : {DType::f32, DType::bf16}) {
    OpCase<Fp8GroupedGemmContiguousArgs> c;
    c.name = "fp8_grouped_gemm_contiguous " + std::string(dtype_name(out_dtype));
    c.inputs = {random_e4m3({M, K}), random_scales({M, blocks(K)}, false), random_e4m3({E, N, K}),
                random_scales({E, blocks(N), blocks(K)}, false), m_indices};
    c.outputs = {{{M, N}, out_dtype}};
    c.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
      return Fp8GroupedGemmContiguousArgs{in[0], in[1], in[2], in[3], in[4], out[0], {}};
    };
    const auto* b = static_cast<const uint8_t*>(c.inputs[2].data());
    const float* b_s = c.inputs[3].ptr<float>();
    for (const auto& [name, outs] : run_every_impl(c)) {
      const std::vector<float> got = to_floats(outs[0]);
      for (int64_t m = 0; m < M; ++m) {
        const int32_t e = ids[static_cast<size_t>(m)];
        if (e < 0) {
          for (int64_t n = 0; n < N; ++n) EXPECT_EQ(got[static_cast<size_t>(m * N + n)], 0.0f) << name << " row " << m;
          continue;
        }
        const Oracle want = oracle(static_cast<const uint8_t*>(c.inputs[0].data()) + m * K,
                                   c.inputs[1].ptr<float>() + m * blocks(K), b + e * N * K,
                                   b_s + e * blocks(N) * blocks(K), nullptr, 1, N, K);
        expect_near(want, got, m, 1, N, out_dtype, c.name + " [" + name + "] row " + std::to_string(m));
      }
    }
  }
}

TEST(Fp8GroupedGemm, MaskedCountsAndEmptyExperts) {
  SCOPED_TRACE("impls: " + impl_names<Fp8GroupedGemmMaskedArgs>());
  const int64_t E = 4, max_m = 5, N = 70, K = 160;
  const std::vector<int32_t> counts = {0, 5, 2, 1};
  Tensor masked_m = Tensor::empty({E}, DType::i32);
  std::copy(counts.begin(), counts.end(), masked_m.ptr<int32_t>());
  OpCase<Fp8GroupedGemmMaskedArgs> c;
  c.name = "fp8_grouped_gemm_masked";
  c.inputs = {random_e4m3({E, max_m, K}), random_scales({E, max_m, blocks(K)}, true), random_e4m3({E, N, K}),
              random_scales({E, blocks(N), blocks(K)}, true), masked_m};
  c.outputs = {{{E, max_m, N}, DType::f16}};
  c.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
    return Fp8GroupedGemmMaskedArgs{in[0], in[1], in[2], in[3], in[4], out[0], {}};
  };
  const auto* b = static_cast<const uint8_t*>(c.inputs[2].data());
  const float* b_s = c.inputs[3].ptr<float>();
  for (const auto& [name, outs] : run_every_impl(c)) {
    const std::vector<float> got = to_floats(outs[0]);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t valid = counts[static_cast<size_t>(e)];
      const Oracle want = oracle(static_cast<const uint8_t*>(c.inputs[0].data()) + e * max_m * K,
                                 c.inputs[1].ptr<float>() + e * max_m * blocks(K), b + e * N * K,
                                 b_s + e * blocks(N) * blocks(K), nullptr, valid, N, K);
      const std::vector<float> expert(got.begin() + e * max_m * N, got.begin() + (e + 1) * max_m * N);
      expect_near(want, expert, 0, valid, N, DType::f16, c.name + " [" + name + "] expert " + std::to_string(e));
      for (int64_t i = valid * N; i < max_m * N; ++i) {
        EXPECT_EQ(expert[static_cast<size_t>(i)], 0.0f) << name << " expert " << e << " row " << i / N;
      }
    }
  }
}

TEST(Fp8Gemm, AllocatingCallsKeepLeadingDims) {
  const Tensor a = random_e4m3({2, 3, 256}), a_s = random_scales({2, 3, 2}, false);
  const Tensor b = random_e4m3({40, 256}), b_s = random_scales({1, 2}, false);
  const Tensor out = fp8_gemm(a, a_s, b, b_s, DType::f32);
  EXPECT_EQ(std::vector<int64_t>(out.sizes().begin(), out.sizes().end()), (std::vector<int64_t>{2, 3, 40}));
  EXPECT_EQ(out.dtype(), DType::f32);
  const Tensor bias = random_floats({40}, DType::f32);
  const Tensor with_bias = fp8_gemm(a, a_s, b, b_s, DType::f32, bias);
  const std::vector<float> x = to_floats(out), y = to_floats(with_bias);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i] - x[i], bias.ptr<float>()[i % 40], 1e-4f * (1 + std::fabs(x[i])));
  EXPECT_EQ(fp8_gemm(a, a_s, b, b_s).dtype(), DType::bf16);
}

TEST(Fp8Gemm, BadArgumentsSayWhatIsWrong) {
  const Tensor a = random_e4m3({4, 256}), a_s = random_scales({4, 2}, false);
  const Tensor b = random_e4m3({40, 256}), b_s = random_scales({1, 2}, false);
  expect_error([&] { fp8_gemm(random_floats({4, 256}, DType::f16), a_s, b, b_s); }, ErrorCode::unsupported_dtype,
               {"fp8_gemm", "a", "float8_e4m3fn", "float16"});
  expect_error([&] { fp8_gemm(random_e4m3({4, 100}), a_s, b, b_s); }, ErrorCode::invalid_argument,
               {"fp8_gemm", "K", "multiple of 16", "100"});
  expect_error([&] { fp8_gemm(a, random_scales({4, 3}, false), b, b_s); }, ErrorCode::invalid_argument,
               {"fp8_gemm", "a_s", "[4, 2]", "[4, 3]"});
  expect_error([&] { fp8_gemm(a, a_s, random_e4m3({40, 128}), b_s); }, ErrorCode::invalid_argument,
               {"fp8_gemm", "b's last dimension", "128", "256"});
  expect_error([&] { fp8_gemm(a, a_s, b, random_scales({2, 2}, false)); }, ErrorCode::invalid_argument,
               {"fp8_gemm", "b_s", "[1, 2]", "[2, 2]"});
  expect_error([&] { fp8_gemm(a, a_s, b, b_s, DType::bf16, random_floats({41}, DType::f32)); },
               ErrorCode::invalid_argument, {"fp8_gemm", "bias", "[40]", "[41]"});
  expect_error([&] { fp8_gemm(a, a_s, b, b_s, DType::i32); }, ErrorCode::unsupported_dtype,
               {"fp8_gemm", "out", "int32"});
  Tensor out = Tensor::empty({4, 40}, DType::f32);
  Fp8GemmArgs forced{a, a_s, b, b_s, {}, out, parse_kernel_config("wgmma_m128_n128_k128")};
  expect_error([&] { run(forced); }, ErrorCode::invalid_argument, {"fp8_gemm", "wgmma_m128_n128_k128", "cpu"});

  const Tensor ge_b = random_e4m3({2, 40, 256}), ge_bs = random_scales({2, 1, 2}, false);
  Tensor ids = Tensor::empty({4}, DType::i32);
  for (int i = 0; i < 4; ++i) ids.ptr<int32_t>()[i] = i == 2 ? 2 : 0;
  expect_error([&] { fp8_grouped_gemm_contiguous(a, a_s, ge_b, ge_bs, ids); }, ErrorCode::invalid_argument,
               {"fp8_grouped_gemm_contiguous", "m_indices[2]", "2", "[0, 2)"});
  expect_error([&] { fp8_grouped_gemm_contiguous(a, a_s, ge_b, ge_bs, Tensor::empty({3}, DType::i32)); },
               ErrorCode::invalid_argument, {"fp8_grouped_gemm_contiguous", "m_indices", "[4]", "[3]"});
  expect_error([&] { fp8_grouped_gemm_contiguous(a, a_s, random_e4m3({2, 40, 128}), ge_bs, ids); },
               ErrorCode::invalid_argument, {"fp8_grouped_gemm_contiguous", "b's last dimension", "128", "256"});

  const Tensor ma = random_e4m3({2, 3, 256}), ma_s = random_scales({2, 3, 2}, false);
  Tensor counts = Tensor::empty({2}, DType::i32);
  counts.ptr<int32_t>()[0] = 1;
  counts.ptr<int32_t>()[1] = 4;
  expect_error([&] { fp8_grouped_gemm_masked(ma, ma_s, ge_b, ge_bs, counts); }, ErrorCode::invalid_argument,
               {"fp8_grouped_gemm_masked", "masked_m[1]", "4", "[0, 3]"});
  expect_error([&] { fp8_grouped_gemm_masked(ma, ma_s, random_e4m3({3, 40, 256}), ge_bs, counts); },
               ErrorCode::invalid_argument, {"fp8_grouped_gemm_masked", "one matrix per expert", "2", "3"});
}

}  // namespace
}  // namespace lowbit::test
