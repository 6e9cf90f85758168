// The multi-tensor optimizer updates on CUDA: each parameter of a list gets
// the bytes the single-tensor CUDA op gives it (every rule, with and without
// the trust ratio), 200 tensors of mixed sizes, a list longer than one
// launch's table, a step captured in a CUDA graph and replayed, and the time
// of 200 mixed tensors against one tensor of their total size.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <numeric>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "harness/harness.h"
#include "lowbit/ops/optim.h"
#include "optim/multi_test_util.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

const Device kGpu = Device::cuda(0);

const Optimizer kAll[] = {Optimizer::adam,    Optimizer::momentum, Optimizer::rmsprop, Optimizer::lion,
                          Optimizer::adagrad, Optimizer::lamb,     Optimizer::lars,    Optimizer::ademamix};

// n sizes from 1 to about 2^20, log-uniform, ragged.
std::vector<int64_t> mixed_sizes(int n, int64_t largest = int64_t{1} << 20) {
  std::vector<int64_t> sizes;
  std::uniform_real_distribution<double> e(0.0, std::log2(static_cast<double>(largest)));
  for (int i = 0; i < n; ++i) sizes.push_back(static_cast<int64_t>(std::exp2(e(rng()))) + i % 3);
  return sizes;
}

TEST(CudaOptimizerMulti, EachParameterGetsTheSingleOpsBytes32bit) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  for (Optimizer o : kAll) {
    for (DType dtype : {DType::f32, DType::bf16}) expect_multi_equals_single32(o, dtype, kMixedSizes, 0.0f, kGpu);
    expect_multi_equals_single32(o, DType::f16, kMixedSizes, 0.01f, kGpu);
  }
}

TEST(CudaOptimizerMulti, EachParameterGetsTheSingleOpsBytes8bit) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  for (Optimizer o : kRules8) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) expect_multi_equals_single8(o, dtype, kMixedSizes, kGpu);
  }
}

TEST(CudaOptimizerMulti, TwoHundredMixedTensorsAndMoreThanOneTable) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const std::vector<int64_t> mixed = mixed_sizes(200);
  expect_multi_equals_single32(Optimizer::lamb, DType::bf16, mixed, 0.01f, kGpu);
  expect_multi_equals_single32(Optimizer::adam, DType::f32, mixed, 0.0f, kGpu);
  expect_multi_equals_single8(Optimizer::adam, DType::bf16, mixed, kGpu);
  // 900 small tensors: more entries than one kernel parameter table holds (about 400).
  const std::vector<int64_t> many = mixed_sizes(900, 5000);
  expect_multi_equals_single32(Optimizer::lars, DType::f32, many, 0.01f, kGpu);
  expect_multi_equals_single32(Optimizer::ademamix, DType::f16, many, 0.0f, kGpu);
  expect_multi_equals_single8(Optimizer::momentum, DType::f32, many, kGpu);
}

#if defined(LOWBIT_WITH_CUDA)
// The bytes of every output of a list.
std::vector<std::vector<unsigned char>> snapshot(const std::vector<Param32>& ps) {
  std::vector<std::vector<unsigned char>> out;
  for (const Param32& q : ps) {
    for (const Tensor* t : {&q.p, &q.s1, &q.s2, &q.unorm}) {
      if (!t->defined()) continue;
      const Tensor h = Tensor::copy_of(t->ref(), Device::cpu());
      out.emplace_back(h.ptr<const unsigned char>(), h.ptr<const unsigned char>() + h.nbytes());
    }
  }
  return out;
}

// Milliseconds per call of f on stream s (CUDA events, after a warm-up).
template <class F>
float time_ms(F f, cudaStream_t s, int reps) {
  f();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  for (int i = 0; i < reps; ++i) f();
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / static_cast<float>(reps);
}
#endif

