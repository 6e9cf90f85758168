// Importers: a GPTQ / AWQ / bitsandbytes checkpoint's tensors are built here
// by packers written in the test (from each format's own description), then
// imported; the packed weight must dequantize to exactly the checkpoint's
// values, and the matmul must match the float64 oracle on them.
#include <algorithm>
#include <numeric>

#include "core/float_convert.h"
#include "core/tables.h"
#include "gemm/gemm_cases.h"

namespace lowbit::test {
namespace {

int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng()); }

Tensor f16_scales(int64_t rows, int64_t cols) {
  Tensor s = Tensor::empty({rows, cols}, DType::f16);
  std::uniform_real_distribution<float> u(0.002f, 0.05f);
  for (int64_t i = 0; i < s.numel(); ++i) s.ptr<uint16_t>()[i] = core::f32_to_f16(i % 4 == 3 ? -u(rng()) : u(rng()));
  return s;
}
float scale_at(const Tensor& s, int64_t r, int64_t c) { return core::f16_to_f32(s.ptr<uint16_t>()[r * s.size(1) + c]); }

// Imports must reproduce the checkpoint's dequantized weight bit for bit,
// and the matmul must agree with the oracle on it.
void expect_imported(const QuantizedWeight& w, const std::vector<float>& want, const std::string& what) {
  const PackedWeight p = Matmul(w.config).transform_weight(w);
  const Tensor d = dequantize_weight(p);
  ASSERT_EQ(d.numel(), static_cast<int64_t>(want.size())) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += d.ptr<float>()[i] != want[i];  // exact
  EXPECT_EQ(bad, 0) << what << ": dequantized weights differ from the checkpoint's";
  for (int64_t M : {1, 5}) {
    const Tensor A = random_floats({M, w.config.K}, w.config.A_dtype, 0.5f);
    run_on_all_backends_close(matmul_case(what + " M=" + std::to_string(M), w, A, want));
  }
}

// GPTQ: q [K][N] and zeros z [G][N] packed into int32 as AutoGPTQ does.
struct Gptq {
  GptqTensors t;
  Tensor qweight, qzeros, scales, g_idx;
  std::vector<float> dequantized;  // [N, K], the checkpoint's w = s * (q - z)
};

Gptq make_gptq(int bits, int64_t N, int64_t K, int64_t gs, bool v1, bool act_order, bool zero_overflow) {
  const int pack = 32 / bits, maxq = (1 << bits) - 1;
  const int64_t G = gs > 0 ? (K + gs - 1) / gs : 1;
  std::vector<int64_t> group(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) group[static_cast<size_t>(k)] = gs > 0 ? k / gs : 0;
  if (act_order) {
    // GPTQ's desc_act: columns quantized in a permuted order; column perm[j] gets group j / gs.
    std::vector<int64_t> perm(static_cast<size_t>(K));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng());
    for (int64_t j = 0; j < K; ++j) group[static_cast<size_t>(perm[static_cast<size_t>(j)])] = j / gs;
  }
  Gptq g;
  g.qweight = Tensor::empty({K / pack, N}, DType::i32);
  g.qzeros = Tensor::empty({G, (N + pack - 1) / pack}, DType::i32);
  std::fill_n(g.qweight.ptr<int32_t>(), g.qweight.numel(), 0);
  std::fill_n(g.qzeros.ptr<int32_t>(), g.qzeros.numel(), 0);
  g.scales = f16_scales(G, N);
  std::vector<int> z(static_cast<size_t>(G * N));
  for (int64_t i = 0; i < G * N; ++i) {
    z[static_cast<size_t>(i)] = uniform(v1 ? 1 : 0, maxq);
    if (zero_overflow && i == 1) z[1] = maxq + 1;  // stored as all ones in v1
    const uint32_t stored =
        static_cast<uint32_t>(z[static_cast<size_t>(i)] - (v1 ? 1 : 0)) & static_cast<uint32_t>(maxq);
    const int64_t gi = i / N, n = i % N;
    auto* word = reinterpret_cast<uint32_t*>(g.qzeros.ptr<int32_t>() + gi * g.qzeros.size(1) + n / pack);
    *word |= stored << ((n % pack) * bits);
  }
  g.dequantized.resize(static_cast<size_t>(N * K));
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) {
      const int q = uniform(0, maxq);
      auto* word = reinterpret_cast<uint32_t*>(g.qweight.ptr<int32_t>() + (k / pack) * N + n);
      *word |= static_cast<uint32_t>(q) << ((k % pack) * bits);
      const int64_t gi = group[static_cast<size_t>(k)];
      g.dequantized[static_cast<size_t>(n * K + k)] =
          static_cast<float>(q - z[static_cast<size_t>(gi * N + n)]) * scale_at(g.scales, gi, n);
    }
  }
  if (act_order || gs > 0) {
    g.g_idx = Tensor::empty({K}, DType::i32);
    for (int64_t k = 0; k < K; ++k) g.g_idx.ptr<int32_t>()[k] = static_cast<int32_t>(group[static_cast<size_t>(k)]);
  }
  g.t = GptqTensors{g.qweight, g.qzeros, g.scales, g.g_idx.ref(), {}};
  return g;
}

