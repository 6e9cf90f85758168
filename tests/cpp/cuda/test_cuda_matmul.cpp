// The CUDA matmul's own paths, beyond the shared sweeps: A not fit to read
// in place (a misaligned view, K not a multiple of the kernel's chunk) is
// gathered into the workspace; out as a misaligned view (the wgmma kernel's
// 16-byte row stores fall back to scalar ones); K long enough for split-K
// and many passes, or for the activations of a split to fill the streaming
// kernel's shared memory; every kernel config on each. Results against the
// float64 oracle with the CUDA tolerance.
#include <string>
#include <vector>

#include "cuda_test_util.h"
#if defined(LOWBIT_WITH_CUDA)
#include "cuda/gemm/ops.h"
#endif
#include "gemm/gemm_cases.h"
#include "harness/compare.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

// A [rows, cols] view on the GPU whose data starts `offset` elements into its buffer.
struct DeviceView {
  Tensor buffer;
  TensorRef ref;
};
DeviceView device_view(int64_t rows, int64_t cols, DType dtype, int64_t offset) {
  DeviceView d;
  d.buffer = Tensor::empty({rows * cols + offset}, dtype, Device::cuda(0));
  d.ref = TensorRef::contiguous(static_cast<char*>(d.buffer.data()) + dtype_storage_bytes(dtype, offset), dtype,
                                {rows, cols}, Device::cuda(0));
  return d;
}

// A and out start `offset` and `out_offset` elements into their buffers.
void check_cuda_matmul(const MatmulConfig& c, int64_t M, int64_t offset, const std::string& what,
                       int64_t out_offset = 0) {
  const QuantizedWeight w = random_weight(c, DType::f16, false);
  const Tensor A = random_floats({M, c.K}, c.A_dtype, 0.5f);
  const Oracle oracle = matmul_oracle(A, expected_dequant(w), c.N, c.K, {});
  const Matmul mm(c, Device::cuda(0));
  const PackedWeight W = mm.transform_weight(w);
  const DeviceView a = device_view(M, c.K, c.A_dtype, offset);
  copy(a.ref, A.ref());
  std::vector<KernelConfig> configs{KernelConfig{}};
  {
    const DeviceView probe = device_view(M, c.N, c.out_dtype, out_offset);
    for (KernelConfig& k : kernel_configs(mm.args(a.ref, W.ref(), probe.ref))) configs.push_back(std::move(k));
  }
  for (const KernelConfig& config : configs) {
    const DeviceView out_view = device_view(M, c.N, c.out_dtype, out_offset);
    MatmulArgs args = mm.args(a.ref, W.ref(), out_view.ref);
    args.config = config;
    check(args);
    const size_t bytes = workspace_size(args);
    Tensor ws = bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, Device::cuda(0)) : Tensor();
    run(args, ws.data(), Stream{});
    synchronize(Stream{});
    Tensor out = Tensor::empty({M, c.N}, c.out_dtype, Device::cuda(0));
    copy(out.ref(), out_view.ref);
    expect_close(oracle, out, matmul_tolerance(c.A_dtype, c.out_dtype, c.accum_dtype, c.K, DeviceType::cuda),
                 what + " M=" + std::to_string(M) + " config " + (config.empty() ? "heuristic" : config.name()));
  }
}

MatmulConfig config(WeightType type, int64_t N, int64_t K, int64_t group, bool zeros) {
  MatmulConfig c;
  c.W_dtype = type;
  c.N = N;
  c.K = K;
  c.with_scaling = true;
  c.group_size = group;
  c.with_zeros = zeros;
  c.zeros_mode = ZerosMode::quantized;
  c.out_dtype = DType::f32;
  return c;
}

// The heuristic's pick by value, first in kernel_configs, on a Hopper GPU
// (elsewhere wgmma is filtered out); a config that cannot run says why.
TEST(CudaMatmul, SelectionByValue) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  bool hopper = false;
#if defined(LOWBIT_WITH_CUDA)
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  hopper = prop.major == 9 && prop.minor == 0;
#endif
  struct Want {
    WeightType type;
    int64_t M;
    const char* first;
  };
  const Want wants[] = {
      {WeightType::nf4, 1, "stream_m8_n256"},
      {WeightType::int4, 32, "stream_m32_n256"},
      {WeightType::int4, 64, hopper ? "wgmma_m64_n256_k64" : "stream_m64_n192"},
      {WeightType::nf4, 128, hopper ? "wgmma_m128_n128_k128" : "mma_m64_n128_s4"},
      {WeightType::int8, 4096, hopper ? "wgmma_m256_n128_k128" : "mma_m64_n128_s4"},
      {WeightType::int2, 100, "mma_m64_n128_s4"},
  };
  for (const Want& w : wants) {
    MatmulConfig c = config(w.type, 64, 512, 128, false);
    c.M = {w.M};
    const Matmul mm(c, Device::cuda(0));
    const PackedWeight W = mm.transform_weight(random_weight(c, DType::f16, false));
    const Tensor A = Tensor::empty({w.M, c.K}, c.A_dtype, Device::cuda(0));
    const Tensor out = Tensor::empty({w.M, c.N}, c.out_dtype, Device::cuda(0));
    const std::vector<KernelConfig> configs = kernel_configs(mm.args(A, W.ref(), out));
    ASSERT_FALSE(configs.empty());
    EXPECT_EQ(configs.front().name(), w.first) << weight_type_name(w.type) << " M=" << w.M;
  }
  MatmulConfig c = config(WeightType::int2, 64, 512, 128, false);
  const Matmul mm(c, Device::cuda(0));
  const PackedWeight W = mm.transform_weight(random_weight(c, DType::f16, false));
  const Tensor A = Tensor::empty({8, c.K}, c.A_dtype, Device::cuda(0));
  const Tensor out = Tensor::empty({8, c.N}, c.out_dtype, Device::cuda(0));
  MatmulArgs a = mm.args(A, W.ref(), out);
  a.config = parse_kernel_config("wgmma_m128_n128_k128");
  expect_error([&] { (void)workspace_size(a); }, ErrorCode::invalid_argument,
               {"matmul: config 'wgmma_m128_n128_k128' cannot run int2 here: ",
                hopper ? "wgmma takes 4- and 8-bit codes only" : "wgmma needs an sm_90 device"});
  a.config = parse_kernel_config("rows_m8_n128");
  expect_error([&] { (void)workspace_size(a); }, ErrorCode::invalid_argument,
               {"matmul: config 'rows_m8_n128' is not a cuda kernel config of the tiles layout"});
}

