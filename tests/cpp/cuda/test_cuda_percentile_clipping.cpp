// percentile_clipping on CUDA against the CPU backend on the same gradients:
// fp32, fp16 and bf16, empty, ragged, off 16-byte alignment, larger than one
// wave of CTAs; the slots over several steps (step 1 seeding all of them);
// the same bits in every run; a step captured in a CUDA graph and replayed;
// the errors of CUDA arguments.
#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "harness/harness.h"
#include "lowbit/ops/optim.h"
#include "optim/optim_test_util.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

const Device kGpu = Device::cuda(0);
constexpr int64_t kHistory = PercentileClippingArgs::kHistory;

PercentileClippingArgs make_args(const TensorRef& g, const TensorRef& vec, int64_t step) {
  PercentileClippingArgs a;
  a.grad = g;
  a.gnorm_vec = vec;
  a.step = step;
  return a;
}

void run_on_gpu(const PercentileClippingArgs& a, Stream stream = {}) {
  const size_t bytes = workspace_size(a);
  const Tensor ws = bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, kGpu, stream) : Tensor();
  run(a, ws.data(), stream);
}

std::vector<float> initial_history() {
  std::vector<float> v(kHistory);
  for (int64_t i = 0; i < kHistory; ++i) v[i] = 0.25f * static_cast<float>(i + 1);
  return v;
}

TEST(CudaPercentileClipping, MatchesCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{2049}, int64_t{3000001}}) {
      for (int64_t offset : {int64_t{0}, int64_t{3}}) {
        Tensor cpu_vec = host_tensor(initial_history());
        const OffsetCopy gpu_vec = gpu_copy_at(cpu_vec, 0);
        for (int64_t step : {1, 2, 100, 101}) {
          const Tensor g = random_floats({n}, dtype, 2.0f);
          const OffsetCopy dg = gpu_copy_at(g, offset * dtype_bits(dtype) / 8);
          PercentileClippingArgs c = make_args(g.ref(), cpu_vec.ref(), step);
          run(c);
          run_on_gpu(make_args(dg.ref, gpu_vec.ref, step));
          const std::vector<float> want = to_floats(cpu_vec.ref()), got = to_floats(gpu_vec.ref);
          for (int64_t i = 0; i < kHistory; ++i) {
            // float64 sums in another order: the same fp32 but for a tie's last bit.
            ASSERT_NEAR(got[i], want[i], std::fabs(want[i]) * 1.2e-7)
                << dtype_name(dtype) << " n=" << n << " offset=" << offset << " step=" << step << " slot " << i;
          }
          copy(gpu_vec.ref, cpu_vec.ref());  // the next step starts from the same bits
        }
      }
    }
  }
}

TEST(CudaPercentileClipping, SameBitsEveryRunAndUnderGraphReplay) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  const int64_t n = 1000003;
  const Tensor g = Tensor::copy_of(random_floats({n}, DType::bf16).ref(), kGpu);
  const Tensor vec = Tensor::empty({kHistory}, DType::f32, kGpu);
  const PercentileClippingArgs a = make_args(g.ref(), vec.ref(), 1);
  cudaStream_t s = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto once = [&](const std::function<void()>& go) {
    LOWBIT_ASSERT_CUDA(cudaMemsetAsync(vec.data(), 0, kHistory * sizeof(float), s));
    go();
    LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(s));
  };
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 3; ++r) {
    once([&] { run_on_gpu(a, Stream{s}); });
    runs.push_back(to_floats(vec.ref()));
  }
  cudaGraph_t graph = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  run_on_gpu(a, Stream{s});
  LOWBIT_ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  LOWBIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  once([&] { ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess); });
  runs.push_back(to_floats(vec.ref()));
  for (size_t r = 1; r < runs.size(); ++r) {
    for (int64_t i = 0; i < kHistory; ++i) {
      ASSERT_EQ(core::float_bits(runs[r][i]), core::float_bits(runs[0][i])) << "run " << r << " slot " << i;
    }
  }
  EXPECT_GT(runs[0][0], 0.0f);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
#endif
}

TEST(CudaPercentileClipping, BadCudaArgumentsSayWhatIsWrong) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const Tensor g = Tensor::empty({10}, DType::f32, kGpu), vec_host = Tensor::empty({kHistory}, DType::f32);
  expect_error([&] { run_on_gpu(make_args(g.ref(), vec_host.ref(), 1)); }, ErrorCode::device_mismatch,
               {"percentile_clipping", "gnorm_vec must be on cuda:0", "got cpu"});
}

}  // namespace
