// Every CUDA op can be captured in a CUDA graph (global capture mode, the
// strictest: any synchronizing call or cudaMalloc in an op breaks the
// capture) and replays with the right results: inputs refilled after the
// capture, the graph launched, its outputs equal to an eager run's on the same
// inputs, bit for bit (the same kernels), with poisoned outputs so that an
// unwritten element shows.
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "harness/harness.h"
#include "lowbit/code_maps.h"
#include "lowbit/ops/gemm.h"
#include "lowbit/ops/int8_gemm.h"
#include "lowbit/ops/quant.h"

namespace {

using namespace lowbit;

#if defined(LOWBIT_WITH_CUDA)

const Device kGpu = Device::cuda(0);

// Fresh random floats (the harness's generator) into a GPU tensor.
void fill_random(const Tensor& t, float stddev = 1.0f) {
  const std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  copy(t.ref(), test::random_floats(shape, t.dtype(), stddev).ref());
}

// On the legacy default stream, which the test's non-blocking stream does not
// wait for: callers synchronize the device before the op runs.
void poison(const Tensor& t) { ASSERT_EQ(cudaMemset(t.data(), 0xff, t.nbytes()), cudaSuccess); }

std::vector<unsigned char> host_bytes(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  const auto* p = h.ptr<const unsigned char>();
  return std::vector<unsigned char>(p, p + h.nbytes());
}

// One op family: its inputs (refilled between runs), outputs (compared) and
// the enqueue of its work on a stream.
struct GraphCase {
  std::string name;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  std::function<void(Stream)> enqueue;
};

void expect_graph_matches_eager(GraphCase& c) {
  SCOPED_TRACE(c.name);
  // Inputs drawn afresh for each run, kept per run so two runs can share them.
  std::vector<std::vector<Tensor>> drawn(4);
  auto refill = [&](size_t run_index) {
    if (drawn[run_index].empty()) {
      for (const Tensor& in : c.inputs) {
        const std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
        drawn[run_index].push_back(test::random_floats(shape, in.dtype()));
      }
    }
    for (size_t i = 0; i < c.inputs.size(); ++i) copy(c.inputs[i].ref(), drawn[run_index][i].ref());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  refill(1);
  c.enqueue(Stream{s});  // warm-up: loads the kernels (lazy loading waits) and caches
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  bool threw = false;
  try {
    c.enqueue(Stream{s});
  } catch (const Error& e) {
    threw = true;
    ADD_FAILURE() << "the op failed under capture: " << e.what();
  }
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  ASSERT_FALSE(threw);
  ASSERT_EQ(end, cudaSuccess) << "capture broken (a synchronizing call or cudaMalloc in the op?): "
                              << cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  // Replay on inputs drawn after the capture.
  refill(2);
  for (const Tensor& o : c.outputs) poison(o);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<std::vector<unsigned char>> replayed;
  for (const Tensor& o : c.outputs) replayed.push_back(host_bytes(o));
  // A second replay on other inputs: the graph reads its inputs anew.
  refill(3);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<std::vector<unsigned char>> replayed3;
  for (const Tensor& o : c.outputs) replayed3.push_back(host_bytes(o));

  auto eager = [&](size_t run_index) {
    refill(run_index);
    for (const Tensor& o : c.outputs) poison(o);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    c.enqueue(Stream{s});
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    std::vector<std::vector<unsigned char>> got;
    for (const Tensor& o : c.outputs) got.push_back(host_bytes(o));
    return got;
  };
  const auto want2 = eager(2);
  const auto want3 = eager(3);
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    EXPECT_TRUE(replayed[i] == want2[i]) << "output " << i << " of the replay differs from the eager run";
    EXPECT_TRUE(replayed3[i] == want3[i]) << "output " << i << " of the second replay differs from the eager run";
  }
  EXPECT_TRUE(want2 != want3) << "the inputs did not change the outputs: the test cannot see a stale replay";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

Tensor gpu(std::initializer_list<int64_t> shape, DType dtype) { return Tensor::empty(shape, dtype, kGpu); }

Tensor dynamic_code_gpu() {
  const std::vector<float> code = create_dynamic_map();
  return Tensor::copy_of(TensorRef::contiguous(const_cast<float*>(code.data()), DType::f32, {256}), kGpu);
}

#endif

TEST(CudaGraph, QuantizationOpsCaptureAndReplay) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  constexpr int64_t n = 100003, bs = 256, nb = (n + bs - 1) / bs;
  const Tensor code = dynamic_code_gpu();
  {
    GraphCase c{"8-bit blockwise", {gpu({n}, DType::bf16)}, {}, {}};
    Tensor q = gpu({n}, DType::u8), absmax = gpu({nb}, DType::f32), y = gpu({n}, DType::f32);
    c.outputs = {q, absmax, y};
    c.enqueue = [&](Stream s) {
      run(QuantizeBlockwiseArgs{c.inputs[0], code, q, absmax, bs}, nullptr, s);
      run(DequantizeBlockwiseArgs{q, code, absmax, {}, y, bs}, nullptr, s);
    };
    expect_graph_matches_eager(c);
  }
  {
    // NF4 with the absmax double-quantized, as quantize_4bit(compress_statistics) chains it.
    GraphCase c{"4-bit nested", {gpu({n}, DType::f16)}, {}, {}};
    constexpr int64_t bs4 = 64, nb4 = (n + bs4 - 1) / bs4, nb2 = (nb4 + 255) / 256;
    Tensor packed = gpu({(n + 1) / 2}, DType::u8), absmax = gpu({nb4}, DType::f32), mean = gpu({1}, DType::f32);
    Tensor qabsmax = gpu({nb4}, DType::u8), absmax2 = gpu({nb2}, DType::f32), y = gpu({n}, DType::bf16);
    c.outputs = {packed, absmax, mean, qabsmax, absmax2, y};
    c.enqueue = [&](Stream s) {
      run(Quantize4bitArgs{c.inputs[0], packed, absmax, bs4, Quant4Type::nf4}, nullptr, s);
      const AbsmaxCenterArgs center{absmax, mean};
      const size_t ws_bytes = workspace_size(center);
      const Tensor ws = ws_bytes ? Tensor::empty({static_cast<int64_t>(ws_bytes)}, DType::u8, kGpu, s) : Tensor();
      run(center, ws.data(), s);
      run(QuantizeBlockwiseArgs{absmax, code, qabsmax, absmax2, 256}, nullptr, s);
      run(Dequantize4bitArgs{packed, qabsmax, NestedAbsmax{code, absmax2, mean, 256}, y, bs4, Quant4Type::nf4},
          nullptr, s);
    };
    expect_graph_matches_eager(c);
  }
  {
    GraphCase c{"fp8 act_quant / weight_quant / weight_dequant", {gpu({96, 512}, DType::bf16), gpu({300, 260}, DType::f32)},
                {}, {}};
    Tensor y = gpu({96, 512}, DType::f8_e4m3), sy = gpu({96, 4}, DType::f32);
    Tensor w = gpu({300, 260}, DType::f8_e4m3), sw = gpu({3, 3}, DType::f32), wd = gpu({300, 260}, DType::bf16);
    c.outputs = {y, sy, w, sw, wd};
    c.enqueue = [&](Stream s) {
      run(ActQuantArgs{c.inputs[0], y, sy, 128, true}, nullptr, s);
      run(WeightQuantArgs{c.inputs[1], w, sw, 128}, nullptr, s);
      run(WeightDequantArgs{w, sw, wd, 128}, nullptr, s);
    };
    expect_graph_matches_eager(c);
  }
  {
    GraphCase c{"int8 vector-wise", {gpu({33, 1000}, DType::f16)}, {}, {}};
    Tensor q = gpu({33, 1000}, DType::i8), stats = gpu({33}, DType::f32), mask = gpu({1000}, DType::u8);
    Tensor back = gpu({33, 1000}, DType::f32);
    c.outputs = {q, stats, mask, back};
    c.enqueue = [&](Stream s) {
      run(Int8VectorwiseQuantArgs{c.inputs[0], q, stats, mask, 1.5f}, nullptr, s);
      run(Int8VectorwiseDequantArgs{q, stats, back}, nullptr, s);
    };
    expect_graph_matches_eager(c);
  }
  {
    // LLM.int8's column quantization (a memset and two kernels) and input gradient.
    GraphCase c{"int8 column-wise and input gradient", {gpu({70, 136}, DType::f16), gpu({5, 48}, DType::bf16)}, {}, {}};
    const Tensor cb = test::random_int8({48, 136}).to(kGpu), scb = test::random_stats(48).to(kGpu);
    Tensor q = gpu({70, 136}, DType::i8), stats = gpu({136}, DType::f32), grad = gpu({5, 136}, DType::bf16);
    c.outputs = {q, stats, grad};
    c.enqueue = [&](Stream s) {
      run(Int8ColwiseQuantArgs{c.inputs[0], q, stats, 2.5f}, nullptr, s);
      run(Int8LinearGradInputArgs{c.inputs[1], cb, scb, grad}, nullptr, s);
    };
    expect_graph_matches_eager(c);
  }
  {
    GraphCase c{"estimate_quantiles", {gpu({5000}, DType::f32)}, {}, {}};
    Tensor out = gpu({256}, DType::f32);
    c.outputs = {out};
    c.enqueue = [&](Stream s) {
      const EstimateQuantilesArgs args{c.inputs[0], out, 1.0f / 512.0f};
      const size_t bytes = workspace_size(args);
      const Tensor ws = bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, kGpu, s) : Tensor();
      run(args, ws.data(), s);
    };
    expect_graph_matches_eager(c);
  }
#endif
}

