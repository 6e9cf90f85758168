// Every W dtype × group size × zeros mode × M against a float64 oracle on
// the dequantized weights, with ragged N and K, on every registered
// implementation and each of its kernel configs.
#include "core/weight_format.h"
#include "gemm/gemm_cases.h"

namespace lowbit {
// gtest prints parameters through this (ADL).
inline void PrintTo(WeightType t, std::ostream* os) { *os << weight_type_name(t); }
namespace test {
namespace {

const int64_t kMs[] = {1, 2, 3, 7, 8, 16, 33, 128};
const int64_t kNs[] = {1, 3, 17, 31, 45, 67};
const int64_t kRaggedKs[] = {1, 5, 33, 100, 255, 130};  // group -1: any K
const DType kActivations[] = {DType::f16, DType::bf16};
const DType kOutputs[] = {DType::f16, DType::bf16, DType::f32};
const DType kScales[] = {DType::f16, DType::bf16, DType::f32};

struct Variant {
  bool scaling;
  int64_t group;
  bool zeros;
  ZerosMode mode;
};

// Scaling variants: none, per row, and groups of 32, 64, 128; each with
// every zeros mode the type allows.
std::vector<Variant> variants(WeightType t) {
  std::vector<Variant> v = {{false, -1, false, ZerosMode::original}};
  for (int64_t g : {-1, 32, 64, 128}) {
    v.push_back({true, g, false, ZerosMode::original});
    if (!core::weight_is_integer(t)) continue;
    for (ZerosMode m : {ZerosMode::original, ZerosMode::rescale, ZerosMode::quantized}) v.push_back({true, g, true, m});
  }
  return v;
}

// Runs all variants × M for one type. Sizes rotate through the ragged lists;
// large M gets the smaller shapes so the suite stays fast.
void sweep(WeightType t) {
  int i = 0;
  for (const Variant& var : variants(t)) {
    for (int64_t M : kMs) {
      MatmulConfig c;
      c.W_dtype = t;
      c.with_scaling = var.scaling;
      c.group_size = var.group;
      c.with_zeros = var.zeros;
      c.zeros_mode = var.mode;
      c.N = kNs[(i + M) % 6];
      if (M >= 33) c.N = std::min<int64_t>(c.N, 31);
      c.K = var.group > 0 ? var.group * (1 + i % 3) : kRaggedKs[i % 6];
      c.A_dtype = kActivations[i % 2];
      c.out_dtype = kOutputs[i % 3];
      c.with_bias = i % 2 == 1;
      const bool perm = i % 5 == 2 && c.K > 1;
      const QuantizedWeight w = random_weight(c, kScales[(i / 2) % 3], perm);
      const Tensor A = random_floats({M, c.K}, c.A_dtype, 0.5f);
      const std::string name =
          describe(c) + " M=" + std::to_string(M) + (perm ? " perm" : "") + " case " + std::to_string(i);
      run_on_all_backends_close(matmul_case(name, w, A));
      ++i;
      if (::testing::Test::HasFailure()) return;  // one broken format fails once, not 200 times
    }
  }
}

// One case of the CPU few-rows kernels: type t, group code g (0: no scale,
// -1: a scale per row, -2: zeros with a scale per row, 1000 + n: zeros with
// groups of n, else groups of g), M rows of A (bf16 unless a_dtype says), K columns; the i-th case
// picks N, the scales' dtype, the output dtype, the bias and a permutation.
void few_rows_case(WeightType t, int64_t g, int64_t M, int64_t K, int i, DType a_dtype = DType::bf16) {
  const bool zeros = g == -2 || g > 1000;
  MatmulConfig c;
  c.W_dtype = t;
  c.with_scaling = g != 0;
  c.group_size = g == 0 || g == -2 ? -1 : g > 1000 ? g - 1000 : g;
  c.with_zeros = zeros;
  c.zeros_mode = ZerosMode::quantized;
  c.N = 17 + i % 4;
  c.K = K;
  c.A_dtype = a_dtype;
  c.out_dtype = i % 2 ? DType::f32 : DType::bf16;  // (fp16 out would overflow: 8-bit codes times scales)
  c.with_bias = i % 3 == 1;
  const bool perm = i % 4 == 2;
  const QuantizedWeight w = random_weight(c, kScales[i % 3], perm);
  const std::string name = describe(c) + " M=" + std::to_string(M) + (perm ? " perm" : "");
  run_on_all_backends_close(matmul_case(name, w, random_floats({M, c.K}, a_dtype, 0.5f)));
}

// The CPU few-rows kernel for bf16 A on 4-bit codes (K whole 128-element
// chunks): each 4-bit type, no scale, a scale per row and groups of 32, 64,
// 128, 256, quantized zeros (integer types; a row or groups of whole
// chunks), act-order permutations, M in one or several groups of 4, bf16
// and fp32 out.
TEST(MatmulBf16FewRows, Every4bitTypeAndGroup) {
  SCOPED_TRACE("impls: " + impl_names<MatmulArgs>());
  int i = 0;
  for (WeightType t : {WeightType::int4, WeightType::uint4, WeightType::nf4, WeightType::fp4, WeightType::fp4_e2m1}) {
    for (const int64_t g : {0, -1, 32, 64, 128, 256, -2, 1128, 1256}) {  // -2, 1128, 1256: zeros, groups -1, 128, 256
      const bool zeros = g == -2 || g > 1000;
      if (zeros && !core::weight_is_integer(t)) continue;
      const int64_t gl = g == 0 || g == -2 ? -1 : g > 1000 ? g - 1000 : g;
      for (const int64_t M : {1, 3, 4, 7, 16, 29, 64}) {
        // 192: whole 64-element steps (AVX2), not whole 128-element chunks (AVX-512: the tile path).
        const int64_t K = (i % 5 == 4 && gl <= 64 && !zeros ? 192 : 128 * (1 + i % 3)) * (gl == 256 ? 2 : 1);
        few_rows_case(t, g, M, K, i++);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// The CPU few-rows kernels for bf16 A on 8-, 2- and 1-bit codes (the
// Highway kernels; K whole steps of every target): no scale, a scale per
// row, groups of whole 16-byte spans of codes or whole steps (and 32 for 2
// and 1 bits, which are not: the tiles), quantized zeros (integer types),
// permutations, M in one or several groups of 4.
TEST(MatmulBf16FewRows, Every8_2And1bitTypeAndGroup) {
  SCOPED_TRACE("impls: " + impl_names<MatmulArgs>());
  int i = 0;
  for (WeightType t : {WeightType::int8, WeightType::uint8, WeightType::fp8_e4m3, WeightType::int2, WeightType::uint2,
                       WeightType::int1, WeightType::uint1}) {
    for (const int64_t g : {0, -1, 32, 64, 128, 256, -2, 1128, 1512}) {  // -2, 1128, 1512: zeros, groups -1, 128, 512
      if ((g == -2 || g > 1000) && !core::weight_is_integer(t)) continue;
      for (const int64_t M : {1, 3, 4, 7, 16}) {
        few_rows_case(t, g, M, 512 * (1 + i % 2), i);
        ++i;
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// The CPU few-rows kernels on fp16 A (the Highway kernels, fp32 products:
// held to fp16 A's bound, no bf16 term): weights whose values the
// tables hold exactly (integers, fp4, 8-bit codes) and nf4 (not exact in
// bf16: the tiles), groups, quantized zeros, permutations, M up to 16.
TEST(MatmulFewRows, Fp16A) {
  SCOPED_TRACE("impls: " + impl_names<MatmulArgs>());
  int i = 0;
  for (WeightType t : {WeightType::int4, WeightType::uint4, WeightType::fp4, WeightType::nf4, WeightType::int8,
                       WeightType::uint8, WeightType::fp8_e4m3, WeightType::int2, WeightType::uint1}) {
    for (const int64_t g : {0, -1, 64, 128, -2, 1128}) {  // -2, 1128: zeros, groups -1, 128
      if ((g == -2 || g > 1000) && !core::weight_is_integer(t)) continue;
      for (const int64_t M : {1, 4, 7, 16}) {
        few_rows_case(t, g, M, 512 * (1 + i % 2), i, DType::f16);
        ++i;
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

class MatmulSweep : public ::testing::TestWithParam<WeightType> {};

TEST_P(MatmulSweep, EveryGroupZerosModeAndM) {
  SCOPED_TRACE("impls: " + impl_names<MatmulArgs>());
  sweep(GetParam());
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MatmulSweep,
                         ::testing::Values(WeightType::int8, WeightType::int4, WeightType::int2, WeightType::int1,
                                           WeightType::uint8, WeightType::uint4, WeightType::uint2, WeightType::uint1,
                                           WeightType::nf4, WeightType::fp4, WeightType::fp4_e2m1, WeightType::fp8_e4m3,
                                           WeightType::f16, WeightType::bf16),
                         [](const ::testing::TestParamInfo<WeightType>& info) {
                           return std::string(weight_type_name(info.param));
                         });

// M = 1000 and batched A [2, 3, K]: the common formats at a size where the
// oracle stays cheap.
TEST(MatmulLargeM, CommonFormats) {
  struct Format {
    WeightType type;
    int64_t group;
    bool zeros;
  };
  for (const Format f : {Format{WeightType::uint4, 128, true}, Format{WeightType::nf4, 64, false},
                         Format{WeightType::fp8_e4m3, -1, false}, Format{WeightType::int2, 32, false}}) {
    MatmulConfig c;
    c.W_dtype = f.type;
    c.N = 37;
    c.K = 256;
    c.with_scaling = true;
    c.group_size = f.group;
    c.with_zeros = f.zeros;
    c.zeros_mode = ZerosMode::quantized;
    const QuantizedWeight w = random_weight(c, DType::f16, false);
    run_on_all_backends_close(matmul_case(describe(c) + " M=1000", w, random_floats({1000, c.K}, DType::f16, 0.5f)));
    run_on_all_backends_close(matmul_case(describe(c) + " A [2, 3, K]", w, random_floats({2, 3, c.K}, DType::f16)));
  }
}

// bf16 A of 64 rows and more: the CPU's large-M path (the weight in bf16 panels through oneDNN, where the build
// has it) on every kind of format, zeros mode, a permutation, a bias and each output dtype.
TEST(MatmulLargeM, Bf16EveryFormat) {
  SCOPED_TRACE("impls: " + impl_names<MatmulArgs>());
  struct Format {
    WeightType type;
    int64_t group;
    bool zeros;
    ZerosMode mode;
  };
  int i = 0;
  for (const Format f : {Format{WeightType::int4, 128, false, ZerosMode::original},
                         Format{WeightType::uint4, 128, true, ZerosMode::quantized},
                         Format{WeightType::uint4, 64, true, ZerosMode::rescale},
                         Format{WeightType::nf4, 64, false, ZerosMode::original},
                         Format{WeightType::int8, -1, false, ZerosMode::original},
                         Format{WeightType::int2, 32, true, ZerosMode::original},
                         Format{WeightType::fp8_e4m3, -1, false, ZerosMode::original},
                         Format{WeightType::bf16, -1, false, ZerosMode::original}}) {
    for (const int64_t M : {64, 130}) {
      MatmulConfig c;
      c.W_dtype = f.type;
      c.N = 600 + 7 * i;  // a panel of 512 rows and a ragged one
      c.K = 256;
      c.with_scaling = f.type != WeightType::bf16;
      c.group_size = f.group;
      c.with_zeros = f.zeros;
      c.zeros_mode = f.mode;
      c.A_dtype = DType::bf16;
      c.out_dtype = i % 3 == 0 ? DType::bf16 : i % 3 == 1 ? DType::f32 : DType::f16;
      c.with_bias = i % 2 == 1;
      const bool perm = i % 4 == 2;
      const QuantizedWeight w = random_weight(c, DType::f16, perm);
      run_on_all_backends_close(matmul_case(describe(c) + " M=" + std::to_string(M) + (perm ? " perm" : ""), w,
                                            random_floats({M, c.K}, DType::bf16, 0.5f)));
      ++i;
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// No rows: every implementation returns without touching anything.
TEST(MatmulLargeM, EmptyA) {
  MatmulConfig c;
  c.W_dtype = WeightType::int4;
  c.N = 5;
  c.K = 64;
  const QuantizedWeight w = random_weight(c, DType::f16, false);
  const Matmul mm(c);
  const PackedWeight p = mm.transform_weight(w.weight);
  const Tensor out = mm.forward(Tensor::empty({0, 64}, DType::f16), p);
  EXPECT_EQ(out.size(0), 0);
  EXPECT_EQ(out.size(1), 5);
}

}  // namespace
}  // namespace test
}  // namespace lowbit
