// Shared by the clip-scale tests (CPU and CUDA): an update given its
// gradient scale as a device tensor (clip_scale) must give the bytes of the
// same update given gnorm_scale * clip_scale[0] on the host, per entry of a
// list; and percentile_clipping's `scale` output must be the float32
// arithmetic of a sorted copy of the history.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "lowbit/ops/optim.h"
#include "optim/multi_test_util.h"
#include "optim/optim_test_util.h"

namespace lowbit::test {

// Entry t's clip value, or none (every third entry: a list may mix both).
inline bool has_clip(size_t t) { return t % 3 != 2; }
inline float clip_value(size_t t) { return 0.3125f + 0.171875f * static_cast<float>(t % 5); }

inline void expect_clip_scale32(Optimizer o, DType dtype, float max_unorm, Device device) {
  SCOPED_TRACE(std::string(optimizer_name(o)) + " " + std::string(dtype_name(dtype)) + " 32-bit");
  const std::vector<int64_t> sizes = {1037, 5, 40000, 0, 70001};
  const std::vector<Param32> host = random_params32(o, dtype, sizes, max_unorm > 0.0f);
  const std::vector<Param32> single = copy_params(host, device), multi = copy_params(host, device);
  std::vector<Tensor> clips;
  std::vector<OptimizerTensors32bit> refs;
  for (size_t t = 0; t < multi.size(); ++t) {
    clips.push_back(has_clip(t) ? host_tensor({clip_value(t)}).to(device) : Tensor());
    refs.push_back(multi[t].refs());
    if (has_clip(t)) refs.back().clip_scale = clips.back().ref();
  }
  run_with_scratch(multi_args32(o, max_unorm, 0.01f, refs), device);
  for (size_t t = 0; t < single.size(); ++t) {
    const std::vector<OptimizerTensors32bit> one{single[t].refs()};
    OptimizerUpdate32bitArgs a = multi_args32(o, max_unorm, 0.01f, one).entry(0);
    if (has_clip(t)) a.gnorm_scale *= clip_value(t);
    run_with_scratch(a, device);
    const std::string at = "params[" + std::to_string(t) + "]";
    expect_bytes_equal(single[t].p, multi[t].p, at + " p");
    expect_bytes_equal(single[t].s1, multi[t].s1, at + " state1");
    if (single[t].s2.defined()) expect_bytes_equal(single[t].s2, multi[t].s2, at + " state2");
    if (single[t].unorm.defined()) expect_bytes_equal(single[t].unorm, multi[t].unorm, at + " unorm_vec");
  }
}

inline void expect_clip_scale8_blockwise(Optimizer o, DType dtype, Device device) {
  SCOPED_TRACE(std::string(optimizer_name(o)) + " " + std::string(dtype_name(dtype)) + " 8-bit blockwise");
  const std::vector<int64_t> sizes = {1037, 5, 40000, 70001};
  Hyper8 h;
  h.weight_decay = 0.01f, h.gnorm_scale = 0.75f;
  auto opt_to = [&](const Tensor& t) { return t.defined() ? t.to(device) : Tensor(); };
  std::vector<Param8> single, multi;
  std::vector<Tensor> clips;
  Tensor qmap1, qmap2;
  for (int64_t n : sizes) {
    const State8 s = random_state8(o, dtype, n);
    const Tensor g = random_grad8(h, dtype, n);
    if (!qmap1.defined()) qmap1 = s.qmap1.to(device), qmap2 = opt_to(s.qmap2);
    for (auto* list : {&single, &multi}) {
      list->push_back({g.to(device), s.p.to(device), s.state1.to(device), opt_to(s.state2), s.absmax1.to(device),
                       opt_to(s.absmax2)});
    }
  }
  std::vector<OptimizerTensors8bitBlockwise> refs;
  for (size_t t = 0; t < multi.size(); ++t) {
    clips.push_back(has_clip(t) ? host_tensor({clip_value(t)}).to(device) : Tensor());
    refs.push_back(multi[t].refs());
    if (has_clip(t)) refs.back().clip_scale = clips.back().ref();
  }
  OptimizerUpdate8bitBlockwiseMultiArgs a;
  a.optimizer = o, a.params = refs, a.qmap1 = qmap1.ref(), a.qmap2 = qmap2.defined() ? qmap2.ref() : TensorRef{};
  a.beta1 = h.beta1, a.beta2 = h.beta2, a.beta3 = h.beta3, a.alpha = h.alpha, a.eps = h.eps;
  a.weight_decay = h.weight_decay, a.lr = h.lr, a.gnorm_scale = h.gnorm_scale, a.step = 2;
  run_with_scratch(a, device);
  for (size_t t = 0; t < single.size(); ++t) {
    const std::vector<OptimizerTensors8bitBlockwise> one{single[t].refs()};
    OptimizerUpdate8bitBlockwiseMultiArgs b = a;
    b.params = one;
    OptimizerUpdate8bitBlockwiseArgs e = b.entry(0);
    if (has_clip(t)) e.gnorm_scale *= clip_value(t);
    run_with_scratch(e, device);
    const std::string at = "params[" + std::to_string(t) + "]";
    expect_bytes_equal(single[t].p, multi[t].p, at + " p");
    expect_bytes_equal(single[t].s1, multi[t].s1, at + " state1");
    expect_bytes_equal(single[t].a1, multi[t].a1, at + " absmax1");
    if (single[t].s2.defined()) expect_bytes_equal(single[t].s2, multi[t].s2, at + " state2");
  }
}

// Tensor-wise 8-bit states (no multi op): the single op with and without its device scale.
inline void expect_clip_scale8_tensorwise(Optimizer o, DType dtype, Device device) {
  SCOPED_TRACE(std::string(optimizer_name(o)) + " " + std::string(dtype_name(dtype)) + " 8-bit tensor-wise");
  const int64_t n = 40000;
  const bool two = optimizer_has_state2(o);
  const Tensor g = random_floats({n}, dtype).to(device), p = random_floats({n}, dtype);
  const Tensor q1 = host_tensor(create_dynamic_map(true)).to(device);
  const Tensor q2 = two ? host_tensor(create_dynamic_map(false)).to(device) : Tensor();
  Tensor s1 = random_bytes({n}, DType::u8), s2 = two ? random_bytes({n}, DType::u8) : Tensor();
  if (o == Optimizer::rmsprop) {  // a sum of squares: the map's non-negative half
    for (int64_t i = 0; i < n; ++i) s1.ptr<uint8_t>()[i] = static_cast<uint8_t>(127 + s1.ptr<uint8_t>()[i] % 129);
  }
  const Tensor max1 = host_tensor({0.3f}).to(device), max2 = host_tensor({0.02f}).to(device);
  const Tensor clip = host_tensor({0.6875f}).to(device);
  struct Out {
    Tensor p, s1, s2, new_max1, new_max2, unorm;
  };
  auto run_one = [&](bool on_device) {
    Out o2{p.to(device),
           s1.to(device),
           two ? s2.to(device) : Tensor(),
           host_tensor({-1.0f}).to(device),
           host_tensor({-1.0f}).to(device),
           host_tensor({-1.0f}).to(device)};
    OptimizerUpdate8bitArgs a;
    a.optimizer = o;
    a.g = g.ref(), a.p = o2.p.ref(), a.state1 = o2.s1.ref(), a.qmap1 = q1.ref();
    a.max1 = max1.ref(), a.new_max1 = o2.new_max1.ref();
    if (two) a.state2 = o2.s2.ref(), a.qmap2 = q2.ref(), a.max2 = max2.ref(), a.new_max2 = o2.new_max2.ref();
    if (o != Optimizer::rmsprop && o != Optimizer::lion) a.unorm_vec = o2.unorm.ref();
    a.beta1 = 0.9f, a.beta2 = 0.995f, a.eps = 1e-6f, a.weight_decay = 0.01f, a.lr = 1e-2f, a.step = 3;
    a.gnorm_scale = 0.75f;
    if (on_device) {
      a.clip_scale = clip.ref();
    } else {
      a.gnorm_scale *= 0.6875f;
    }
    run_with_scratch(a, device);
    return o2;
  };
  const Out want = run_one(false), got = run_one(true);
  expect_bytes_equal(want.p, got.p, "p");
  expect_bytes_equal(want.s1, got.s1, "state1");
  expect_bytes_equal(want.new_max1, got.new_max1, "new_max1");
  if (two) expect_bytes_equal(want.s2, got.s2, "state2");
  expect_bytes_equal(want.unorm, got.unorm, "unorm_vec");
}

// percentile_clipping's scale: the float32 arithmetic on a stably sorted
// copy of the recorded history (NaN last), bit for bit.
inline float model_clip_scale(std::vector<float> history, int64_t step, int64_t percentile) {
  const float current = std::sqrt(history[static_cast<size_t>(step % PercentileClippingArgs::kHistory)]);
  std::stable_sort(history.begin(), history.end(),
                   [](float a, float b) { return !std::isnan(a) && (std::isnan(b) || a < b); });
  const float clip = std::sqrt(history[static_cast<size_t>(percentile)]);
  return current > clip ? clip / current : 1.0f;
}

inline void expect_percentile_scale(Device device) {
  constexpr int64_t kHistory = PercentileClippingArgs::kHistory;
  std::uniform_real_distribution<float> u(0.0f, 4.0f);
  std::uniform_int_distribution<int> pick(0, 9);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 24; ++trial) {
    std::vector<float> init(kHistory);
    for (float& v : init) {
      const int k = pick(rng());
      v = k == 0 ? 1.0f : (k == 1 && trial % 4 == 3 ? nan : (k == 2 && trial % 5 == 4 ? inf : u(rng())));  // ties
    }
    Tensor vec = host_tensor(init).to(device), scale = host_tensor({-1.0f}).to(device);
    const int64_t step = std::vector<int64_t>{1, 2, 50, 99, 100, 101, 357}[static_cast<size_t>(trial % 7)];
    const int64_t percentile = std::vector<int64_t>{0, 5, 37, 99}[static_cast<size_t>(trial % 4)];
    // large norms in some trials: the current slot above the clip value, so the scale is below 1
    const Tensor g = random_floats({1 + 997 * trial}, DType::f32, trial % 2 ? 3.0f : 0.05f).to(device);
    PercentileClippingArgs a;
    a.grad = g.ref(), a.gnorm_vec = vec.ref(), a.scale = scale.ref(), a.step = step, a.percentile = percentile;
    run_with_scratch(a, device);
    const std::vector<float> history = to_floats(Tensor::copy_of(vec.ref(), Device::cpu()).ref());
    const float want = model_clip_scale(history, step, percentile);
    const float got = to_floats(Tensor::copy_of(scale.ref(), Device::cpu()).ref())[0];
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "trial " << trial;
    } else {
      EXPECT_EQ(got, want) << "trial " << trial << " step " << step << " percentile " << percentile;
    }
  }
}

}  // namespace lowbit::test
