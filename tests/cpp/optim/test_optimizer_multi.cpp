// The multi-tensor optimizer updates on the CPU: every rule over a list of
// mixed sizes (empty, ragged, past the thread threshold) gives each
// parameter the bytes of the single-tensor op, with and without the trust
// ratio, small tensors through the list's code table too; an empty list does
// nothing; every list-wide check and an entry's own check name the entry.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/harness.h"
#include "lowbit/ops/optim.h"
#include "optim/multi_test_util.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

const Optimizer kAll[] = {Optimizer::adam,    Optimizer::momentum, Optimizer::rmsprop, Optimizer::lion,
                          Optimizer::adagrad, Optimizer::lamb,     Optimizer::lars,    Optimizer::ademamix};

TEST(OptimizerUpdate32bitMulti, EachParameterGetsTheSingleOpsBytes) {
  for (Optimizer o : kAll) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      expect_multi_equals_single32(o, dtype, kMixedSizes, 0.0f, Device::cpu());
    }
    expect_multi_equals_single32(o, DType::f32, kMixedSizes, 0.01f, Device::cpu());  // per-parameter norms
  }
}

TEST(OptimizerUpdate8bitBlockwiseMulti, EachParameterGetsTheSingleOpsBytes) {
  for (Optimizer o : kRules8) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      expect_multi_equals_single8(o, dtype, kMixedSizes, Device::cpu());
    }
  }
}

TEST(OptimizerUpdate8bitBlockwiseMulti, SmallTensorsGetTheSingleOpsBytesThroughTheListsTable) {
  // each below the size from which a single update builds a code table, together above it
  const std::vector<int64_t> small = {300, 1, 255, 257, 1000, 7, 2049, 512};
  for (Optimizer o : kRules8) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      expect_multi_equals_single8(o, dtype, small, Device::cpu(), /*fresh=*/true);
    }
  }
}

TEST(OptimizerUpdateMulti, AnEmptyListDoesNothing) {
  OptimizerUpdate32bitMultiArgs a;
  EXPECT_EQ(workspace_size(a), 0u);
  run(a);
  OptimizerUpdate8bitBlockwiseMultiArgs b;
  run(b);
}

TEST(OptimizerUpdate32bitMulti, BadArgumentsNameTheEntry) {
  const std::string op = "optimizer_update_32bit_multi";
  std::vector<Param32> ps = random_params32(Optimizer::adam, DType::f32, {10, 20, 30}, false);
  const Tensor g16 = random_floats({20}, DType::f16), p16 = random_floats({20}, DType::f16);
  const Tensor short_s1 = random_floats({19}, DType::f32);
  auto refs = [&] {
    std::vector<OptimizerTensors32bit> r;
    for (const Param32& q : ps) r.push_back(q.refs());
    return r;
  };
  {
    auto r = refs();
    r[1].state1 = short_s1.ref();
    expect_error([&] { run(multi_args32(Optimizer::adam, 0.0f, 0.0f, r)); }, ErrorCode::invalid_argument,
                 {op + ": params[1]: state1", "19"});
  }
  {
    auto r = refs();
    r[2].state2 = {};
    expect_error([&] { run(multi_args32(Optimizer::adam, 0.0f, 0.0f, r)); }, ErrorCode::invalid_argument,
                 {op + ": params[2]: state2"});
  }
  {
    auto r = refs();
    r[1].g = g16.ref(), r[1].p = p16.ref();
    expect_error([&] { run(multi_args32(Optimizer::adam, 0.0f, 0.0f, r)); }, ErrorCode::invalid_argument,
                 {op + ": params[1].g must have params[0].g's dtype float32", "float16"});
  }
  {
    auto r = refs();  // the trust ratio needs every entry's unorm_vec
    expect_error([&] { run(multi_args32(Optimizer::lamb, 0.5f, 0.0f, r)); }, ErrorCode::invalid_argument,
                 {op + ": params[0]: unorm_vec"});
  }
  {
    auto r = refs();
    auto a = multi_args32(Optimizer::adam, 0.0f, 0.0f, r);
    a.step = 0;
    expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op + ": params[0]: step must be at least 1"});
  }
}

TEST(OptimizerUpdate8bitBlockwiseMulti, BadArgumentsNameTheEntry) {
  const std::string op = "optimizer_update_8bit_blockwise_multi";
  const State8 s0 = random_state8(Optimizer::momentum, DType::f32, 300), s1 = random_state8(Optimizer::momentum,
                                                                                           DType::f32, 600);
  const Tensor g0 = random_floats({300}, DType::f32), g1 = random_floats({600}, DType::f32);
  const Tensor few = Tensor::empty({2}, DType::f32);
  std::vector<OptimizerTensors8bitBlockwise> refs = {
      {g0.ref(), s0.p.ref(), s0.state1.ref(), {}, s0.absmax1.ref(), {}, {}},
      {g1.ref(), s1.p.ref(), s1.state1.ref(), {}, s1.absmax1.ref(), {}, {}}};
  OptimizerUpdate8bitBlockwiseMultiArgs a;
  a.optimizer = Optimizer::momentum, a.params = refs, a.qmap1 = s0.qmap1.ref(), a.beta1 = 0.9f, a.lr = 1e-3f;
  refs[1].absmax1 = few.ref();
  expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op + ": params[1]: absmax1", "3"});
  refs[1].absmax1 = s1.absmax1.ref();
  a.optimizer = Optimizer::lars;
  expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op + ": params[0]: optimizer must be one of"});
  a.optimizer = Optimizer::momentum;
  a.qmap1 = {};
  expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op + ": params[0]: qmap1"});
}

}  // namespace
