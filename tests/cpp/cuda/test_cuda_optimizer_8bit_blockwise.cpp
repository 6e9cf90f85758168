// optimizer_update_8bit_blockwise on CUDA against the CPU backend on the same
// inputs: the 8-bit states and their absmax the same bits, p within its
// dtype's rounding (the same arithmetic: the same bits expected). Every rule
// on fp32, fp16 and bf16, plain, with weight decay and gnorm_scale, with
// skip_zeros (zeros in g) and Inf / NaN gradients, on views off alignment,
// over ragged sizes (more blocks than one wave of warps too) and several
// steps with fresh gradients; a step captured in a CUDA graph and replayed;
// the errors of CUDA arguments.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

int64_t g_worst_p = 0;  // the largest distance of p seen, in its dtype's units

// The tensors of one step on the GPU, `offset` elements off alignment (codes: bytes).
struct GpuState {
  OffsetCopy g, p, state1, state2, qmap1, qmap2, absmax1, absmax2;
};

void run_case(Optimizer o, DType dtype, const Hyper8& h, int64_t n, int steps, int64_t offset = 0) {
  const std::string what = std::string(optimizer_name(o)) + " " + std::string(dtype_name(dtype)) +
                           " n=" + std::to_string(n) + " wd=" + std::to_string(h.weight_decay) +
                           " gnorm_scale=" + std::to_string(h.gnorm_scale) + (h.skip_zeros ? " skip_zeros" : "") +
                           (h.specials_in_g ? " inf/nan in g" : "") + " offset=" + std::to_string(offset);
  SCOPED_TRACE(what);
  const bool two = optimizer_has_state2(o);
  State8 s = random_state8(o, dtype, n);  // the CPU's; the GPU starts each step from its values
  const int64_t skip_p = offset * dtype_bits(dtype) / 8;
  for (int t = 1; t <= steps; ++t) {
    const std::string at = " after step " + std::to_string(t);
    const Tensor g = random_grad8(h, dtype, n);
    GpuState d{gpu_copy_at(g, skip_p),
               gpu_copy_at(s.p, skip_p),
               gpu_copy_at(s.state1, offset),
               {},
               gpu_copy_at(s.qmap1, 0),
               {},
               gpu_copy_at(s.absmax1, 4 * offset),
               {}};
    if (two) {
      d.state2 = gpu_copy_at(s.state2, offset);
      d.qmap2 = gpu_copy_at(s.qmap2, 0);
      d.absmax2 = gpu_copy_at(s.absmax2, 4 * offset);
    }
    run(make_args8(o, h, t, g.ref(), s.p.ref(), s.state1.ref(), two ? s.state2.ref() : TensorRef{}, s.qmap1.ref(),
                   two ? s.qmap2.ref() : TensorRef{}, s.absmax1.ref(), two ? s.absmax2.ref() : TensorRef{}));
    run(make_args8(o, h, t, d.g.ref, d.p.ref, d.state1.ref, two ? d.state2.ref : TensorRef{}, d.qmap1.ref,
                   two ? d.qmap2.ref : TensorRef{}, d.absmax1.ref, two ? d.absmax2.ref : TensorRef{}));
    synchronize(Stream{});
    expect_same_bits(s.state1.ref(), d.state1.ref, "state1" + at);
    expect_same_bits(s.absmax1.ref(), d.absmax1.ref, "absmax1" + at);
    if (two) {
      expect_same_bits(s.state2.ref(), d.state2.ref, "state2" + at);
      expect_same_bits(s.absmax2.ref(), d.absmax2.ref, "absmax2" + at);
    }
    const std::vector<float> want = to_floats(s.p.ref()), got = to_floats(d.p.ref);
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const int64_t ulps = std::llabs(ordered_bits(dtype, want[i]) - ordered_bits(dtype, got[i]));
      g_worst_p = std::max(g_worst_p, ulps);
      if (ulps > 1 && !(std::isnan(want[i]) && std::isnan(got[i])) && bad++ < 5) {
        ADD_FAILURE() << "p" << at << ": element " << i << " = " << got[i] << ", CPU " << want[i] << " (" << ulps
                      << " ulps apart)";
      }
    }
  }
}

void print_worst() {
  std::printf("[ optim8  ] CUDA vs CPU: codes and absmax compared bit for bit; p at most %lld ulps apart\n",
              static_cast<long long>(g_worst_p));
}

TEST(CudaOptimizer8bitBlockwise, EveryRuleAndDtypeMatchesCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const int64_t sizes[] = {1, 255, 256, 257, 1000, 70001, 262147};
  int k = 0;
  for (Optimizer o : kRules8) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      Hyper8 plain;
      run_case(o, dtype, plain, sizes[k++ % 7], 3);
      Hyper8 decay;
      decay.weight_decay = 0.05f;
      decay.gnorm_scale = 0.5f;
      run_case(o, dtype, decay, sizes[k++ % 7], 3);
      Hyper8 odd = decay;
      odd.skip_zeros = odd.zeros_in_g = true;
      odd.specials_in_g = optimizer_has_state2(o);  // one-state rules have no guard: NaN states
      run_case(o, dtype, odd, sizes[k++ % 7], 3);
      run_case(o, dtype, decay, sizes[k++ % 7] + 3, 2, 1);  // every array off alignment
    }
  }
  print_worst();
}

TEST(CudaOptimizer8bitBlockwise, MoreBlocksThanOneWave) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  Hyper8 h;
  h.weight_decay = 0.01f;
  run_case(Optimizer::adam, DType::f32, h, 5000011, 2);
  run_case(Optimizer::ademamix, DType::bf16, h, 5000011, 2);
  run_case(Optimizer::lion, DType::f16, h, 5000011, 2);
  print_worst();
}

