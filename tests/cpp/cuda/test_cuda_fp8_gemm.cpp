// The CUDA FP8 block GEMMs' own paths, against the CPU backend ("cpu", the
// highest-priority CPU implementation) on the same operands: a DeepSeek-V3
// sized shape; views that are not 16-byte aligned (the kernel's plain-load
// path); contiguous tiles whose rows mix experts, padding and ids outside
// [-1, E) (NaN rows on CUDA); the masked layout captured in a CUDA graph and
// replayed with new masked_m contents; the f16 config forced; a config the
// backend does not know.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "harness/harness.h"
#include "lowbit/ops/fp8_gemm.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

constexpr int64_t kB = kFp8ScaleBlock;
int64_t blocks(int64_t n) { return (n + kB - 1) / kB; }
const Device kGpu = Device::cuda(0);
// The kernel's inner product on e4m3 decoded to f16 (any GPU).
const std::string kF16Config = "mma_f16_m64_n128_k128_s3";

// |t|: the sign bits cleared (a GEMM of these gives the sum of the terms' magnitudes).
Tensor magnitudes(const Tensor& t) {
  Tensor m = t.to(Device::cpu());
  auto* p = static_cast<uint8_t*>(m.data());
  for (int64_t i = 0; i < m.numel(); ++i) p[i] &= 0x7f;
  return m;
}

// Positive scales near 1/(16 * 448), so sums stay in every output dtype's range.
Tensor random_scales(std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(Shape(shape), DType::f32);
  float* p = t.ptr<float>();
  std::uniform_real_distribution<float> exponent(-2.0f, 2.0f);
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::exp2(exponent(rng())) / (16.0f * 448.0f);
  return t;
}


// got (CUDA) against want (CPU) within fp32 accumulation of both (relative to
// mag, the sum of the terms' magnitudes) and the output dtype's rounding;
// rows of nan_rows must be NaN.
void expect_close(const std::vector<float>& want, const std::vector<float>& mag, const std::vector<float>& got,
                  DType out_dtype, const std::string& what, int64_t N = 1, const std::vector<int64_t>& nan_rows = {}) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const double eps = out_dtype == DType::bf16 ? 1.0 / 128 : out_dtype == DType::f16 ? 1.0 / 1024 : 2e-6;
  const double tiny = out_dtype == DType::f16 ? std::exp2(-23) : 1e-30;
  const double rel = what.find(kF16Config) != std::string::npos ? 2e-5 : kFp8TensorCoreError;
  double worst = 0.0;  // the largest error beyond the output's rounding, over the magnitude
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    const int64_t row = static_cast<int64_t>(i) / N;
    if (std::find(nan_rows.begin(), nan_rows.end(), row) != nan_rows.end()) {
      if (!std::isnan(got[i])) {
        ADD_FAILURE() << what << ": element " << i << " (row " << row << ") = " << got[i] << ", want NaN";
        ++bad;
      }
      continue;
    }
    const double tol = rel * std::fabs(mag[i]) + eps * std::fabs(want[i]) + tiny;
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (mag[i] > 0) worst = std::max(worst, (err - eps * std::fabs(want[i])) / std::fabs(mag[i]));
    if (!(err <= tol)) {
      ADD_FAILURE() << what << ": element " << i << " = " << got[i] << ", want " << want[i] << " (tolerance " << tol
                    << ")";
      ++bad;
    }
  }
  std::printf("[ fp8     ] %s: largest error beyond rounding / magnitude %.3g (bound %.3g)\n", what.c_str(), worst,
              rel);
}

struct Operands {
  Tensor a, a_s, b, b_s, bias;
};

Operands random_operands(int64_t M, int64_t N, int64_t K, bool bias) {
  Operands o{random_e4m3({M, K}), random_scales({M, blocks(K)}), random_e4m3({N, K}),
             random_scales({blocks(N), blocks(K)}), Tensor()};
  if (bias) o.bias = random_floats({N}, DType::f32);
  return o;
}