TEST(CudaGraph, MatmulOpsCaptureAndReplay) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  // Matmul::forward allocates its workspace per call (split-K partials at
  // these shapes): a captured graph holds its own.
  for (const int64_t M : {1, 16, 200}) {
    MatmulConfig cfg;
    cfg.N = 1024;
    cfg.K = 4096;
    cfg.W_dtype = WeightType::int4;
    cfg.group_size = 128;
    cfg.with_scaling = true;
    std::uniform_int_distribution<int> code(-8, 7);
    Tensor w = Tensor::empty({cfg.N, cfg.K}, DType::i8);
    for (int64_t i = 0; i < w.numel(); ++i) w.ptr<int8_t>()[i] = static_cast<int8_t>(code(test::rng()));
    const Tensor scale = test::random_floats({cfg.N, cfg.K / 128}, DType::f16, 0.02f);
    const Matmul mm(cfg, kGpu);
    const PackedWeight W = mm.transform_weight(w, scale);
    GraphCase c{"Matmul int4 g128 M=" + std::to_string(M), {gpu({M, cfg.K}, DType::f16)}, {}, {}};
    Tensor out = gpu({M, cfg.N}, DType::f16);
    c.outputs = {out};
    c.enqueue = [&](Stream s) { mm.forward(c.inputs[0], W, out, s); };
    expect_graph_matches_eager(c);
  }
  {
    // bitsandbytes matmul_4bit on a state's own storage (nested absmax).
    constexpr int64_t N = 384, K = 1000, bs = 64, nb = (N * K + bs - 1) / bs, nb2 = (nb + 255) / 256;
    const Tensor code = dynamic_code_gpu();
    Tensor wf = gpu({N, K}, DType::f32), packed = gpu({(N * K + 1) / 2}, DType::u8), absmax = gpu({nb}, DType::f32);
    Tensor mean = gpu({1}, DType::f32), qabsmax = gpu({nb}, DType::u8), absmax2 = gpu({nb2}, DType::f32);
    fill_random(wf);
    run(Quantize4bitArgs{wf, packed, absmax, bs, Quant4Type::nf4});
    const AbsmaxCenterArgs center{absmax, mean};
    const size_t cbytes = workspace_size(center);
    const Tensor cws = cbytes ? Tensor::empty({static_cast<int64_t>(cbytes)}, DType::u8, kGpu) : Tensor();
    run(center, cws.data());
    run(QuantizeBlockwiseArgs{absmax, code, qabsmax, absmax2, 256});
    for (const int64_t M : {1, 7, 160}) {
      GraphCase c{"matmul_4bit M=" + std::to_string(M), {gpu({M, K}, DType::bf16)}, {}, {}};
      Tensor out = gpu({M, N}, DType::bf16);
      c.outputs = {out};
      c.enqueue = [&](Stream s) {
        Matmul4bitArgs a;
        a.A = c.inputs[0];
        a.packed = packed;
        a.absmax = qabsmax;
        a.nested = NestedAbsmax{code, absmax2, mean, 256};
        a.out = out;
        a.N = N;
        a.blocksize = bs;
        const size_t bytes = workspace_size(a);
        const Tensor ws = bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, kGpu, s) : Tensor();
        run(a, ws.data(), s);
      };
      expect_graph_matches_eager(c);
    }
  }
#endif
}

}  // namespace