TEST(CudaOptimizer8bitBlockwise, EmptyTensorDoesNothing) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const State8 s = random_state8(Optimizer::adam, DType::f32, 0);
  const Tensor g = Tensor::empty({0}, DType::f32, kGpu), p = Tensor::empty({0}, DType::f32, kGpu);
  const Tensor c = Tensor::empty({0}, DType::u8, kGpu), a = Tensor::empty({0}, DType::f32, kGpu);
  const Tensor q1 = s.qmap1.to(kGpu), q2 = s.qmap2.to(kGpu);
  run(make_args8(Optimizer::adam, Hyper8{}, 1, g.ref(), p.ref(), c.ref(), c.ref(), q1.ref(), q2.ref(), a.ref(),
                 a.ref()));
  synchronize(Stream{});
}

TEST(CudaOptimizer8bitBlockwise, CapturedStepReplaysAsEager) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  const int64_t n = 100003;
  const Optimizer o = Optimizer::ademamix;  // both maps and all three states
  Hyper8 h;
  h.weight_decay = 0.01f;
  const State8 init = random_state8(o, DType::bf16, n);
  const Tensor g1 = random_grad8(h, DType::bf16, n), g2 = random_grad8(h, DType::bf16, n);
  const Tensor g = Tensor::empty({n}, DType::bf16, kGpu), p = init.p.to(kGpu);
  const Tensor s1 = init.state1.to(kGpu), s2 = init.state2.to(kGpu), q1 = init.qmap1.to(kGpu);
  const Tensor q2 = init.qmap2.to(kGpu), a1 = init.absmax1.to(kGpu), a2 = init.absmax2.to(kGpu);
  auto reset = [&](const Tensor& grad) {
    copy(g.ref(), grad.ref());
    for (auto [dst, src] : {std::pair{&p, &init.p}, std::pair{&s1, &init.state1}, std::pair{&s2, &init.state2},
                            std::pair{&a1, &init.absmax1}, std::pair{&a2, &init.absmax2}}) {
      copy(dst->ref(), src->ref());
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  const OptimizerUpdate8bitBlockwiseArgs a =
      make_args8(o, h, 3, g.ref(), p.ref(), s1.ref(), s2.ref(), q1.ref(), q2.ref(), a1.ref(), a2.ref());
  auto outputs = [&] {
    return std::vector<std::vector<unsigned char>>{bytes_of(p.ref()), bytes_of(s1.ref()), bytes_of(s2.ref()),
                                                   bytes_of(a1.ref()), bytes_of(a2.ref())};
  };
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  reset(g1);
  run(a, nullptr, Stream{s});  // warm-up: kernels loaded
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  bool threw = false;
  try {
    run(a, nullptr, Stream{s});
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
    run(a, nullptr, Stream{s});
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    eager.push_back(outputs());
  }
  for (size_t r = 0; r < 2; ++r) {
    for (size_t i = 0; i < replayed[r].size(); ++i) {
      EXPECT_TRUE(replayed[r][i] == eager[r][i]) << "output " << i << " of replay " << r << " differs from eager";
    }
  }
  EXPECT_TRUE(replayed[0][0] != replayed[1][0]) << "the gradient did not change p: a stale replay would pass";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
#endif
}

TEST(CudaOptimizer8bitBlockwise, BadCudaArgumentsSayWhatIsWrong) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const int64_t n = 300;
  const State8 host = random_state8(Optimizer::adam, DType::f32, n);
  const Tensor g = Tensor::empty({n}, DType::f32, kGpu), p = Tensor::empty({n}, DType::f32, kGpu);
  const Tensor s1 = host.state1.to(kGpu), s2 = host.state2.to(kGpu), q1 = host.qmap1.to(kGpu);
  const Tensor q2 = host.qmap2.to(kGpu), a1 = host.absmax1.to(kGpu), a2 = host.absmax2.to(kGpu);
  const Tensor p16 = Tensor::empty({n}, DType::f16, kGpu), gi = Tensor::empty({n}, DType::i32, kGpu);
  const std::string op = "optimizer_update_8bit_blockwise";
  auto args = [&] {
    return make_args8(Optimizer::adam, Hyper8{}, 1, g.ref(), p.ref(), s1.ref(), s2.ref(), q1.ref(), q2.ref(), a1.ref(),
                      a2.ref());
  };
  auto expect = [&](const OptimizerUpdate8bitBlockwiseArgs& a, ErrorCode code, const std::vector<std::string>& parts) {
    expect_error([&] { run(a); }, code, parts);
  };
  auto a = args();
  a.qmap1 = host.qmap1.ref();  // on the host
  expect(a, ErrorCode::device_mismatch, {op, "qmap1 must be on cuda:0", "got cpu"});
  a = args();
  a.p = p16.ref();
  expect(a, ErrorCode::invalid_argument, {op, "p must have g's dtype float32", "float16"});
  a = args();
  a.g = gi.ref();
  expect(a, ErrorCode::unsupported_dtype, {op, "g dtype must be one of", "int32"});
  a = args();
  a.optimizer = Optimizer::lars;
  expect(a, ErrorCode::invalid_argument, {op, "optimizer must be one of", "(got lars)"});
  a = args();
  a.absmax1 = a2.ref();
  a.optimizer = Optimizer::ademamix;  // needs m2's blocks too
  expect(a, ErrorCode::invalid_argument, {op, "state1"});
}

}  // namespace