// The CPU's out of fp8_gemm as floats (magnitudes: |a| |b| and no bias).
std::vector<float> cpu_gemm(const Operands& o, DType out_dtype, bool magnitude) {
  const Tensor a = magnitude ? magnitudes(o.a) : o.a;
  const Tensor b = magnitude ? magnitudes(o.b) : o.b;
  Tensor out = Tensor::empty({o.a.sizes()[0], o.b.sizes()[0]}, out_dtype);
  run(Fp8GemmArgs{a.ref(), o.a_s.ref(), b.ref(), o.b_s.ref(), magnitude ? TensorRef{} : o.bias.ref(), out.ref(), {}});
  return to_floats(out.ref());
}

// fp8_gemm on the GPU with a and b (and out) starting at the given byte offsets.
void check_gemm(int64_t M, int64_t N, int64_t K, bool bias, DType out_dtype, int64_t a_offset, int64_t b_offset,
                int64_t out_offset, const std::string& config = "") {
  const std::string what = "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) + " " +
                           std::string(dtype_name(out_dtype)) + " offsets " + std::to_string(a_offset) + "/" +
                           std::to_string(b_offset) + "/" + std::to_string(out_offset) + " config '" + config + "'";
  const Operands o = random_operands(M, N, K, bias);
  const std::vector<float> want = cpu_gemm(o, out_dtype, false);
  const std::vector<float> mag = cpu_gemm(o, DType::f32, true);
  const DeviceView a = device_view(o.a, a_offset), b = device_view(o.b, b_offset);
  const Tensor a_s = o.a_s.to(kGpu), b_s = o.b_s.to(kGpu);
  const Tensor bias_gpu = bias ? o.bias.to(kGpu) : Tensor();
  const DeviceView out = device_view(Tensor::empty({M, N}, out_dtype), out_offset);
  run(Fp8GemmArgs{a.ref, a_s.ref(), b.ref, b_s.ref(), bias ? bias_gpu.ref() : TensorRef{}, out.ref,
                  parse_kernel_config(config)});
  synchronize(Stream{});
  expect_close(want, mag, to_floats(out.ref), out_dtype, what);
}

TEST(CudaFp8Gemm, DeepSeekShapeMatchesCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  for (DType out_dtype : {DType::f32, DType::bf16}) check_gemm(300, 2112, 7168, false, out_dtype, 0, 0, 0);
  check_gemm(300, 2112, 7168, true, DType::f16, 0, 0, 0);
  check_gemm(300, 2112, 7168, true, DType::f32, 0, 0, 0, kF16Config);
}

TEST(CudaFp8Gemm, MisalignedViewsMatchCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  check_gemm(65, 129, 272, true, DType::f32, 1, 0, 0);
  check_gemm(65, 129, 272, true, DType::bf16, 0, 3, 2);
  check_gemm(7, 300, 144, false, DType::f16, 5, 9, 2);
  check_gemm(65, 129, 272, true, DType::f32, 1, 0, 0, kF16Config);
}

