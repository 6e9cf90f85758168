// The CUDA int8 GEMMs' own paths against the CPU backend on the same
// operands: every kernel config the call lists (the wgmma shapes on sm_90
// and the mma.sync kernel) at ragged shapes, sums and dequantized outputs
// bit for bit; K not a multiple of 16 and views not 16-byte aligned (the
// mma.sync kernel's byte loads); the int32 edges at the largest K; a wgmma
// config forced where it cannot run; int8_linear at every config and captured
// in a CUDA graph.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "harness/harness.h"
#include "lowbit/ops/int8_gemm.h"
#include "lowbit/ops/quant.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

const Device kGpu = Device::cuda(0);

struct Shape3 {
  int64_t M, N, K;
};

// Every config of the call on the GPU, sums and each output dtype (with and
// without bias), against the CPU's results for the same operands; a and b
// `offset` bytes into their buffers, the statistics and biases `soff`.
void check_every_config(const Shape3& s, int64_t offset, int64_t soff) {
  const std::string shape = "M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) +
                            " offset=" + std::to_string(offset) + " stats offset=" + std::to_string(soff);
  const Tensor a = random_int8({s.M, s.K}), b = random_int8({s.N, s.K});
  const Tensor rs = random_stats(s.M), cs = random_stats(s.N);
  // Biases of f16 and f32 outputs in their dtype; f16's with a NaN (its column NaN in every row).
  Tensor bias16 = random_floats({s.N}, DType::f16);
  bias16.ptr<uint16_t>()[s.N / 2] = 0x7e05;
  const Tensor bias32 = random_floats({s.N}, DType::f32);
  const DeviceView ga = device_view(a, offset), gb = device_view(b, offset);
  // soff (a multiple of 4) takes the statistics and biases off their pair alignment: the epilogue's per-element path.
  const DeviceView grs = device_view(rs, soff), gcs = device_view(cs, soff);
  const DeviceView gbias16 = device_view(bias16, soff / 2), gbias32 = device_view(bias32, soff);
  Tensor want = Tensor::empty({s.M, s.N}, DType::i32);
  run(Int8LinearMatmulArgs{a.ref(), b.ref(), want.ref(), {}});
  // The CPU's dequantized outputs: f16 and f32 with bias, bf16 without.
  const DType dtypes[] = {DType::f16, DType::bf16, DType::f32};
  const auto host_bias = [&](DType d) {
    return d == DType::f16 ? bias16.ref() : d == DType::f32 ? bias32.ref() : TensorRef{};
  };
  const auto gpu_bias = [&](DType d) {
    return d == DType::f16 ? gbias16.ref : d == DType::f32 ? gbias32.ref : TensorRef{};
  };
  std::vector<Tensor> want_d;
  for (DType dtype : dtypes) {
    want_d.push_back(Tensor::empty({s.M, s.N}, dtype));
    run(Int8ScaledMmArgs{a.ref(), b.ref(), rs.ref(), cs.ref(), host_bias(dtype), want_d.back().ref(), {}});
  }
  Tensor probe = poisoned({s.M, s.N}, DType::i32);
  const std::vector<KernelConfig> configs = kernel_configs(Int8LinearMatmulArgs{ga.ref, gb.ref, probe.ref(), {}});
  ASSERT_FALSE(configs.empty()) << shape;
  for (const KernelConfig& config : configs) {
    const std::string what = shape + " config " + config.name();
    EXPECT_EQ(parse_kernel_config(config.name()), config) << what << ": the name reads back";
    Tensor out = poisoned({s.M, s.N}, DType::i32);
    run(Int8LinearMatmulArgs{ga.ref, gb.ref, out.ref(), config});
    expect_same_bits(want.ref(), out.ref(), "int8_linear_matmul " + what);
    for (size_t i = 0; i < want_d.size(); ++i) {
      const DType dtype = dtypes[i];
      Tensor got = poisoned({s.M, s.N}, dtype);
      run(Int8ScaledMmArgs{ga.ref, gb.ref, grs.ref, gcs.ref, gpu_bias(dtype), got.ref(), config});
      expect_same_floats(want_d[i], got, "int8_scaled_mm " + std::string(dtype_name(dtype)) + " " + what);
    }
  }
}

TEST(CudaInt8Gemm, EveryConfigMatchesTheCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  // Tiles ragged in M and N, K past several stages and ragged in its last block,
  // a single row, more rows than one wave of any tile, odd N (unpaired stores).
  const Shape3 shapes[] = {{300, 264, 1040},
                           {1, 100, 128},
                           {130, 257, 48},
                           {517, 391, 2064},
                           {64, 64, 16},
                           // more tiles than SMs in every config: both consumer warpgroups take turns
                           {2100, 1500, 400}};
  for (const Shape3& s : shapes) check_every_config(s, 0, 0);
  check_every_config({300, 264, 1040}, 0, 4);
}

