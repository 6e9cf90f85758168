// The updates' device gradient scale (clip_scale) on the CPU: the bytes of
// the host gnorm_scale path, per entry of a list; percentile_clipping's
// scale output against a sorted copy of the history; bad arguments, named.
#include <string>

#include "harness/harness.h"
#include "optim/clip_scale_test_util.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

TEST(OptimizerClipScale, ListEntriesGetTheHostScalesBytes) {
  for (Optimizer o : {Optimizer::adam, Optimizer::momentum, Optimizer::ademamix}) {
    expect_clip_scale32(o, DType::f32, 0.0f, Device::cpu());
    expect_clip_scale32(o, DType::bf16, 0.0f, Device::cpu());
  }
  expect_clip_scale32(Optimizer::lamb, DType::f16, 0.01f, Device::cpu());  // the trust ratio's norms too
  for (Optimizer o : {Optimizer::adam, Optimizer::lion, Optimizer::ademamix}) {
    expect_clip_scale8_blockwise(o, DType::f32, Device::cpu());
    expect_clip_scale8_blockwise(o, DType::bf16, Device::cpu());
  }
  for (Optimizer o : {Optimizer::adam, Optimizer::momentum, Optimizer::rmsprop}) {
    expect_clip_scale8_tensorwise(o, DType::f16, Device::cpu());
  }
}

TEST(PercentileClipping, ScaleIsTheSortedHistorysArithmetic) { expect_percentile_scale(Device::cpu()); }

TEST(OptimizerClipScale, BadArgumentsSayWhatIsWrong) {
  const std::string op32 = "optimizer_update_32bit";
  const Tensor g = random_floats({10}, DType::f32), p = random_floats({10}, DType::f32);
  const Tensor s1 = random_floats({10}, DType::f32), s2 = random_floats({10}, DType::f32, 0.0f);
  const Tensor two = host_tensor({1.0f, 2.0f}), half = host_tensor({1.0f}, DType::f16);
  OptimizerUpdate32bitArgs a;
  a.optimizer = Optimizer::adam, a.g = g.ref(), a.p = p.ref(), a.state1 = s1.ref(), a.state2 = s2.ref();
  a.lr = 1e-3f;
  a.clip_scale = two.ref();
  expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op32 + ": clip_scale", "1"});
  a.clip_scale = half.ref();
  expect_error([&] { run(a); }, ErrorCode::unsupported_dtype, {op32 + ": clip_scale", "float32"});

  const std::string pc = "percentile_clipping";
  Tensor vec = Tensor::empty({PercentileClippingArgs::kHistory}, DType::f32), scale = host_tensor({0.0f});
  PercentileClippingArgs b;
  b.grad = g.ref(), b.gnorm_vec = vec.ref(), b.scale = scale.ref(), b.percentile = 100;
  expect_error([&] { run(b); }, ErrorCode::invalid_argument, {pc + ": percentile must be from 0 to 99", "got 100"});
  b.percentile = -1;
  expect_error([&] { run(b); }, ErrorCode::invalid_argument, {pc + ": percentile", "got -1"});
  b.percentile = 5, b.scale = two.ref();
  expect_error([&] { run(b); }, ErrorCode::invalid_argument, {pc + ": scale", "1"});
  b.scale = half.ref();
  expect_error([&] { run(b); }, ErrorCode::unsupported_dtype, {pc + ": scale", "float32"});
}

}  // namespace
