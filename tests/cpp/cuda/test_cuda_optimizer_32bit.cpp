// optimizer_update_32bit on CUDA against the CPU backend on the same inputs:
// every rule on fp32, fp16 and bf16 parameters, plain, with weight decay and
// gnorm_scale, with skip_zeros (zeros in g), with the trust ratio
// (max_unorm, unorm_vec), on views that are not 16-byte aligned, over ragged
// sizes (a tensor larger than one wave of CTAs too) and several steps with
// fresh gradients, each step from the same values on both; an empty tensor;
// a step captured in a CUDA graph and replayed; the errors of CUDA arguments.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "cuda_test_util.h"
#include "harness/harness.h"
#include "lowbit/ops/optim.h"
#include "optim/optim_test_util.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

const Device kGpu = Device::cuda(0);

const Optimizer kAll[] = {Optimizer::adam,    Optimizer::momentum, Optimizer::rmsprop, Optimizer::lion,
                          Optimizer::adagrad, Optimizer::lamb,     Optimizer::lars,    Optimizer::ademamix};

struct Hyper {
  float beta1 = 0.9f, beta2 = 0.99f, beta3 = 0.999f, alpha = 5.0f, eps = 1e-6f, weight_decay = 0.0f, lr = 1e-2f;
  float gnorm_scale = 1.0f, max_unorm = 0.0f;
  bool skip_zeros = false;
  int64_t offset = 0;  // elements from a 16-byte boundary where the GPU views start
};

// The largest distances seen, printed after the comparisons.
struct Worst {
  int64_t p[3] = {0, 0, 0};
  int64_t states = 0;
  double unorm = 0.0;
} g_worst;

int dtype_index(DType d) { return d == DType::f32 ? 0 : d == DType::f16 ? 1 : 2; }

// got within max_ulps of want, element by element, in dtype's units.
int64_t expect_ulps(const std::vector<float>& want, const std::vector<float>& got, DType dtype, int64_t max_ulps,
                    const std::string& what) {
  EXPECT_EQ(want.size(), got.size()) << what;
  int64_t worst = 0;
  int bad = 0;
  for (size_t i = 0; i < std::min(want.size(), got.size()); ++i) {
    const bool both_nan = std::isnan(want[i]) && std::isnan(got[i]);
    const int64_t d = both_nan ? 0 : std::llabs(ordered_bits(dtype, want[i]) - ordered_bits(dtype, got[i]));
    worst = std::max(worst, d);
    if (d > max_ulps && bad++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " = " << got[i] << ", CPU " << want[i] << " (" << d
                    << " ulps apart, at most " << max_ulps << ")";
    }
  }
  return worst;
}

// Fresh states the rule can hold: second moments and sums of squares >= 0.
Tensor random_state(Optimizer o, int64_t n, bool squares) {
  Tensor t = random_floats({n}, DType::f32, 0.1f);
  if (squares || o == Optimizer::rmsprop || o == Optimizer::adagrad) {
    for (int64_t i = 0; i < n; ++i) t.ptr<float>()[i] = std::fabs(t.ptr<float>()[i]);
  }
  return t;
}

void run_on_gpu(const OptimizerUpdate32bitArgs& a, Stream stream = {}) {
  const size_t bytes = workspace_size(a);
  const Tensor ws = bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, kGpu, stream) : Tensor();
  run(a, ws.data(), stream);
}

OptimizerUpdate32bitArgs make_args(Optimizer o, const Hyper& h, int64_t step, const TensorRef& g, const TensorRef& p,
                                   const TensorRef& s1, const TensorRef& s2, const TensorRef& unorm) {
  OptimizerUpdate32bitArgs a;
  a.optimizer = o;
  a.g = g, a.p = p, a.state1 = s1, a.state2 = s2, a.unorm_vec = unorm;
  a.beta1 = h.beta1, a.beta2 = h.beta2, a.beta3 = h.beta3, a.alpha = h.alpha;
  a.eps = h.eps, a.weight_decay = h.weight_decay, a.lr = h.lr, a.gnorm_scale = h.gnorm_scale;
  a.max_unorm = h.max_unorm, a.step = step, a.skip_zeros = h.skip_zeros;
  return a;
}