TEST(CudaInt8Gemm, UnalignedViewsAndRaggedKTakeTheByteLoads) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  check_every_config({37, 70, 1000}, 0, 0);   // K % 16 != 0: rows not 16-byte aligned
  check_every_config({150, 130, 256}, 3, 4);  // aligned K, views starting at odd addresses
  check_every_config({5, 9, 7}, 1, 0);
}

TEST(CudaInt8Gemm, Int32EdgesAtTheLargestK) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  // kInt8GemmMaxK (the mma.sync kernel) and the largest multiple of 16 below it (wgmma on sm_90).
  for (const int64_t K : {kInt8GemmMaxK, kInt8GemmMaxK / 16 * 16}) {
    for (const int v : {-128, 127}) {
      Tensor a = Tensor::empty({130, K}, DType::i8), b = Tensor::empty({3, K}, DType::i8);
      std::memset(a.data(), static_cast<unsigned char>(int8_t{-128}), static_cast<size_t>(a.numel()));
      std::memset(b.data(), static_cast<unsigned char>(static_cast<int8_t>(v)), static_cast<size_t>(b.numel()));
      const Tensor out = int8_linear_matmul(a.to(kGpu).ref(), b.to(kGpu).ref()).to(Device::cpu());
      const int64_t want = int64_t{-128} * v * K;
      for (int64_t i = 0; i < out.numel(); ++i) {
        ASSERT_EQ(out.ptr<int32_t>()[i], want) << "K=" << K << " b=" << v << " at " << i;
      }
    }
  }
}

// int8_linear (quantization, fused GEMM, outlier columns, their temporaries and
// workspace) captured in a CUDA graph and replayed on new activations: nothing
// in the chain waits on the host, and each replay equals the CPU's call. M
// rows: past the few-rows kernel (four launches) or within it (two, the
// second a programmatic dependent).
void check_linear_graph(int64_t M) {
#if defined(LOWBIT_WITH_CUDA)
  const int64_t N = 130, K = 256;
  const Int8Quantized w = int8_vectorwise_quant(random_floats({N, K}, DType::f32).ref());
  const Tensor bias = random_floats({N}, DType::f16);
  const Tensor gw = w.values.to(kGpu), gs = w.row_stats.to(kGpu), gbias = bias.to(kGpu);
  Tensor a = Tensor::empty({M, K}, DType::f16, kGpu), out = Tensor::empty({M, N}, DType::f16, kGpu);
  synchronize(Stream{});  // the copies above ran on the legacy default stream

  cudaStream_t stream = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const Stream s{stream};
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  int8_linear_into(a.ref(), gw.ref(), gs.ref(), gbias.ref(), 6.0f, out.ref(), s);
  LOWBIT_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  LOWBIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  for (int run_i = 0; run_i < 3; ++run_i) {
    // Outlier columns differ from replay to replay (none in the first).
    Tensor ha = random_floats({M, K}, DType::f32, 0.3f);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t k = run_i; k < K && run_i > 0; k += 61 * run_i) ha.ptr<float>()[m * K + k] = 9.0f;
    }
    const std::vector<float> values = to_floats(ha.ref());
    const Tensor a16 = host_tensor(values, DType::f16);
    LOWBIT_ASSERT_CUDA(cudaMemcpyAsync(a.data(), a16.data(), a16.nbytes(), cudaMemcpyHostToDevice, stream));
    LOWBIT_ASSERT_CUDA(cudaMemsetAsync(out.data(), 0xff, out.nbytes(), stream));
    LOWBIT_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
    LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(stream));
    const Tensor want =
        int8_linear(TensorRef::contiguous(const_cast<void*>(a16.data()), DType::f16, Shape({M, K}), Device::cpu()),
                    w.values.ref(), w.row_stats.ref(), bias.ref(), 6.0f);
    expect_same_floats(want, out, "int8_linear graph replay " + std::to_string(run_i) + " M=" + std::to_string(M));
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
#else
  (void)M;
#endif
}

TEST(CudaInt8Gemm, LinearGraphReplaysWithNewActivations) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  check_linear_graph(70);
  check_linear_graph(12);
}