TEST(GemmImport, Gptq) {
  int i = 0;
  for (int bits : {2, 4, 8}) {
    for (int64_t gs : {int64_t{-1}, int64_t{32}, int64_t{128}}) {
      for (bool v1 : {true, false}) {
        for (bool act : {false, true}) {
          if (act && gs < 0) continue;
          const int64_t N = 8 + 8 * (i % 3), K = gs > 0 ? gs * (1 + i % 3) : 96;
          Gptq g = make_gptq(bits, N, K, gs, v1, act, false);
          const Tensor bias = random_floats({N}, DType::f16);
          if (i % 2) g.t.bias = bias;
          const QuantizedWeight w = import_gptq(g.t, GptqOptions{bits, gs, v1, ZerosMode::quantized});
          EXPECT_EQ(w.config.W_dtype, bits == 2   ? WeightType::uint2
                                      : bits == 4 ? WeightType::uint4
                                                  : WeightType::uint8);
          EXPECT_EQ(w.perm.defined(), act && K > gs);  // one group: any order is contiguous
          const std::string what = "gptq bits=" + std::to_string(bits) + " g=" + std::to_string(gs) +
                                   (v1 ? " v1" : " v2") + (act ? " act-order" : "");
          expect_imported(w, g.dequantized, what);
          ++i;
        }
      }
    }
  }
}

// A group size of at least K is one group (small layers in GPTQ checkpoints).
TEST(GemmImport, GptqGroupLongerThanK) {
  const Gptq g = make_gptq(4, 16, 64, 128, true, false, false);
  const QuantizedWeight w = import_gptq(g.t, GptqOptions{4, 128});
  EXPECT_EQ(w.config.group_size, -1);
  expect_imported(w, g.dequantized, "gptq g=128 K=64");
}

TEST(GemmImport, GptqV1ZeroOverflowNeedsOriginalZeros) {
  Gptq g = make_gptq(4, 16, 64, 32, true, false, true);
  expect_error(
      [&] {
        import_gptq(g.t, GptqOptions{4, 32, true, ZerosMode::quantized});
      },
      ErrorCode::invalid_argument,
      {"import_gptq: zero point 16 at [0, 1] does not fit uint4", "import with zeros_mode = original"});
  const QuantizedWeight w = import_gptq(g.t, GptqOptions{4, 32, true, ZerosMode::original});
  EXPECT_EQ(w.zeros.dtype(), DType::f16);  // exact integers in the scales' dtype
  expect_imported(w, g.dequantized, "gptq v1 zero 16 as original zeros");
}

TEST(GemmImport, GptqErrors) {
  Gptq g = make_gptq(4, 8, 64, 32, true, false, false);
  expect_error(
      [&] {
        import_gptq(g.t, GptqOptions{3, 32});
      },
      ErrorCode::invalid_argument, {"import_gptq: bits must be 2, 4 or 8 (got 3", "not supported"});
  expect_error(
      [&] {
        import_gptq(g.t, GptqOptions{4, 64});
      },
      ErrorCode::invalid_argument, {"import_gptq: scales must have shape [1, 8] (got [2, 8])"});
  Tensor gi = Tensor::copy_of(g.g_idx, Device::cpu());
  gi.ptr<int32_t>()[0] = 1;  // group 1 now has 33 columns
  GptqTensors t = g.t;
  t.g_idx = gi;
  expect_error(
      [&] {
        import_gptq(t, GptqOptions{4, 32});
      },
      ErrorCode::invalid_argument, {"import_gptq: every group of g_idx must hold 32 columns"});
  gi.ptr<int32_t>()[0] = 2;
  expect_error(
      [&] {
        import_gptq(t, GptqOptions{4, 32});
      },
      ErrorCode::invalid_argument, {"import_gptq: g_idx values must be in [0, 2)", "got 2 at [0]"});
}