void run_case(Optimizer o, DType dtype, const Hyper& h, int64_t n, int steps) {
  const std::string what = std::string(optimizer_name(o)) + " " + std::string(dtype_name(dtype)) +
                           " n=" + std::to_string(n) + " wd=" + std::to_string(h.weight_decay) +
                           " gnorm_scale=" + std::to_string(h.gnorm_scale) +
                           " max_unorm=" + std::to_string(h.max_unorm) + (h.skip_zeros ? " skip_zeros" : "") +
                           " offset=" + std::to_string(h.offset);
  SCOPED_TRACE(what);
  const bool two = optimizer_has_state2(o);
  const bool trust = h.max_unorm > 0;
  // The CPU's tensors; the GPU's start each step from their values.
  Tensor p = random_floats({n}, dtype);
  Tensor s1 = random_state(o, o == Optimizer::ademamix ? 2 * n : n, false);
  Tensor s2 = two ? random_state(o, n, true) : Tensor();
  Tensor unorm = host_tensor({-1.0f});
  for (int t = 1; t <= steps; ++t) {
    const std::string at = " after step " + std::to_string(t);
    Tensor g = random_floats({n}, dtype);
    if (h.skip_zeros) {
      const size_t bytes = static_cast<size_t>(dtype_bits(dtype) / 8);  // +0.0 is all zero bits in every dtype
      for (int64_t i = 0; i < n; i += 3) std::memset(static_cast<char*>(g.data()) + i * bytes, 0, bytes);
    }
    // h.offset elements past a 16-byte boundary.
    const int64_t skip_p = h.offset * dtype_bits(dtype) / 8, skip_s = h.offset * 4;
    const OffsetCopy dg = gpu_copy_at(g, skip_p), dp = gpu_copy_at(p, skip_p), ds1 = gpu_copy_at(s1, skip_s);
    const OffsetCopy ds2 = two ? gpu_copy_at(s2, skip_s) : OffsetCopy{};
    const Tensor dunorm = unorm.to(kGpu);
    run(make_args(o, h, t, g.ref(), p.ref(), s1.ref(), two ? s2.ref() : TensorRef{},
                  trust ? unorm.ref() : TensorRef{}));
    run_on_gpu(
        make_args(o, h, t, dg.ref, dp.ref, ds1.ref, two ? ds2.ref : TensorRef{}, trust ? dunorm.ref() : TensorRef{}));
    synchronize(Stream{});
    const int64_t wp = expect_ulps(to_floats(p.ref()), to_floats(dp.ref), dtype, dtype == DType::f32 ? 4 : 1, "p" + at);
    int64_t ws = expect_ulps(to_floats(s1.ref()), to_floats(ds1.ref), DType::f32, 4, "state1" + at);
    if (two) ws = std::max(ws, expect_ulps(to_floats(s2.ref()), to_floats(ds2.ref), DType::f32, 4, "state2" + at));
    g_worst.p[dtype_index(dtype)] = std::max(g_worst.p[dtype_index(dtype)], wp);
    g_worst.states = std::max(g_worst.states, ws);
    if (trust) {
      const float want = to_floats(unorm.ref())[0], got = to_floats(dunorm.ref())[0];
      // Relative to |want| + 1: lion's sum is signed and may cancel.
      const double rel = std::fabs(static_cast<double>(got) - want) / (std::fabs(double{want}) + 1.0);
      g_worst.unorm = std::max(g_worst.unorm, rel);
      EXPECT_LE(rel, 1e-6) << "unorm_vec" << at << ": " << got << ", CPU " << want;
    }
  }
}

void print_worst();

const int64_t kSizes[] = {1, 7, 1037, 70001, 262147};

