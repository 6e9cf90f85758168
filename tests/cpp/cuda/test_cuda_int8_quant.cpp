// LLM.int8's column quantization and input gradient on CUDA against the CPU
// backend, bit for bit: every float dtype, ragged shapes (the scalar path
// where rows are not whole 16-byte vectors or the view is not aligned),
// thresholds that leave outliers out, NaN and Inf in the input, N = 0.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "cuda_test_util.h"
#include "harness/harness.h"
#include "lowbit/ops/int8_gemm.h"
#include "lowbit/ops/quant.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

const Device kGpu = Device::cuda(0);

// x with a NaN, a +Inf and a -Inf at spread positions (when it has room).
void add_specials(Tensor& x) {
  const int64_t n = x.numel();
  if (n < 8) return;
  const float specials[] = {std::nanf(""), INFINITY, -INFINITY};
  for (int i = 0; i < 3; ++i) {
    const int64_t at = n / 4 * (i + 1);
    switch (x.dtype()) {
      case DType::f16: x.ptr<core::Half>()[at] = core::from_f32<core::Half>(specials[i]); break;
      case DType::bf16: x.ptr<core::BFloat16>()[at] = core::from_f32<core::BFloat16>(specials[i]); break;
      default: x.ptr<float>()[at] = specials[i]; break;
    }
  }
}

TEST(CudaInt8Colwise, MatchesTheCpuBitForBit) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const std::vector<std::vector<int64_t>> shapes = {{1, 1},     {7, 33},     {3, 5, 100}, {130, 70},
                                                    {1000, 24}, {4099, 256}, {64, 4104},  {0, 16}};
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const auto& shape : shapes) {
      for (float threshold : {0.0f, 2.5f}) {
        for (bool aligned : {true, false}) {  // one element in: not 16-byte aligned (the scalar path)
          const int64_t k = shape.back(), offset = aligned ? 0 : dtype_bits(dtype) / 8;
          Tensor x = random_floats(shape, dtype);
          add_specials(x);
          const std::string what = "int8_colwise_quant " + std::string(dtype_name(dtype)) + " " +
                                   std::to_string(x.numel() / k) + "x" + std::to_string(k) + " threshold " +
                                   std::to_string(threshold) + " offset " + std::to_string(offset);
          const Int8ColwiseQuantized want = int8_colwise_quant(x.ref(), threshold);
          const DeviceView in = device_view(x, offset);
          Tensor q = poisoned(shape, DType::i8), stats = poisoned({k}, DType::f32);
          run(Int8ColwiseQuantArgs{in.ref, q.ref(), stats.ref(), threshold});
          synchronize(Stream{});
          expect_same_bits(want.col_stats.ref(), stats.ref(), what + " col_stats");
          expect_same_bits(want.values.ref(), q.ref(), what + " codes");
        }
      }
    }
  }
}

TEST(CudaInt8GradInput, MatchesTheCpuBitForBit) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  struct Case {
    std::vector<int64_t> lead;
    int64_t N, K;
  };
  // Both CTA shapes (the thin one up to 4096 outputs an SM), N = 0 (zeros), no rows.
  const Case cases[] = {{{1}, 1, 1},       {{3, 5}, 33, 70}, {{37}, 130, 300}, {{16}, 4096, 512},
                        {{600}, 40, 1000}, {{2}, 0, 5},      {{0}, 8, 16}};
  for (const Case& c : cases) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      std::vector<int64_t> gshape = c.lead, ashape = c.lead;
      gshape.push_back(c.N);
      ashape.push_back(c.K);
      const Tensor g = random_floats(gshape, dtype), b = random_int8({c.N, c.K}), bs = random_stats(c.N);
      const std::string what = "int8_linear_grad_input " + std::string(dtype_name(dtype)) +
                               " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K);
      const Tensor want = int8_linear_grad_input(g.ref(), b.ref(), bs.ref());
      const Tensor gg = g.to(kGpu), gb = b.to(kGpu), gbs = bs.to(kGpu);
      Tensor got = poisoned(ashape, dtype);
      run(Int8LinearGradInputArgs{gg.ref(), gb.ref(), gbs.ref(), got.ref()});
      synchronize(Stream{});
      expect_same_floats(want, got.ref(), what);
    }
  }
}

}  // namespace