TEST(CudaOptimizerMulti, CapturedStepReplaysAsEager) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  // lamb: both kernels and the per-parameter partials in the workspace,
  // taken from the stream-ordered allocator inside the capture.
  const std::vector<Param32> host = random_params32(Optimizer::lamb, DType::bf16, mixed_sizes(50, 1 << 17), true);
  const std::vector<Param32> dev = copy_params(host, kGpu);
  std::vector<OptimizerTensors32bit> refs;
  for (const Param32& q : dev) refs.push_back(q.refs());
  const OptimizerUpdate32bitMultiArgs a = multi_args32(Optimizer::lamb, 0.01f, 0.01f, refs);
  auto reset = [&] {
    for (size_t t = 0; t < host.size(); ++t) {
      copy(dev[t].p.ref(), host[t].p.ref());
      copy(dev[t].s1.ref(), host[t].s1.ref());
      copy(dev[t].s2.ref(), host[t].s2.ref());
    }
    synchronize(Stream{});
  };
  cudaStream_t s = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  run_with_scratch(a, kGpu, Stream{s});  // warm-up
  LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(s));
  cudaGraph_t graph = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  run_with_scratch(a, kGpu, Stream{s});
  LOWBIT_ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  LOWBIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  reset();
  LOWBIT_ASSERT_CUDA(cudaGraphLaunch(exec, s));
  LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(s));
  const auto replayed = snapshot(dev);
  reset();
  run_with_scratch(a, kGpu, Stream{s});
  LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(s));
  const auto eager = snapshot(dev);
  ASSERT_EQ(replayed.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(replayed[i] == eager[i]) << "output " << i << " differs";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
#endif
}

TEST(CudaOptimizerMulti, MixedListRunsAsFastAsOneTensor) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  // 200 tensors of mixed sizes (about 64M elements in all) against one tensor
  // of the same total: the list's one launch should cost about the same.
  std::vector<int64_t> sizes = mixed_sizes(200, int64_t{1} << 22);
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  cudaStream_t s = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float ratio[2] = {0, 0};
  for (int bits : {32, 8}) {
    std::vector<Tensor> keep;
    auto dev = [&](std::vector<int64_t> shape, DType d) {
      keep.push_back(Tensor::empty(std::move(shape), d, kGpu));
      EXPECT_EQ(cudaMemset(keep.back().data(), 0, keep.back().nbytes()), cudaSuccess);
      return keep.back().ref();
    };
    const Tensor qmap = host_tensor(create_dynamic_map(true)).to(kGpu);
    const Tensor qmap2 = host_tensor(create_dynamic_map(false)).to(kGpu);
    // The update of the listed tensors, to time (args view a list: each closure keeps its own copy).
    auto list_call = [&](const std::vector<int64_t>& ns) -> std::function<void()> {
      if (bits == 32) {
        std::vector<OptimizerTensors32bit> refs;
        for (int64_t n : ns) refs.push_back({dev({n}, DType::bf16), dev({n}, DType::bf16), dev({n}, DType::f32),
                                             dev({n}, DType::f32), {}, {}});
        return [refs, s] { run(multi_args32(Optimizer::adam, 0.0f, 0.0f, refs), nullptr, Stream{s}); };
      }
      std::vector<OptimizerTensors8bitBlockwise> refs;
      for (int64_t n : ns) {
        const int64_t b = blocks8(n);
        refs.push_back({dev({n}, DType::bf16), dev({n}, DType::bf16), dev({n}, DType::u8), dev({n}, DType::u8),
                        dev({b}, DType::f32), dev({b}, DType::f32), {}});
      }
      return [refs, s, &qmap, &qmap2] {
        OptimizerUpdate8bitBlockwiseMultiArgs a;
        a.optimizer = Optimizer::adam, a.params = refs, a.qmap1 = qmap.ref(), a.qmap2 = qmap2.ref();
        a.beta1 = 0.9f, a.beta2 = 0.99f, a.eps = 1e-8f, a.lr = 1e-3f;
        run(a, nullptr, Stream{s});
      };
    };
    const std::function<void()> one_call = list_call({total}), many_call = list_call(sizes);
    LOWBIT_ASSERT_CUDA(cudaDeviceSynchronize());  // the memsets, on the legacy stream
    // The least of 5 interleaved rounds: other processes' kernels (ctest -j) only ever add time.
    float one = 1e30f, list = 1e30f;
    for (int round = 0; round < 5; ++round) {
      one = std::min(one, time_ms(one_call, s, 5));
      list = std::min(list, time_ms(many_call, s, 5));
    }
    ratio[bits == 8] = list / one;
    std::printf("[ multi ] %d-bit adam bf16, %lld elements: one tensor %.3f ms, 200 mixed tensors %.3f ms (%.3fx)\n",
                bits, static_cast<long long>(total), one, list, list / one);
  }
  // Loose enough for other tests' kernels beside it (ctest -j) and for
  // compute-sanitizer; a launch per tensor would cost several times as much.
  EXPECT_LE(ratio[0], 1.3f);
  EXPECT_LE(ratio[1], 1.3f);
  cudaStreamDestroy(s);
#endif
}

}  // namespace
