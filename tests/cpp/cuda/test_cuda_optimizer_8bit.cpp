// optimizer_update_8bit and tensor-wise quantization on CUDA against the CPU
// backend on the same inputs: codes, new_max / absmax and p the same bits
// (the same arithmetic; the norms' float64 sums differ only in order). Every
// rule on fp32, fp16 and bf16, with weight decay, gnorm_scale and the trust
// ratio, on views off alignment, over ragged sizes (more tiles than one wave
// too) and several steps with fresh gradients; steps captured in a CUDA graph
// and replayed. (quantize_tensorwise and the other tensor-wise ops also run
// in tests/cpp/quant/test_tensorwise.cpp on every backend.)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "harness/harness.h"
#include "lowbit/ops/optim.h"
#include "lowbit/ops/quant.h"
#include "optim/optim_test_util.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

const Device kGpu = Device::cuda(0);
const Optimizer kRules[] = {Optimizer::adam,    Optimizer::lamb,    Optimizer::momentum,
                            Optimizer::lars,    Optimizer::rmsprop, Optimizer::lion};

int64_t g_worst_p = 0;  // the largest distance of p seen, in its dtype's units

bool two_states(Optimizer o) { return o == Optimizer::adam || o == Optimizer::lamb; }
bool has_unorm(Optimizer o) { return o != Optimizer::rmsprop && o != Optimizer::lion; }

struct Hyper {
  float beta1 = 0.9f, beta2 = 0.995f, eps = 1e-6f, weight_decay = 0.0f, lr = 1e-2f, gnorm_scale = 1.0f;
  float max_unorm = 0.0f;
};

// One parameter's tensors (host or device).
struct Params8 {
  Tensor buffers[11];  // owners where the tensors sit off alignment
  TensorRef p, s1, s2, q1, q2, m1, m2, nm1, nm2, unorm;
};

OptimizerUpdate8bitArgs make_args(Optimizer o, const Hyper& h, int64_t step, const TensorRef& g, const Params8& x) {
  OptimizerUpdate8bitArgs a;
  a.optimizer = o;
  a.g = g, a.p = x.p, a.state1 = x.s1, a.state2 = x.s2, a.qmap1 = x.q1, a.qmap2 = x.q2;
  a.max1 = x.m1, a.max2 = x.m2, a.new_max1 = x.nm1, a.new_max2 = x.nm2, a.unorm_vec = x.unorm;
  a.beta1 = h.beta1, a.beta2 = h.beta2, a.eps = h.eps, a.weight_decay = h.weight_decay, a.lr = h.lr;
  a.gnorm_scale = h.gnorm_scale, a.max_unorm = h.max_unorm, a.step = step;
  return a;
}

void run_on_gpu(const OptimizerUpdate8bitArgs& a, Stream stream = {}) {
  const size_t bytes = workspace_size(a);
  const Tensor ws = bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, kGpu, stream) : Tensor();
  run(a, ws.data(), stream);
}

void run_case(Optimizer o, DType dtype, const Hyper& h, int64_t n, int steps, int64_t offset = 0) {
  SCOPED_TRACE(std::string(optimizer_name(o)) + " " + std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
               " wd=" + std::to_string(h.weight_decay) + " max_unorm=" + std::to_string(h.max_unorm) +
               " offset=" + std::to_string(offset));
  const bool two = two_states(o), norms = has_unorm(o);
  // The CPU's tensors; the GPU's start each step from their values.
  Tensor p = random_floats({n}, dtype), s1 = random_bytes({n}, DType::u8), s2 = random_bytes({n}, DType::u8);
  if (o == Optimizer::rmsprop) {
    for (int64_t i = 0; i < n; ++i) s1.ptr<uint8_t>()[i] = static_cast<uint8_t>(127 + s1.ptr<uint8_t>()[i] % 129);
  }
  const Tensor q1 = map_tensor(create_dynamic_map(true)), q2 = map_tensor(create_dynamic_map(false));
  Tensor m1 = host_tensor({0.3f}), m2 = host_tensor({0.02f}), nm1 = host_tensor({0.0f}), nm2 = host_tensor({0.0f});
  const Tensor unorm = host_tensor({0.0f});
  const int64_t skip_p = offset * dtype_bits(dtype) / 8;
  for (int t = 1; t <= steps; ++t) {
    const std::string at = " after step " + std::to_string(t);
    const Tensor g = random_floats({n}, dtype);
    Params8 cpu{{}, p.ref(), s1.ref(), two ? s2.ref() : TensorRef{}, q1.ref(), two ? q2.ref() : TensorRef{},
                m1.ref(), two ? m2.ref() : TensorRef{}, nm1.ref(), two ? nm2.ref() : TensorRef{},
                norms ? unorm.ref() : TensorRef{}};
    const OffsetCopy dg = gpu_copy_at(g, skip_p), dp = gpu_copy_at(p, skip_p), ds1 = gpu_copy_at(s1, offset),
                     ds2 = gpu_copy_at(s2, offset), dq1 = gpu_copy_at(q1, 0), dq2 = gpu_copy_at(q2, 0),
                     dm1 = gpu_copy_at(m1, 0), dm2 = gpu_copy_at(m2, 0), dnm1 = gpu_copy_at(nm1, 4),
                     dnm2 = gpu_copy_at(nm2, 4), du = gpu_copy_at(unorm, 0);
    Params8 gpu{{}, dp.ref, ds1.ref, two ? ds2.ref : TensorRef{}, dq1.ref, two ? dq2.ref : TensorRef{},
                dm1.ref, two ? dm2.ref : TensorRef{}, dnm1.ref, two ? dnm2.ref : TensorRef{},
                norms ? du.ref : TensorRef{}};
    run(make_args(o, h, t, g.ref(), cpu));
    run_on_gpu(make_args(o, h, t, dg.ref, gpu));
    synchronize(Stream{});
    expect_same_bits(s1.ref(), ds1.ref, "state1" + at);
    expect_same_bits(nm1.ref(), dnm1.ref, "new_max1" + at);
    if (two) {
      expect_same_bits(s2.ref(), ds2.ref, "state2" + at);
      expect_same_bits(nm2.ref(), dnm2.ref, "new_max2" + at);
    }
    const std::vector<float> want = to_floats(p.ref()), got = to_floats(dp.ref);
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const int64_t ulps = std::llabs(ordered_bits(dtype, want[i]) - ordered_bits(dtype, got[i]));
      g_worst_p = std::max(g_worst_p, ulps);
      // 1 ulp: the trust ratio's float64 norms are summed in another order.
      if (ulps > (h.max_unorm > 0.0f ? 1 : 0) && !(std::isnan(want[i]) && std::isnan(got[i])) && bad++ < 5) {
        ADD_FAILURE() << "p" << at << ": element " << i << " = " << got[i] << ", CPU " << want[i];
      }
    }
    std::swap(m1, nm1);
    std::swap(m2, nm2);
  }
}