TEST(CudaOptimizer32bit, EveryRuleAndDtypeMatchesCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  int k = 0;
  for (Optimizer o : kAll) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      Hyper plain;
      run_case(o, dtype, plain, kSizes[k++ % 5], 3);
      Hyper decay;
      decay.weight_decay = 0.05f;
      decay.gnorm_scale = 0.5f;
      run_case(o, dtype, decay, kSizes[k++ % 5], 3);
      Hyper zeros;
      zeros.skip_zeros = true;
      zeros.weight_decay = 0.01f;
      run_case(o, dtype, zeros, kSizes[k++ % 5], 3);
      Hyper clipped;
      clipped.max_unorm = 0.01f;  // small: the update is scaled down
      run_case(o, dtype, clipped, kSizes[k++ % 5], 3);
      Hyper misaligned = decay;
      misaligned.offset = 1;
      misaligned.max_unorm = 1.0f;
      run_case(o, dtype, misaligned, kSizes[k++ % 5] + 2, 2);
    }
  }
  print_worst();
}

TEST(CudaOptimizer32bit, LargerThanOneWave) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  // 5M elements: more tiles than CTAs in both kernels (their grid-stride loops).
  Hyper h;
  h.max_unorm = 0.01f;
  run_case(Optimizer::lamb, DType::f32, h, 5000011, 2);
  run_case(Optimizer::lars, DType::bf16, h, 5000011, 2);
  Hyper plain;
  run_case(Optimizer::ademamix, DType::f16, plain, 5000011, 2);
  print_worst();
}

TEST(CudaOptimizer32bit, EmptyTensorWritesAZeroNorm) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const Tensor g = Tensor::empty({0}, DType::f32, kGpu), p = Tensor::empty({0}, DType::f32, kGpu);
  const Tensor s1 = Tensor::empty({0}, DType::f32, kGpu), s2 = Tensor::empty({0}, DType::f32, kGpu);
  const Tensor unorm = host_tensor({123.0f}).to(kGpu);
  Hyper h;
  h.max_unorm = 1.0f;
  run_on_gpu(make_args(Optimizer::lamb, h, 1, g.ref(), p.ref(), s1.ref(), s2.ref(), unorm.ref()));
  h.max_unorm = 0.0f;
  run_on_gpu(make_args(Optimizer::adam, h, 1, g.ref(), p.ref(), s1.ref(), s2.ref(), {}));
  synchronize(Stream{});
  EXPECT_EQ(to_floats(unorm.ref())[0], 0.0f);
}

#if defined(LOWBIT_WITH_CUDA)
std::vector<unsigned char> host_bytes(const TensorRef& t) {
  const Tensor h = Tensor::copy_of(t, Device::cpu());
  const auto* b = h.ptr<const unsigned char>();
  return std::vector<unsigned char>(b, b + h.nbytes());
}
#endif

