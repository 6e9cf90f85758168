// Shared by the multi-tensor optimizer tests (CPU and CUDA): a list of
// parameters of mixed sizes, updated once by the multi op and once by the
// single-tensor op entry by entry, from the same values on one device; every
// output must have the same bytes.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "harness/harness.h"
#include "lowbit/ops/optim.h"
#include "optim/optim_test_util.h"

namespace lowbit::test {

// Runs args with a workspace from the stream-ordered allocator, as the C and Python calls do.
template <class Args>
void run_with_scratch(const Args& a, Device device, Stream stream = {}) {
  const size_t bytes = workspace_size(a);
  const Tensor ws = bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, device, stream) : Tensor();
  run(a, ws.data(), stream);
}

inline void expect_bytes_equal(const Tensor& want, const Tensor& got, const std::string& what) {
  const Tensor w = Tensor::copy_of(want.ref(), Device::cpu()), g = Tensor::copy_of(got.ref(), Device::cpu());
  ASSERT_EQ(w.nbytes(), g.nbytes()) << what;
  const auto* a = w.ptr<const unsigned char>();
  const auto* b = g.ptr<const unsigned char>();
  for (size_t i = 0; i < w.nbytes(); ++i) {
    if (a[i] != b[i]) {
      ADD_FAILURE() << what << ": byte " << i << " differs (single " << int{a[i]} << ", multi " << int{b[i]} << ")";
      return;
    }
  }
}

// A parameter with 32-bit states on `device`; s2 and unorm absent where not taken.
struct Param32 {
  Tensor g, p, s1, s2, unorm;
  OptimizerTensors32bit refs() const {
    return {g.ref(),
            p.ref(),
            s1.ref(),
            s2.defined() ? s2.ref() : TensorRef{},
            unorm.defined() ? unorm.ref() : TensorRef{},
            TensorRef{}};
  }
};

inline std::vector<Param32> random_params32(Optimizer o, DType dtype, const std::vector<int64_t>& sizes, bool norms) {
  std::vector<Param32> out;
  for (int64_t n : sizes) {
    Param32 q;
    q.g = random_floats({n}, dtype);
    q.p = random_floats({n}, dtype);
    q.s1 = random_floats({o == Optimizer::ademamix ? 2 * n : n}, DType::f32, 0.1f);
    if (o == Optimizer::rmsprop || o == Optimizer::adagrad) {
      for (int64_t i = 0; i < q.s1.numel(); ++i) q.s1.ptr<float>()[i] = std::fabs(q.s1.ptr<float>()[i]);
    }
    if (optimizer_has_state2(o)) {
      q.s2 = random_floats({n}, DType::f32, 0.1f);
      for (int64_t i = 0; i < n; ++i) q.s2.ptr<float>()[i] = std::fabs(q.s2.ptr<float>()[i]);
    }
    if (norms) q.unorm = host_tensor({-1.0f});
    out.push_back(std::move(q));
  }
  return out;
}

inline std::vector<Param32> copy_params(const std::vector<Param32>& ps, Device d) {
  std::vector<Param32> out;
  for (const Param32& q : ps) {
    out.push_back({q.g.to(d), q.p.to(d), q.s1.to(d), q.s2.defined() ? q.s2.to(d) : Tensor(),
                   q.unorm.defined() ? q.unorm.to(d) : Tensor()});
  }
  return out;
}

inline OptimizerUpdate32bitMultiArgs multi_args32(Optimizer o, float max_unorm, float weight_decay,
                                                 const std::vector<OptimizerTensors32bit>& refs) {
  OptimizerUpdate32bitMultiArgs a;
  a.optimizer = o, a.params = refs;
  a.beta1 = 0.9f, a.beta2 = 0.99f, a.beta3 = 0.999f, a.alpha = 5.0f, a.eps = 1e-6f, a.lr = 1e-2f;
  a.weight_decay = weight_decay, a.gnorm_scale = 0.75f, a.max_unorm = max_unorm, a.step = 3;
  return a;
}

// The multi op against the single op on each entry, on `device`.
inline void expect_multi_equals_single32(Optimizer o, DType dtype, const std::vector<int64_t>& sizes, float max_unorm,
                                         Device device) {
  SCOPED_TRACE(std::string(optimizer_name(o)) + " " + std::string(dtype_name(dtype)) +
               " max_unorm=" + std::to_string(max_unorm) + " tensors=" + std::to_string(sizes.size()));
  const std::vector<Param32> host = random_params32(o, dtype, sizes, max_unorm > 0.0f);
  const std::vector<Param32> single = copy_params(host, device), multi = copy_params(host, device);
  std::vector<OptimizerTensors32bit> refs;
  for (const Param32& q : multi) refs.push_back(q.refs());
  run_with_scratch(multi_args32(o, max_unorm, 0.01f, refs), device);
  for (const Param32& q : single) {
    const std::vector<OptimizerTensors32bit> one{q.refs()};
    run_with_scratch(multi_args32(o, max_unorm, 0.01f, one).entry(0), device);
  }
  for (size_t t = 0; t < sizes.size(); ++t) {
    const std::string at = "params[" + std::to_string(t) + "] n=" + std::to_string(sizes[t]);
    expect_bytes_equal(single[t].p, multi[t].p, at + " p");
    expect_bytes_equal(single[t].s1, multi[t].s1, at + " state1");
    if (single[t].s2.defined()) expect_bytes_equal(single[t].s2, multi[t].s2, at + " state2");
    if (single[t].unorm.defined()) expect_bytes_equal(single[t].unorm, multi[t].unorm, at + " unorm_vec");
  }
}