TEST(CudaOptimizer8bit, EveryRuleAndDtypeMatchesCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const int64_t sizes[] = {1, 7, 2047, 2049, 70001, 262147};
  int k = 0;
  for (Optimizer o : kRules) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      Hyper plain;
      run_case(o, dtype, plain, sizes[k++ % 6], 3);
      Hyper decay;
      decay.weight_decay = 0.05f;
      decay.gnorm_scale = 0.5f;
      run_case(o, dtype, decay, sizes[k++ % 6], 3);
      if (has_unorm(o)) {
        Hyper trust = decay;
        trust.max_unorm = 0.001f;
        run_case(o, dtype, trust, sizes[k++ % 6], 2);
      }
      run_case(o, dtype, decay, sizes[k++ % 6] + 3, 2, 1);  // every array off alignment
    }
  }
  std::printf("[ optim8  ] CUDA vs CPU: codes and new_max bit for bit; p at most %lld ulps apart\n",
              static_cast<long long>(g_worst_p));
}

TEST(CudaOptimizer8bit, MoreTilesThanOneWave) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  Hyper h;
  h.weight_decay = 0.01f;
  run_case(Optimizer::adam, DType::f32, h, 5000011, 2);
  run_case(Optimizer::lion, DType::bf16, h, 5000011, 2);
  h.max_unorm = 0.01f;
  run_case(Optimizer::lars, DType::f16, h, 5000011, 2);
}

TEST(CudaOptimizer8bit, EmptyTensorWritesZeroMaxima) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const Tensor g = Tensor::empty({0}, DType::f32, kGpu), p = Tensor::empty({0}, DType::f32, kGpu);
  const Tensor c = Tensor::empty({0}, DType::u8, kGpu);
  const Tensor q1 = map_tensor(create_dynamic_map(true)).to(kGpu), q2 = map_tensor(create_dynamic_map(false)).to(kGpu);
  const Tensor m = host_tensor({0.5f}).to(kGpu), nm1 = host_tensor({-1.0f}).to(kGpu);
  const Tensor nm2 = host_tensor({-1.0f}).to(kGpu), u = host_tensor({-1.0f}).to(kGpu);
  const Params8 x{{}, p.ref(), c.ref(), c.ref(), q1.ref(), q2.ref(), m.ref(), m.ref(), nm1.ref(), nm2.ref(), u.ref()};
  run_on_gpu(make_args(Optimizer::adam, Hyper{}, 1, g.ref(), x));
  synchronize(Stream{});
  EXPECT_EQ(to_floats(nm1.ref())[0], 0.0f);
  EXPECT_EQ(to_floats(nm2.ref())[0], 0.0f);
  EXPECT_EQ(to_floats(u.ref())[0], 0.0f);
}