TEST(CudaFp8Gemm, ContiguousMixedTilesAndBadIds) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const int64_t M = 150, N = 200, K = 272, E = 3;
  const Tensor a = random_e4m3({M, K}), a_s = random_scales({M, blocks(K)});
  const Tensor b = random_e4m3({E, N, K}), b_s = random_scales({E, blocks(N), blocks(K)});
  // Runs not padded to any tile: each row's expert drawn at random, -1 among them.
  Tensor ids = Tensor::empty({M}, DType::i32);
  std::uniform_int_distribution<int> pick(-1, static_cast<int>(E) - 1);
  for (int64_t m = 0; m < M; ++m) ids.ptr<int32_t>()[m] = pick(rng());
  Tensor cpu_out = Tensor::empty({M, N}, DType::f32), cpu_bf16 = Tensor::empty({M, N}, DType::bf16);
  run(Fp8GroupedGemmContiguousArgs{a.ref(), a_s.ref(), b.ref(), b_s.ref(), ids.ref(), cpu_out.ref(), {}});
  run(Fp8GroupedGemmContiguousArgs{a.ref(), a_s.ref(), b.ref(), b_s.ref(), ids.ref(), cpu_bf16.ref(), {}});
  const Tensor abs_a = magnitudes(a), abs_b = magnitudes(b);
  Tensor mag_out = Tensor::empty({M, N}, DType::f32);
  run(Fp8GroupedGemmContiguousArgs{abs_a.ref(), a_s.ref(), abs_b.ref(), b_s.ref(), ids.ref(), mag_out.ref(), {}});
  // Ids the CPU rejects: the CUDA kernel writes NaN rows instead.
  const std::vector<int64_t> bad_rows{3, 64, 149};
  ids.ptr<int32_t>()[3] = static_cast<int32_t>(E);
  ids.ptr<int32_t>()[64] = -2;
  ids.ptr<int32_t>()[149] = 1000;
  const Tensor ga = a.to(kGpu), ga_s = a_s.to(kGpu), gb = b.to(kGpu), gb_s = b_s.to(kGpu), gids = ids.to(kGpu);
  // fp32 rows stored by each thread; bf16 rows through the sm_90 kernel's
  // staging buffer, where a tile's passes (one per expert) merge before one store.
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor nan = Tensor::empty({M, N}, dtype);
    std::memset(nan.data(), 0xff, nan.nbytes());  // NaN: an unwritten element shows
    Tensor out = nan.to(kGpu);
    run(Fp8GroupedGemmContiguousArgs{ga.ref(), ga_s.ref(), gb.ref(), gb_s.ref(), gids.ref(), out.ref(), {}});
    synchronize(Stream{});
    const Tensor& want = dtype == DType::f32 ? cpu_out : cpu_bf16;
    expect_close(to_floats(want.ref()), to_floats(mag_out.ref()), to_floats(out.ref()), dtype,
                 "contiguous " + std::string(dtype_name(dtype)), N, bad_rows);
  }
}

TEST(CudaFp8Gemm, MaskedGraphReplaysWithNewCounts) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  const int64_t E = 4, max_m = 70, N = 256, K = 384;
  const Tensor a = random_e4m3({E, max_m, K}), a_s = random_scales({E, max_m, blocks(K)});
  const Tensor b = random_e4m3({E, N, K}), b_s = random_scales({E, blocks(N), blocks(K)});
  const Tensor abs_a = magnitudes(a), abs_b = magnitudes(b);
  const Tensor ga = a.to(kGpu), ga_s = a_s.to(kGpu), gb = b.to(kGpu), gb_s = b_s.to(kGpu);
  Tensor counts = Tensor::empty({E}, DType::i32, kGpu);
  Tensor out = Tensor::empty({E, max_m, N}, DType::bf16, kGpu);
  // The operands' copies ran on the legacy default stream, which the graph's non-blocking stream does not wait for.
  synchronize(Stream{});

  cudaStream_t stream = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const Stream s{stream};
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  run(Fp8GroupedGemmMaskedArgs{ga.ref(), ga_s.ref(), gb.ref(), gb_s.ref(), counts.ref(), out.ref(), {}}, nullptr, s);
  LOWBIT_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  LOWBIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  // Counts past max_m and below 0 are clamped on CUDA; the CPU gets the clamped ones.
  const std::vector<std::vector<int32_t>> runs{{70, 0, 1, 65}, {3, 70, 64, 0}, {-5, 200, 17, 70}};
  for (const std::vector<int32_t>& c : runs) {
    std::vector<int32_t> clamped(c);
    for (int32_t& v : clamped) v = std::max(0, std::min(static_cast<int32_t>(max_m), v));
    // On the graph's stream: a non-blocking stream does not wait for the legacy default stream's copies.
    LOWBIT_ASSERT_CUDA(
        cudaMemcpyAsync(counts.data(), c.data(), sizeof(int32_t) * c.size(), cudaMemcpyHostToDevice, stream));
    LOWBIT_ASSERT_CUDA(cudaMemsetAsync(out.data(), 0xff, out.nbytes(), stream));  // NaN: an unwritten element shows
    LOWBIT_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
    LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(stream));

    Tensor host_counts = Tensor::empty({E}, DType::i32);
    std::copy(clamped.begin(), clamped.end(), host_counts.ptr<int32_t>());
    Tensor want = Tensor::empty({E, max_m, N}, DType::bf16), mag = Tensor::empty({E, max_m, N}, DType::f32);
    run(Fp8GroupedGemmMaskedArgs{a.ref(), a_s.ref(), b.ref(), b_s.ref(), host_counts.ref(), want.ref(), {}});
    run(Fp8GroupedGemmMaskedArgs{abs_a.ref(), a_s.ref(), abs_b.ref(), b_s.ref(), host_counts.ref(), mag.ref(), {}});
    expect_close(to_floats(want.ref()), to_floats(mag.ref()), to_floats(out.ref()), DType::bf16,
                 "masked counts " + std::to_string(c[0]) + "," + std::to_string(c[1]) + "," + std::to_string(c[2]) +
                     "," + std::to_string(c[3]));
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
#endif
}