TEST(CudaOptimizer32bit, CapturedStepReplaysAsEager) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  // lamb: both kernels and the workspace (taken from the stream-ordered
  // allocator inside the capture, as the Python and C calls take it).
  const int64_t n = 100003;
  const Optimizer o = Optimizer::lamb;
  Hyper h;
  h.max_unorm = 0.01f;
  h.weight_decay = 0.01f;
  const Tensor p0 = random_floats({n}, DType::bf16), s10 = random_state(o, n, false), s20 = random_state(o, n, true);
  const Tensor g1 = random_floats({n}, DType::bf16), g2 = random_floats({n}, DType::bf16);
  const Tensor g = Tensor::empty({n}, DType::bf16, kGpu), p = Tensor::empty({n}, DType::bf16, kGpu);
  const Tensor s1 = Tensor::empty({n}, DType::f32, kGpu), s2 = Tensor::empty({n}, DType::f32, kGpu);
  const Tensor unorm = Tensor::empty({1}, DType::f32, kGpu);
  auto reset = [&](const Tensor& grad) {
    copy(g.ref(), grad.ref());
    copy(p.ref(), p0.ref());
    copy(s1.ref(), s10.ref());
    copy(s2.ref(), s20.ref());
    ASSERT_EQ(cudaMemset(unorm.data(), 0xff, 4), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  const OptimizerUpdate32bitArgs a = make_args(o, h, 3, g.ref(), p.ref(), s1.ref(), s2.ref(), unorm.ref());
  auto outputs = [&] {
    return std::vector<std::vector<unsigned char>>{host_bytes(p.ref()), host_bytes(s1.ref()), host_bytes(s2.ref()),
                                                   host_bytes(unorm.ref())};
  };
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  reset(g1);
  run_on_gpu(a, Stream{s});  // warm-up: kernels loaded, caches filled
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  bool threw = false;
  try {
    run_on_gpu(a, Stream{s});
  } catch (const Error& e) {
    threw = true;
    ADD_FAILURE() << "the op failed under capture: " << e.what();
  }
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  ASSERT_FALSE(threw);
  ASSERT_EQ(end, cudaSuccess) << "capture broken: " << cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  std::vector<std::vector<std::vector<unsigned char>>> replayed, eager;
  for (const Tensor* grad : {&g1, &g2}) {
    reset(*grad);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    replayed.push_back(outputs());
    reset(*grad);
    run_on_gpu(a, Stream{s});
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    eager.push_back(outputs());
  }
  for (size_t r = 0; r < 2; ++r) {
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_TRUE(replayed[r][i] == eager[r][i]) << "output " << i << " of replay " << r << " differs from eager";
    }
  }
  EXPECT_TRUE(replayed[0][0] != replayed[1][0]) << "the gradient did not change p: a stale replay would pass";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
#endif
}

TEST(CudaOptimizer32bit, BadCudaArgumentsSayWhatIsWrong) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const int64_t n = 10;
  const Tensor g = Tensor::empty({n}, DType::f32, kGpu), p = Tensor::empty({n}, DType::f32, kGpu);
  const Tensor s1 = Tensor::empty({n}, DType::f32, kGpu), s2 = Tensor::empty({n}, DType::f32, kGpu);
  const Tensor p16 = Tensor::empty({n}, DType::f16, kGpu), gi = Tensor::empty({n}, DType::i32, kGpu);
  const Tensor s1_host = Tensor::empty({n}, DType::f32), unorm = Tensor::empty({1}, DType::f32, kGpu);
  const Hyper h;
  const std::string op = "optimizer_update_32bit";
  auto args = [&] { return make_args(Optimizer::adam, h, 1, g.ref(), p.ref(), s1.ref(), s2.ref(), {}); };
  {
    auto a = args();
    a.state1 = s1_host.ref();
    expect_error([&] { run_on_gpu(a); }, ErrorCode::device_mismatch, {op, "state1 must be on cuda:0", "got cpu"});
  }
  {
    auto a = args();
    a.p = p16.ref();
    expect_error([&] { run_on_gpu(a); }, ErrorCode::invalid_argument, {op, "p must have g's dtype float32", "float16"});
  }
  {
    auto a = args();
    a.g = gi.ref();
    expect_error([&] { run_on_gpu(a); }, ErrorCode::unsupported_dtype, {op, "g dtype must be one of", "int32"});
  }
  {
    auto a = args();
    a.state2 = {};
    expect_error([&] { run_on_gpu(a); }, ErrorCode::invalid_argument, {op, "state2"});
  }
  {
    // The trust ratio's partial sums live in the workspace: run without one is refused.
    auto a = args();
    a.optimizer = Optimizer::lamb;
    a.max_unorm = 1.0f;
    a.unorm_vec = unorm.ref();
    ASSERT_GT(workspace_size(a), 0u);
    expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op, "workspace of", "bytes is required"});
  }
}

void print_worst() {
  std::printf(
      "[ optim32 ] CUDA vs CPU, largest distance: p f32 %lld ulps, f16 %lld, bf16 %lld; states %lld ulps; "
      "unorm_vec relative %.3g\n",
      static_cast<long long>(g_worst.p[0]), static_cast<long long>(g_worst.p[1]), static_cast<long long>(g_worst.p[2]),
      static_cast<long long>(g_worst.states), g_worst.unorm);
}

}  // namespace
