// histogram_scatter_add_2d on CUDA against the CPU: random values within fp32
// rounding of the CPU's ordered sums (atomics add in no fixed order),
// integer values exactly, indices out of range skipped, a call captured in a
// CUDA graph and replayed.
#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "harness/harness.h"
#include "lowbit/ops/quant.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

const Device kGpu = Device::cuda(0);

struct Case {
  Tensor hist, i1, i2, src;
};

// n random cells of a rows x cols histogram; integer-valued sources when `integers`.
Case random_case(int64_t rows, int64_t cols, int64_t n, bool integers) {
  Case c;
  c.hist = random_floats({rows, cols}, DType::f32);
  if (integers) {
    for (int64_t i = 0; i < rows * cols; ++i) c.hist.ptr<float>()[i] = std::round(c.hist.ptr<float>()[i] * 8.0f);
  }
  c.i1 = Tensor::empty({n}, DType::i32);
  c.i2 = Tensor::empty({n}, DType::i32);
  c.src = random_floats({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    c.i1.ptr<int32_t>()[i] = static_cast<int32_t>(rng()() % static_cast<uint64_t>(rows));
    c.i2.ptr<int32_t>()[i] = static_cast<int32_t>(rng()() % static_cast<uint64_t>(cols));
    if (integers) c.src.ptr<float>()[i] = std::round(c.src.ptr<float>()[i] * 8.0f);
  }
  return c;
}

// The CPU's histogram and the GPU's, from the same inputs.
std::pair<std::vector<float>, std::vector<float>> both(const Case& c, Stream stream = {}) {
  const Tensor h = c.hist.to(kGpu), i1 = c.i1.to(kGpu), i2 = c.i2.to(kGpu), src = c.src.to(kGpu);
  run(HistogramScatterAdd2dArgs{h.ref(), i1.ref(), i2.ref(), src.ref()}, nullptr, stream);
  const Tensor cpu = Tensor::copy_of(c.hist.ref(), Device::cpu());
  run(HistogramScatterAdd2dArgs{cpu.ref(), c.i1.ref(), c.i2.ref(), c.src.ref()});
  return {to_floats(cpu.ref()), to_floats(h.ref())};
}

TEST(CudaHistogramScatterAdd2d, MatchesCpuWithinRounding) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  for (const auto& [rows, cols, n] : {std::tuple{256, 256, 100003}, std::tuple{3, 700, 5000}, std::tuple{1, 1, 4097}}) {
    const Case c = random_case(rows, cols, n, false);
    const auto [want, got] = both(c);
    // Two orders of a sum of k terms differ by at most 2 k 2^-24 times the sum of their magnitudes.
    std::vector<double> abs_sum(want.size(), 0.0), terms(want.size(), 1.0);
    for (int64_t i = 0; i < n; ++i) {
      const size_t cell = static_cast<size_t>(c.i1.ptr<int32_t>()[i]) * cols + c.i2.ptr<int32_t>()[i];
      abs_sum[cell] += std::fabs(c.src.ptr<float>()[i]);
      terms[cell] += 1.0;
    }
    for (size_t k = 0; k < want.size(); ++k) {
      const double tol = 2.0 * terms[k] * std::ldexp(abs_sum[k] + std::fabs(c.hist.ptr<float>()[k]), -24);
      ASSERT_NEAR(got[k], want[k], tol) << "cell " << k << " of " << rows << "x" << cols;
    }
  }
}

TEST(CudaHistogramScatterAdd2d, IntegerSumsAreExact) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const Case c = random_case(64, 96, 200001, true);
  const auto [want, got] = both(c);
  EXPECT_EQ(got, want);
}

TEST(CudaHistogramScatterAdd2d, IndicesOutOfRangeAreSkipped) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  Case c = random_case(4, 3, 9, true);
  const int32_t bad1[] = {-1, 4, 1 << 30}, bad2[] = {3, -7, 1 << 30};
  for (int i = 0; i < 3; ++i) c.i1.ptr<int32_t>()[i] = bad1[i];
  for (int i = 3; i < 6; ++i) c.i2.ptr<int32_t>()[i] = bad2[i - 3];
  const Tensor h = c.hist.to(kGpu), i1 = c.i1.to(kGpu), i2 = c.i2.to(kGpu), src = c.src.to(kGpu);
  run(HistogramScatterAdd2dArgs{h.ref(), i1.ref(), i2.ref(), src.ref()});
  std::vector<float> want = to_floats(c.hist.ref());
  for (int64_t i = 6; i < 9; ++i) want[c.i1.ptr<int32_t>()[i] * 3 + c.i2.ptr<int32_t>()[i]] += c.src.ptr<float>()[i];
  EXPECT_EQ(to_floats(h.ref()), want);
}

TEST(CudaHistogramScatterAdd2d, CapturedCallReplays) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  const Case c = random_case(32, 32, 30001, true);
  const Tensor h = c.hist.to(kGpu), i1 = c.i1.to(kGpu), i2 = c.i2.to(kGpu), src = c.src.to(kGpu);
  const HistogramScatterAdd2dArgs a{h.ref(), i1.ref(), i2.ref(), src.ref()};
  synchronize(Stream{});  // the copies ran on the legacy stream, which the non-blocking one does not wait for
  cudaStream_t s = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  run(a, nullptr, Stream{s});  // warm-up: the kernel loaded
  LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(s));
  cudaGraph_t graph = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  run(a, nullptr, Stream{s});
  LOWBIT_ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  LOWBIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  LOWBIT_ASSERT_CUDA(cudaGraphLaunch(exec, s));
  LOWBIT_ASSERT_CUDA(cudaGraphLaunch(exec, s));
  LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(s));
  // Three adds in all (the warm-up and two replays; capturing runs nothing): integers, exact.
  const Tensor cpu = Tensor::copy_of(c.hist.ref(), Device::cpu());
  for (int k = 0; k < 3; ++k) run(HistogramScatterAdd2dArgs{cpu.ref(), c.i1.ref(), c.i2.ref(), c.src.ref()});
  EXPECT_EQ(to_floats(h.ref()), to_floats(cpu.ref()));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
#endif
}

}  // namespace
