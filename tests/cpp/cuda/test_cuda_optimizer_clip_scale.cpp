// The updates' device gradient scale (clip_scale) on CUDA: the kernels read
// each entry's own scale and give the bytes of the host gnorm_scale path;
// percentile_clipping's scale output against a sorted copy of the history;
// and the CPU's scale bit for bit.
#include <vector>

#include "cuda_test_util.h"
#include "harness/harness.h"
#include "optim/clip_scale_test_util.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

const Device kGpu = Device::cuda(0);

TEST(CudaOptimizerClipScale, ListEntriesGetTheHostScalesBytes) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  for (Optimizer o : {Optimizer::adam, Optimizer::momentum, Optimizer::ademamix}) {
    expect_clip_scale32(o, DType::f32, 0.0f, kGpu);
    expect_clip_scale32(o, DType::bf16, 0.0f, kGpu);
  }
  expect_clip_scale32(Optimizer::lamb, DType::f16, 0.01f, kGpu);
  for (Optimizer o : {Optimizer::adam, Optimizer::lion, Optimizer::ademamix}) {
    expect_clip_scale8_blockwise(o, DType::f32, kGpu);
    expect_clip_scale8_blockwise(o, DType::bf16, kGpu);
  }
  for (Optimizer o : {Optimizer::adam, Optimizer::momentum, Optimizer::rmsprop}) {
    expect_clip_scale8_tensorwise(o, DType::f16, kGpu);
  }
}

TEST(CudaPercentileClipping, ScaleIsTheSortedHistorysArithmetic) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  expect_percentile_scale(kGpu);
}

TEST(CudaPercentileClipping, ScaleEqualsTheCpus) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  std::vector<float> init(PercentileClippingArgs::kHistory);
  for (size_t i = 0; i < init.size(); ++i) init[i] = static_cast<float>((i * 37) % 11) * 0.25f;  // ties
  const Tensor g = random_floats({50001}, DType::bf16, 0.02f);
  float got[2];
  for (int k = 0; k < 2; ++k) {
    const Device d = k ? kGpu : Device::cpu();
    Tensor vec = host_tensor(init).to(d), scale = host_tensor({-1.0f}).to(d);
    const Tensor gd = g.to(d);
    PercentileClippingArgs a;
    a.grad = gd.ref(), a.gnorm_vec = vec.ref(), a.scale = scale.ref(), a.step = 42, a.percentile = 7;
    run_with_scratch(a, d);
    got[k] = to_floats(Tensor::copy_of(scale.ref(), Device::cpu()).ref())[0];
  }
  EXPECT_LT(got[0], 1.0f);  // the case clips
  EXPECT_EQ(got[0], got[1]);
}

}  // namespace