TEST(GemmImport, Awq) {
  // AutoAWQ: 8 columns per int32, nibble i holding column 8j + order[i].
  const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  int i = 0;
  for (int64_t gs : {32, 64, 128}) {
    const int64_t N = 8 * (2 + i), K = gs * (1 + i % 2), G = K / gs;
    Tensor qweight = Tensor::empty({K, N / 8}, DType::i32), qzeros = Tensor::empty({G, N / 8}, DType::i32);
    std::vector<int> q(static_cast<size_t>(K * N)), z(static_cast<size_t>(G * N));
    for (int& v : q) v = uniform(0, 15);
    for (int& v : z) v = uniform(0, 15);
    auto pack = [&](const std::vector<int>& values, Tensor& out, int64_t rows) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < N / 8; ++j) {
          uint32_t word = 0;
          for (int nib = 0; nib < 8; ++nib) {
            word |= static_cast<uint32_t>(values[static_cast<size_t>(r * N + 8 * j + order[nib])]) << (4 * nib);
          }
          out.ptr<int32_t>()[r * (N / 8) + j] = static_cast<int32_t>(word);
        }
      }
    };
    pack(q, qweight, K);
    pack(z, qzeros, G);
    const Tensor scales = f16_scales(G, N);
    std::vector<float> want(static_cast<size_t>(N * K));
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < K; ++k) {
        const int64_t g = k / gs;
        want[static_cast<size_t>(n * K + k)] =
            static_cast<float>(q[static_cast<size_t>(k * N + n)] - z[static_cast<size_t>(g * N + n)]) *
            scale_at(scales, g, n);
      }
    }
    const QuantizedWeight w = import_awq(AwqTensors{qweight, qzeros, scales, {}}, gs);
    EXPECT_EQ(w.config.W_dtype, WeightType::uint4);
    expect_imported(w, want, "awq g=" + std::to_string(gs));
    ++i;
  }
}

// bitsandbytes: codes of the flattened [N, K] weight two a byte (even
// element high), absmax per block; w = table[code] * absmax.
TEST(GemmImport, BitsandbytesPackedByHand) {
  for (const char* type : {"nf4", "fp4"}) {
    for (int64_t bs : {32, 64}) {
      const int64_t N = 5, K = 4 * bs, nb = N * K / bs;
      const float* table = std::string(type) == "nf4" ? core::kNf4Table : core::kFp4Table;
      Tensor packed = Tensor::empty({N * K / 2, 1}, DType::u8);
      QuantState st;
      st.absmax = random_floats({nb}, DType::f32);
      st.code = host_tensor(std::vector<float>(table, table + 16));
      st.blocksize = bs;
      st.shape = {N, K};
      st.dtype = DType::bf16;
      st.quant_type = type;
      std::vector<float> want(static_cast<size_t>(N * K));
      for (int64_t e = 0; e < N * K; e += 2) {
        const int hi = uniform(0, 15), lo = uniform(0, 15);
        packed.ptr<uint8_t>()[e / 2] = static_cast<uint8_t>(hi << 4 | lo);
        want[static_cast<size_t>(e)] = table[hi] * st.absmax.ptr<float>()[e / bs];
        want[static_cast<size_t>(e + 1)] = table[lo] * st.absmax.ptr<float>()[(e + 1) / bs];
      }
      const QuantizedWeight w = import_bnb_4bit(packed, st);
      EXPECT_EQ(w.config.A_dtype, DType::bf16);
      expect_imported(w, want, std::string("bnb ") + type + " bs=" + std::to_string(bs));
    }
  }
}

// Double-quantized absmax from quantize_4bit: the import equals dequantize_4bit.
TEST(GemmImport, BitsandbytesDoubleQuant) {
  for (Quant4Type type : {Quant4Type::nf4, Quant4Type::fp4}) {
    const int64_t N = 24, K = 192;
    auto [packed, st] = quantize_4bit(random_floats({N, K}, DType::f16), 64, type, true);
    ASSERT_TRUE(st.nested());
    const Tensor d = dequantize_4bit(packed, st, DType::f32);
    const std::vector<float> want(d.ptr<float>(), d.ptr<float>() + N * K);
    const Tensor bias = random_floats({N}, DType::f16);
    expect_imported(import_bnb_4bit(packed, st, bias), want,
                    std::string("bnb nested ") + (type == Quant4Type::nf4 ? "nf4" : "fp4"));
  }
  auto [packed, st] = quantize_4bit(random_floats({3, 100}, DType::f16), 64);
  expect_error([&] { import_bnb_4bit(packed, st); }, ErrorCode::invalid_argument,
               {"import_bnb_4bit: the blocksize 64 must divide K (got K = 100)", "matmul_4bit"});
}

}  // namespace
}  // namespace lowbit::test