#if defined(LOWBIT_WITH_CUDA)
bool device_is_sm90() {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major == 9 && minor == 0;
}
#endif

// The sm_90a kernel's tile shapes, each forced: ragged M, N and K (TMA's
// zero fill), one and two b_s blocks a tile, every output dtype, bias;
// 16-bit outputs through the staged TMA epilogue (out and its rows 16-byte
// aligned) and stored directly (out at an odd address, rows of 130 columns).
const char* const kWgmmaConfigs[] = {"wgmma_e4m3_x2_m256_n128_k128_s3", "wgmma_e4m3_m256_n128_k128_s3",
                                     "wgmma_e4m3_x2_m128_n128_k128_s5", "wgmma_e4m3_m128_n128_k128_s5",
                                     "wgmma_e4m3_m128_n64_k128_s8",     "wgmma_e4m3_m64_n128_k128_s8",
                                     "wgmma_e4m3_m64_n64_k128_s8",      "wgmma_e4m3_m64_n32_k128_s8",
                                     "wgmma_e4m3_m64_n16_k128_s8"};

TEST(CudaFp8Gemm, WgmmaConfigsMatchCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  if (!device_is_sm90()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 device";
  {  // the backend lists every one of them
    const Operands o = random_operands(64, 256, 256, false);
    const Tensor a = o.a.to(kGpu), a_s = o.a_s.to(kGpu), b = o.b.to(kGpu), b_s = o.b_s.to(kGpu);
    Tensor out = Tensor::empty({64, 256}, DType::bf16, kGpu);
    const std::vector<KernelConfig> listed =
        kernel_configs(Fp8GemmArgs{a.ref(), a_s.ref(), b.ref(), b_s.ref(), {}, out.ref(), {}});
    for (const char* config : kWgmmaConfigs) {
      EXPECT_NE(std::find(listed.begin(), listed.end(), parse_kernel_config(config)), listed.end()) << config;
    }
  }
  int i = 0;
  for (const char* config : kWgmmaConfigs) {
    check_gemm(1, 16, 16, false, DType::bf16, 0, 0, 0, config);
    check_gemm(200, 300, 400, i % 2 == 0, DType::f32, 0, 0, 0, config);
    check_gemm(129, 136, 1040, i % 2 == 1, i % 3 == 0 ? DType::f16 : DType::bf16, 0, 0, 2, config);
    check_gemm(300, 136, 1040, i % 2 == 0, i % 3 == 0 ? DType::bf16 : DType::f16, 0, 0, 0, config);
    check_gemm(77, 130, 272, true, DType::bf16, 0, 0, 0, config);
    ++i;
  }
#endif
}

// The contiguous layout as a router writes it (runs padded to 128 rows with
// -1, an expert with no rows) and the masked layout, under each tile shape.
TEST(CudaFp8Gemm, WgmmaGroupedLayoutsMatchCpu) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  if (!device_is_sm90()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 device";
  const int64_t E = 4, N = 272, K = 512;
  const std::vector<int64_t> run_rows{130, 0, 5, 128};
  int64_t M = 0;
  for (int64_t r : run_rows) M += (r + 127) / 128 * 128;
  const Tensor a = random_e4m3({M, K}), a_s = random_scales({M, blocks(K)});
  const Tensor b = random_e4m3({E, N, K}), b_s = random_scales({E, blocks(N), blocks(K)});
  Tensor ids = Tensor::empty({M}, DType::i32);
  int64_t m = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t padded = (run_rows[e] + 127) / 128 * 128;
    for (int64_t r = 0; r < padded; ++r) ids.ptr<int32_t>()[m++] = r < run_rows[e] ? static_cast<int32_t>(e) : -1;
  }
  Tensor want = Tensor::empty({M, N}, DType::f32), mag = Tensor::empty({M, N}, DType::f32);
  const Tensor abs_a = magnitudes(a), abs_b = magnitudes(b);
  run(Fp8GroupedGemmContiguousArgs{a.ref(), a_s.ref(), b.ref(), b_s.ref(), ids.ref(), want.ref(), {}});
  run(Fp8GroupedGemmContiguousArgs{abs_a.ref(), a_s.ref(), abs_b.ref(), b_s.ref(), ids.ref(), mag.ref(), {}});
  const Tensor ga = a.to(kGpu), ga_s = a_s.to(kGpu), gb = b.to(kGpu), gb_s = b_s.to(kGpu), gids = ids.to(kGpu);

  const int64_t max_m = 72;
  const Tensor ma = random_e4m3({E, max_m, K}), ma_s = random_scales({E, max_m, blocks(K)});
  Tensor counts = Tensor::empty({E}, DType::i32);
  const int32_t c[] = {72, 0, 1, 65};
  std::copy(std::begin(c), std::end(c), counts.ptr<int32_t>());
  Tensor mwant = Tensor::empty({E, max_m, N}, DType::bf16), mmag = Tensor::empty({E, max_m, N}, DType::f32);
  const Tensor abs_ma = magnitudes(ma);
  run(Fp8GroupedGemmMaskedArgs{ma.ref(), ma_s.ref(), b.ref(), b_s.ref(), counts.ref(), mwant.ref(), {}});
  run(Fp8GroupedGemmMaskedArgs{abs_ma.ref(), ma_s.ref(), abs_b.ref(), b_s.ref(), counts.ref(), mmag.ref(), {}});
  const Tensor gma = ma.to(kGpu), gma_s = ma_s.to(kGpu), gcounts = counts.to(kGpu);

  for (const char* config : kWgmmaConfigs) {
    Tensor out = Tensor::empty({M, N}, DType::f32, kGpu);
    LOWBIT_ASSERT_CUDA(cudaMemset(out.data(), 0xff, out.nbytes()));  // NaN: an unwritten element shows
    run(Fp8GroupedGemmContiguousArgs{ga.ref(), ga_s.ref(), gb.ref(), gb_s.ref(), gids.ref(), out.ref(),
                                     parse_kernel_config(config)});
    Tensor mout = Tensor::empty({E, max_m, N}, DType::bf16, kGpu);
    LOWBIT_ASSERT_CUDA(cudaMemset(mout.data(), 0xff, mout.nbytes()));
    run(Fp8GroupedGemmMaskedArgs{gma.ref(), gma_s.ref(), gb.ref(), gb_s.ref(), gcounts.ref(), mout.ref(),
                                 parse_kernel_config(config)});
    synchronize(Stream{});
    expect_close(to_floats(want.ref()), to_floats(mag.ref()), to_floats(out.ref()), DType::f32,
                 std::string("contiguous, padded runs, config ") + config, N);
    expect_close(to_floats(mwant.ref()), to_floats(mmag.ref()), to_floats(mout.ref()), DType::bf16,
                 std::string("masked, config ") + config, N);
  }
#endif
}