TEST(CudaMatmul, MisalignedAIsGathered) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  for (const MatmulConfig& c :
       {config(WeightType::uint4, 72, 512, 128, true), config(WeightType::nf4, 40, 256, 64, false),
        config(WeightType::int2, 24, 512, 128, false)}) {
    for (int64_t M : {1, 3, 16, 40}) check_cuda_matmul(c, M, 1, describe(c) + " A offset 1");
  }
}

TEST(CudaMatmul, MisalignedOutputIsWrittenInPlace) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  // N a multiple of 8 (the wgmma kernel's rows of 16-bit output would go out
  // in 16-byte stores), out one element off 16 bytes: fp16 and fp32 output,
  // with and without split K.
  for (DType out : {DType::f16, DType::f32}) {
    for (int64_t K : {int64_t{512}, int64_t{8192}}) {
      MatmulConfig c = config(WeightType::int4, 136, K, 128, false);
      c.out_dtype = out;
      for (int64_t M : {1, 40, 129}) check_cuda_matmul(c, M, 0, describe(c) + " out offset 1", 1);
    }
  }
}

TEST(CudaMatmul, RaggedKPerRow) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  // K = 1000: no whole chunk of 128 int4 codes at the end (per-row scale).
  for (WeightType t : {WeightType::int4, WeightType::uint8, WeightType::int1}) {
    for (int64_t M : {1, 9})
      check_cuda_matmul(config(t, 50, 1000, -1, false), M, 0, describe(config(t, 50, 1000, -1, false)));
  }
}

TEST(CudaMatmul, LongKSplits) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  // N small and K long: split-K over many passes, reduced in split order.
  for (const MatmulConfig& c :
       {config(WeightType::uint4, 64, 8192, 128, true), config(WeightType::nf4, 48, 4096, 64, false),
        config(WeightType::int8, 32, 4096, 128, false)}) {
    for (int64_t M : {1, 16, 33}) check_cuda_matmul(c, M, 0, describe(c));
  }
}

TEST(CudaMatmul, ActivationsSplitK) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  // The streaming kernel stages a split's activations in shared memory: at
  // M = 16 and K = 65536 they set the split count (~20 ranges) themselves.
  for (const MatmulConfig& c :
       {config(WeightType::uint4, 64, 65536, 128, true), config(WeightType::int4, 40, 65536, -1, false)}) {
    for (int64_t M : {9, 16}) check_cuda_matmul(c, M, 0, describe(c));
  }
}

TEST(CudaMatmul, RepeatedCallsFollowTheirOwnTensors) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  // A plan's choices are kept per shape: calls of one shape on other A and
  // out buffers, A misaligned (read through the workspace), shapes met again
  // after others, and a copy of the Matmul (which shares its plans) must each
  // read and write their own tensors.
  for (const MatmulConfig& c :
       {config(WeightType::int4, 136, 1024, 128, false), config(WeightType::uint4, 72, 512, 128, true)}) {
    const QuantizedWeight w = random_weight(c, DType::f16, false);
    const Matmul mm(c, Device::cuda(0));
    const Matmul twin = mm;
    const PackedWeight W = mm.transform_weight(w);
    const std::vector<float> expected_w = expected_dequant(w);
    const auto tol = matmul_tolerance(c.A_dtype, c.out_dtype, c.accum_dtype, c.K, DeviceType::cuda);
    int call = 0;
    for (int64_t M : {5, 5, 64, 5, 64, 300}) {
      for (int64_t offset : {0, 1, 0}) {
        const Tensor A = random_floats({M, c.K}, c.A_dtype, 0.5f);
        const DeviceView a = device_view(M, c.K, c.A_dtype, offset);
        copy(a.ref, A.ref());
        const Tensor out = (call % 2 ? twin : mm).forward(a.ref, W, Stream{});
        synchronize(Stream{});
        expect_close(matmul_oracle(A, expected_w, c.N, c.K, {}), out, tol,
                     describe(c) + " call " + std::to_string(call++) + " M=" + std::to_string(M) + " A offset " +
                         std::to_string(offset));
      }
    }
  }
}

}  // namespace
