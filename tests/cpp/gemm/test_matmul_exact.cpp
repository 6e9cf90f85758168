// Every CPU implementation multiplies by exactly the weights the format
// defines: with A = I and fp32 output, out[m, n] = Σ 1 · W[n, m] + zeros,
// which leaves W bit for bit — so the fast path's vectorized decoders (LUT
// permutes, folded group tables, branch-free halves) must reproduce
// dequantize_weight, the one definition, for every format and zeros mode.
// A's rows also go 8 at a time (the few-rows kernels, where they take the
// format: fp16 A in fp32, weights exact).
#include <algorithm>
#include <cstring>

#include "core/weight_format.h"
#include "gemm/gemm_cases.h"

namespace lowbit::test {
namespace {

TEST(MatmulExact, IdentityTimesWeightGivesTheDequantizedWeight) {
  const WeightType types[] = {WeightType::int8,  WeightType::int4,  WeightType::int2,     WeightType::int1,
                              WeightType::uint8, WeightType::uint4, WeightType::uint2,    WeightType::uint1,
                              WeightType::nf4,   WeightType::fp4,   WeightType::fp4_e2m1, WeightType::fp8_e4m3,
                              WeightType::f16,   WeightType::bf16};
  int i = 0;
  for (WeightType t : types) {
    for (int variant = 0; variant < 5; ++variant, ++i) {
      MatmulConfig c;
      c.W_dtype = t;
      c.N = 19;
      c.K = variant == 0 ? 77 : 128;  // a ragged K without groups; whole steps of the few-rows kernels
      c.with_scaling = variant > 0;
      c.group_size = variant > 1 ? 32 : -1;
      c.with_zeros = variant > 1 && core::weight_is_integer(t);
      c.zeros_mode = static_cast<ZerosMode>(variant - 2 < 0 ? 0 : variant - 2);
      c.out_dtype = DType::f32;
      // fp32 scales: v * s rounds, so an FMA-contracted v * s - z would show.
      const QuantizedWeight w = random_weight(c, i % 2 ? DType::f32 : DType::bf16, variant == 3);
      const Matmul mm(c);
      const PackedWeight p = mm.transform_weight(w.weight, w.scale, w.zeros, w.bias, w.perm);
      const Tensor want = dequantize_weight(p);
      Tensor A = Tensor::empty({c.K, c.K}, DType::f16);
      for (int64_t j = 0; j < c.K * c.K; ++j) A.ptr<uint16_t>()[j] = j % (c.K + 1) == 0 ? 0x3C00 : 0;
      for (const auto& impl : core::OpRegistry<MatmulArgs>::all()) {
        if (impl.device != DeviceType::cpu) continue;
        std::vector<KernelConfig> configs{KernelConfig{}};
        if (impl.configs) {
          Tensor probe = Tensor::empty({c.K, c.N}, DType::f32);
          for (KernelConfig& k : impl.configs(mm.args(A, p.ref(), probe))) configs.push_back(std::move(k));
        }
        for (const KernelConfig& config : configs) {
          Tensor out = Tensor::empty({c.K, c.N}, DType::f32);
          MatmulArgs a = mm.args(A, p.ref(), out);
          a.config = config;
          const Tensor ws = Tensor::empty({static_cast<int64_t>(impl.workspace(a))}, DType::u8);
          ops::run_impl(impl, a, ws.data(), {});
          int64_t bad = 0, first = -1;
          for (int64_t m = 0; m < c.K; ++m) {
            for (int64_t n = 0; n < c.N; ++n) {
              // == rather than bytes: a -0 weight sums to +0.
              if (out.ptr<float>()[m * c.N + n] != want.ptr<float>()[n * c.K + m]) {
                bad += 1;
                if (first < 0) first = m * c.N + n;
              }
            }
          }
          EXPECT_EQ(bad, 0) << describe(c) << " [" << impl.name << " config " << config.name() << "] first at "
                            << first;
        }
        // Rows r0 .. r0 + 7 of I: the few-rows path's products.
        int64_t bad = 0;
        for (int64_t r0 = 0; r0 < c.K; r0 += 8) {
          const int64_t rows = std::min<int64_t>(8, c.K - r0);
          Tensor Ar = Tensor::empty({rows, c.K}, DType::f16);
          std::memcpy(Ar.data(), A.ptr<uint16_t>() + r0 * c.K, static_cast<size_t>(rows * c.K) * 2);
          Tensor out = Tensor::empty({rows, c.N}, DType::f32);
          const MatmulArgs a = mm.args(Ar, p.ref(), out);
          const Tensor ws = Tensor::empty({static_cast<int64_t>(impl.workspace(a))}, DType::u8);
          ops::run_impl(impl, a, ws.data(), {});
          for (int64_t m = 0; m < rows; ++m) {
            for (int64_t n = 0; n < c.N; ++n)
              bad += out.ptr<float>()[m * c.N + n] != want.ptr<float>()[n * c.K + r0 + m];
          }
        }
        EXPECT_EQ(bad, 0) << describe(c) << " [" << impl.name << "] 8 rows at a time";
      }
    }
  }
}

}  // namespace
}  // namespace lowbit::test