// Tiles of several experts (their passes merge in the staging buffer before
// one store) beside tiles of one expert and of padding, in every config.
TEST(CudaFp8Gemm, WgmmaContiguousMixedTilesEveryConfig) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  if (!device_is_sm90()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 device";
  const int64_t M = 700, N = 264, K = 640, E = 3;
  const Tensor a = random_e4m3({M, K}), a_s = random_scales({M, blocks(K)});
  const Tensor b = random_e4m3({E, N, K}), b_s = random_scales({E, blocks(N), blocks(K)});
  // Rows [0, 256) one expert, [256, 512) padding and one expert, the rest drawn at random.
  Tensor ids = Tensor::empty({M}, DType::i32);
  std::uniform_int_distribution<int> pick(-1, static_cast<int>(E) - 1);
  for (int64_t m = 0; m < M; ++m) {
    ids.ptr<int32_t>()[m] = m < 256 ? 2 : m < 512 ? (m % 3 == 0 ? -1 : 0) : pick(rng());
  }
  Tensor want = Tensor::empty({M, N}, DType::bf16), mag = Tensor::empty({M, N}, DType::f32);
  const Tensor abs_a = magnitudes(a), abs_b = magnitudes(b);
  run(Fp8GroupedGemmContiguousArgs{a.ref(), a_s.ref(), b.ref(), b_s.ref(), ids.ref(), want.ref(), {}});
  run(Fp8GroupedGemmContiguousArgs{abs_a.ref(), a_s.ref(), abs_b.ref(), b_s.ref(), ids.ref(), mag.ref(), {}});
  const Tensor ga = a.to(kGpu), ga_s = a_s.to(kGpu), gb = b.to(kGpu), gb_s = b_s.to(kGpu), gids = ids.to(kGpu);
  for (const char* config : kWgmmaConfigs) {
    Tensor out = Tensor::empty({M, N}, DType::bf16, kGpu);
    LOWBIT_ASSERT_CUDA(cudaMemset(out.data(), 0xff, out.nbytes()));  // NaN: an unwritten element shows
    run(Fp8GroupedGemmContiguousArgs{ga.ref(), ga_s.ref(), gb.ref(), gb_s.ref(), gids.ref(), out.ref(),
                                     parse_kernel_config(config)});
    synchronize(Stream{});
    expect_close(to_floats(want.ref()), to_floats(mag.ref()), to_floats(out.ref()), DType::bf16,
                 std::string("contiguous mixed tiles, config ") + config, N);
  }
#endif
}

TEST(CudaFp8Gemm, UnknownConfigIsInvalidArgument) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const Operands o = random_operands(4, 16, 32, false);
  const Tensor a = o.a.to(kGpu), a_s = o.a_s.to(kGpu), b = o.b.to(kGpu), b_s = o.b_s.to(kGpu);
  Tensor out = Tensor::empty({4, 16}, DType::f32, kGpu);
  Fp8GemmArgs args{a.ref(), a_s.ref(), b.ref(), b_s.ref(), {}, out.ref(), {}};
  args.config = parse_kernel_config("mma_m64_n128_s3");
  expect_error([&] { run(args); }, ErrorCode::invalid_argument, {"fp8_gemm", "mma_m64_n128_s3", "not a cuda"});
  args.config = parse_kernel_config(kF16Config);
  run(args);
  synchronize(Stream{});
}

}  // namespace