// int8_linear, every config it lists (the fused sm_90a GEMM's shapes, then
// the three ops), against the CPU's call bit for bit: a few outlier columns,
// none above the threshold, every column marked, threshold 0; rows ragged
// around the tiles (fewer than a tile: a's short TMA box), N odd, bias or
// none; activations `offset` elements off their 16-byte alignment (the
// unfused steps).
void check_linear_configs(const std::vector<int64_t>& lead, int64_t N, int64_t K, int64_t offset) {
  const Int8Quantized w = int8_vectorwise_quant(random_floats({N, K}, DType::f32).ref());
  const Tensor gw = w.values.to(kGpu), gs = w.row_stats.to(kGpu);
  int64_t rows = 1;
  for (int64_t d : lead) rows *= d;
  std::vector<int64_t> a_shape = lead, out_shape = lead;
  a_shape.push_back(K);
  out_shape.push_back(N);
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    // kind 0: outlier columns at 6; 1: none reaches 6; 2: threshold tiny, every column marked; 3: threshold 0.
    for (int kind = 0; kind < 4; ++kind) {
      const float threshold = kind == 2 ? 1e-3f : kind == 3 ? 0.0f : 6.0f;
      std::vector<float> values = to_floats(random_floats(a_shape, DType::f32, kind == 1 ? 0.5f : 1.0f).ref());
      if (kind == 0) {
        for (int64_t r = 0; r < rows; r += 3) {
          for (int64_t k = 5; k < K; k += 97) values[static_cast<size_t>(r * K + k)] = (r % 2 ? -9.0f : 7.5f);
        }
      }
      const Tensor flat = host_tensor(values, dtype);
      const Tensor a = Tensor::copy_of(
          TensorRef::contiguous(const_cast<void*>(flat.data()), dtype, Shape(a_shape), Device::cpu()), Device::cpu());
      const Tensor bias = kind % 2 == 0 ? random_floats({N}, DType::f16) : Tensor();
      const TensorRef bias_ref = bias.defined() ? bias.ref() : TensorRef{};
      const Tensor want = int8_linear(a.ref(), w.values.ref(), w.row_stats.ref(), bias_ref, threshold);
      const DeviceView ga = device_view(a, offset * static_cast<int64_t>(dtype_bits(dtype) / 8));
      const Tensor gbias = bias.defined() ? bias.to(kGpu) : Tensor();
      const TensorRef gbias_ref = gbias.defined() ? gbias.ref() : TensorRef{};
      Tensor probe = poisoned(out_shape, dtype);
      const std::vector<KernelConfig> configs =
          kernel_configs(Int8LinearArgs{ga.ref, gw.ref(), gs.ref(), gbias_ref, threshold, probe.ref(), {}});
      ASSERT_FALSE(configs.empty());
      for (const KernelConfig& config : configs) {
        const std::string what = "int8_linear rows=" + std::to_string(rows) + " N=" + std::to_string(N) +
                                 " K=" + std::to_string(K) + " offset=" + std::to_string(offset) + " " +
                                 std::string(dtype_name(dtype)) + " kind=" + std::to_string(kind) + " config " +
                                 config.name();
        Tensor out = poisoned(out_shape, dtype);
        const Int8LinearArgs args{ga.ref, gw.ref(), gs.ref(), gbias_ref, threshold, out.ref(), config};
        const Tensor ws = Tensor::empty({static_cast<int64_t>(workspace_size(args))}, DType::u8, kGpu);
        run(args, ws.data());
        expect_same_floats(want, out, what);
      }
    }
  }
}

TEST(CudaInt8Gemm, LinearEveryConfigMatchesTheCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  check_linear_configs({16}, 200, 512, 0);      // fewer rows than a tile
  check_linear_configs({1}, 72, 256, 0);        // one row
  check_linear_configs({3, 47}, 131, 1040, 0);  // ragged rows and columns, K past the stages
  check_linear_configs({300}, 264, 384, 0);
  check_linear_configs({70}, 130, 256, 1);     // unaligned activations: the three ops
  check_linear_configs({2, 13}, 72, 4400, 0);  // the few-rows kernel's 32-row tile; bits past one window
  check_linear_configs({5}, 40, 520, 0);       // K % 16 != 0: the few-rows kernel's byte loads
  check_linear_configs({40}, 72, 20000, 0);    // rows longer than a CTA holds: quantized by segments
}

TEST(CudaInt8Gemm, LinearRowsConfigPastItsRowsIsInvalidArgument) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const Tensor a = random_floats({40, 64}, DType::f16).to(kGpu);
  const Tensor b = random_int8({8, 64}).to(kGpu), bs = random_stats(8).to(kGpu);
  Tensor out = Tensor::empty({40, 8}, DType::f16, kGpu);
  const Int8LinearArgs args{
      a.ref(), b.ref(), bs.ref(), {}, 6.0f, out.ref(), parse_kernel_config("rows_i8_m16_n32_k256")};
  const Tensor ws = Tensor::empty({static_cast<int64_t>(workspace_size(args))}, DType::u8, kGpu);
  expect_error([&] { run(args, ws.data()); }, ErrorCode::invalid_argument,
               {"int8_linear", "rows_i8", "at most 32 rows", "got 40"});
}

TEST(CudaInt8Gemm, WgmmaConfigWhereItCannotRunIsInvalidArgument) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const Tensor a = random_int8({4, 40}).to(kGpu), b = random_int8({8, 40}).to(kGpu);
  Tensor out = Tensor::empty({4, 8}, DType::i32, kGpu);
  Int8LinearMatmulArgs args{a.ref(), b.ref(), out.ref(), parse_kernel_config("wgmma_i8_m128_n128_k128_s7")};
  expect_error([&] { run(args); }, ErrorCode::invalid_argument, {"int8_linear_matmul", "wgmma_i8", "multiple of 16"});
  args.config = parse_kernel_config("mma_m64_n128_s3");
  expect_error([&] { run(args); }, ErrorCode::invalid_argument, {"int8_linear_matmul", "not a cuda kernel config"});
}

}  // namespace