// A parameter with 8-bit blockwise states on `device` (the maps are the list's).
struct Param8 {
  Tensor g, p, s1, s2, a1, a2;
  OptimizerTensors8bitBlockwise refs() const {
    return {g.ref(),    p.ref(),
            s1.ref(),   s2.defined() ? s2.ref() : TensorRef{},
            a1.ref(),   a2.defined() ? a2.ref() : TensorRef{},
            TensorRef{}};
  }
};

// fresh: maps no other call has passed (the dynamic maps scaled, so that no code
// table is kept for them) and the single ops first, so that small tensors
// encode by binary search there and by the list's table in the multi op.
inline void expect_multi_equals_single8(Optimizer o, DType dtype, const std::vector<int64_t>& sizes, Device device,
                                        bool fresh = false) {
  SCOPED_TRACE(std::string(optimizer_name(o)) + " " + std::string(dtype_name(dtype)) +
               " tensors=" + std::to_string(sizes.size()) + (fresh ? " fresh maps" : ""));
  Hyper8 h;
  h.weight_decay = 0.01f, h.gnorm_scale = 0.75f;
  std::vector<Param8> single, multi;
  Tensor qmap1, qmap2;
  auto opt_to = [&](const Tensor& t) { return t.defined() ? t.to(device) : Tensor(); };
  static int fresh_maps = 0;
  const float scale = fresh ? 1.0f - static_cast<float>(++fresh_maps) * 0x1p-12f : 1.0f;
  auto scaled = [&](const Tensor& map) {
    if (!map.defined()) return Tensor();
    Tensor m = Tensor::copy_of(map.ref(), Device::cpu());
    for (int64_t i = 0; i < m.numel(); ++i) m.ptr<float>()[i] *= scale;
    return m.to(device);
  };
  for (int64_t n : sizes) {
    const State8 s = random_state8(o, dtype, n);
    const Tensor g = random_grad8(h, dtype, n);
    if (!qmap1.defined()) qmap1 = scaled(s.qmap1), qmap2 = scaled(s.qmap2);
    for (auto* list : {&single, &multi}) {
      list->push_back({g.to(device), s.p.to(device), s.state1.to(device), opt_to(s.state2), s.absmax1.to(device),
                       opt_to(s.absmax2)});
    }
  }
  std::vector<OptimizerTensors8bitBlockwise> refs;
  for (const Param8& q : multi) refs.push_back(q.refs());
  OptimizerUpdate8bitBlockwiseMultiArgs a;
  a.optimizer = o, a.params = refs, a.qmap1 = qmap1.ref(), a.qmap2 = qmap2.defined() ? qmap2.ref() : TensorRef{};
  a.beta1 = h.beta1, a.beta2 = h.beta2, a.beta3 = h.beta3, a.alpha = h.alpha, a.eps = h.eps;
  a.weight_decay = h.weight_decay, a.lr = h.lr, a.gnorm_scale = h.gnorm_scale, a.step = 2;
  if (!fresh) run_with_scratch(a, device);
  for (const Param8& q : single) {
    const std::vector<OptimizerTensors8bitBlockwise> one{q.refs()};
    OptimizerUpdate8bitBlockwiseMultiArgs b = a;
    b.params = one;
    run_with_scratch(b.entry(0), device);
  }
  if (fresh) run_with_scratch(a, device);
  for (size_t t = 0; t < sizes.size(); ++t) {
    const std::string at = "params[" + std::to_string(t) + "] n=" + std::to_string(sizes[t]);
    expect_bytes_equal(single[t].p, multi[t].p, at + " p");
    expect_bytes_equal(single[t].s1, multi[t].s1, at + " state1");
    expect_bytes_equal(single[t].a1, multi[t].a1, at + " absmax1");
    if (single[t].s2.defined()) expect_bytes_equal(single[t].s2, multi[t].s2, at + " state2");
    if (single[t].a2.defined()) expect_bytes_equal(single[t].a2, multi[t].a2, at + " absmax2");
  }
}

// Mixed sizes: empty, tiny, ragged, one past the CPU's thread threshold.
inline const std::vector<int64_t> kMixedSizes = {1, 0, 7, 256, 1037, 40000, 3, 70001, 255, 257};

}  // namespace lowbit::test