// The captured graphs replay as the eager calls: lamb with the trust ratio
// (both kernels, the workspace from the stream-ordered allocator inside the
// capture), then quantize_tensorwise.
TEST(CudaOptimizer8bit, CapturedStepReplaysAsEager) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  const int64_t n = 100003;
  const Optimizer o = Optimizer::lamb;
  Hyper h;
  h.weight_decay = 0.01f;
  h.max_unorm = 0.01f;
  const Tensor p0 = random_floats({n}, DType::bf16), s10 = random_bytes({n}, DType::u8);
  const Tensor s20 = random_bytes({n}, DType::u8), g1 = random_floats({n}, DType::bf16);
  const Tensor g2 = random_floats({n}, DType::bf16), x1 = random_floats({n}, DType::f16);
  const Tensor x2 = random_floats({n}, DType::f16);
  const Tensor g = Tensor::empty({n}, DType::bf16, kGpu), p = Tensor::empty({n}, DType::bf16, kGpu);
  const Tensor s1 = Tensor::empty({n}, DType::u8, kGpu), s2 = Tensor::empty({n}, DType::u8, kGpu);
  const Tensor q1 = map_tensor(create_dynamic_map(true)).to(kGpu), q2 = map_tensor(create_dynamic_map(false)).to(kGpu);
  const Tensor m1 = host_tensor({0.3f}).to(kGpu), m2 = host_tensor({0.02f}).to(kGpu);
  const Tensor nm1 = Tensor::empty({1}, DType::f32, kGpu), nm2 = Tensor::empty({1}, DType::f32, kGpu);
  const Tensor u = Tensor::empty({1}, DType::f32, kGpu);
  const Tensor x = Tensor::empty({n}, DType::f16, kGpu), xq = Tensor::empty({n}, DType::u8, kGpu);
  const Tensor xa = Tensor::empty({1}, DType::f32, kGpu);
  const Params8 params{{}, p.ref(), s1.ref(), s2.ref(), q1.ref(), q2.ref(), m1.ref(), m2.ref(), nm1.ref(), nm2.ref(),
                       u.ref()};
  const OptimizerUpdate8bitArgs a = make_args(o, h, 3, g.ref(), params);
  const QuantizeTensorwiseArgs qa{x.ref(), q1.ref(), xq.ref(), xa.ref()};
  auto reset = [&](const Tensor& grad) {
    copy(g.ref(), grad.ref());
    copy(p.ref(), p0.ref());
    copy(s1.ref(), s10.ref());
    copy(s2.ref(), s20.ref());
    copy(x.ref(), (&grad == &g1 ? x1 : x2).ref());  // quantize_tensorwise's input changes with it
    for (const Tensor* t : {&nm1, &nm2, &u, &xa}) ASSERT_EQ(cudaMemset(t->data(), 0xff, 4), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  auto step = [&](Stream s) {
    run_on_gpu(a, s);
    const Tensor ws = Tensor::empty({static_cast<int64_t>(workspace_size(qa))}, DType::u8, kGpu, s);
    run(qa, ws.data(), s);
  };
  auto outputs = [&] {
    std::vector<std::vector<unsigned char>> r;
    for (const Tensor* t : {&p, &s1, &s2, &nm1, &nm2, &u, &xq, &xa}) r.push_back(bytes_of(t->ref()));
    return r;
  };
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  reset(g1);
  step(Stream{s});  // warm-up: kernels loaded
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  bool threw = false;
  try {
    step(Stream{s});
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
    step(Stream{s});
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    eager.push_back(outputs());
  }
  for (size_t r = 0; r < 2; ++r) {
    for (size_t i = 0; i < replayed[r].size(); ++i) {
      EXPECT_TRUE(replayed[r][i] == eager[r][i]) << "output " << i << " of replay " << r << " differs from eager";
    }
  }
  EXPECT_TRUE(replayed[0][0] != replayed[1][0]) << "the gradient did not change p: a stale replay would pass";
  EXPECT_TRUE(replayed[0][6] != replayed[1][6]) << "the input did not change the codes: a stale replay would pass";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
#endif
}

TEST(CudaOptimizer8bit, BadCudaArgumentsSayWhatIsWrong) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const int64_t n = 300;
  const Tensor g = Tensor::empty({n}, DType::f32, kGpu), p = Tensor::empty({n}, DType::f32, kGpu);
  const Tensor c = Tensor::empty({n}, DType::u8, kGpu), q1 = map_tensor(create_dynamic_map(true)).to(kGpu);
  const Tensor m = host_tensor({0.5f}).to(kGpu), nm = Tensor::empty({1}, DType::f32, kGpu);
  const Tensor m_host = host_tensor({0.5f});
  const std::string op = "optimizer_update_8bit";
  Params8 x{{}, p.ref(), c.ref(), {}, q1.ref(), {}, m_host.ref(), {}, nm.ref(), {}, {}};
  expect_error([&] { run_on_gpu(make_args(Optimizer::momentum, Hyper{}, 1, g.ref(), x)); },
               ErrorCode::device_mismatch, {op, "max1 must be on cuda:0", "got cpu"});
  x.m1 = m.ref();
  const OptimizerUpdate8bitArgs a = make_args(Optimizer::momentum, Hyper{}, 1, g.ref(), x);
  ASSERT_GT(workspace_size(a), 0u);
  expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op, "workspace of", "bytes is required"});
}

}  // namespace
