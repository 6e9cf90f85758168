// fp8_gemm, fp8_grouped_gemm_contiguous and fp8_grouped_gemm_masked on CUDA:
// the three layouts fill fp8g::Params for the one tile kernel (fp8_gemm.cuh).
// No call reads device data on the host, synchronizes or allocates, so every
// call can be captured in a CUDA graph.
#include <cstdint>

#include "core/check.h"
#include "core/hd.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/gemm/fp8_gemm.cuh"
#include "cuda/gemm/ops.h"

namespace lowbit::cuda {
namespace {

using fp8g::kBM;
using fp8g::kBN;

// The kernel's two inner products by name: e4m3 tensor cores (sm_89+ code)
// and e4m3 decoded to f16. An empty config: e4m3 where the loaded code has it.
KernelConfig config_named(const char* family) { return KernelConfig{family, kBM, kBN, fp8g::kBK, fp8g::kStages}; }
const KernelConfig& e4m3_config() {
  static const KernelConfig c = config_named("mma_e4m3");
  return c;
}
const KernelConfig& f16_config() {
  static const KernelConfig c = config_named("mma_f16");
  return c;
}

void require_cuda_config(const char* op, const KernelConfig& config) {
  LOWBIT_REQUIRE(config.empty() || config == e4m3_config() || config == f16_config(), ErrorCode::invalid_argument, op,
                 ": config '", config.name(), "' is not a cuda kernel config (expected '", e4m3_config().name(),
                 "' or '", f16_config().name(), "')");
}

// p's operands with rows, N and K; every layout field left empty.
fp8g::Params base_params(const TensorRef& a, const TensorRef& a_s, const TensorRef& b, const TensorRef& b_s,
                         const TensorRef& out, int64_t rows, int64_t N, int64_t K) {
  fp8g::Params p{};
  p.a = a.ptr<const uint8_t>();
  p.a_s = a_s.ptr<const float>();
  p.b = b.ptr<const uint8_t>();
  p.b_s = b_s.ptr<const float>();
  p.out = out.data;
  p.rows = rows;
  p.N = N;
  p.K = K;
  p.kb = static_cast<int>(ceil_div(K, kFp8ScaleBlock));
  p.experts = 1;
  return p;
}

template <class Out, bool kAsync, bool kFp8Mma>
void launch_tiles(const char* op, const fp8g::Params& p, int64_t slices, cudaStream_t stream) {
  auto* kernel = &fp8g::fp8_gemm_tiles<Out, kAsync, kFp8Mma>;
  // Over 48 KB of dynamic shared memory needs the opt-in (a host-side attribute, capture-safe).
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(fp8g::kSmem)), op,
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  const dim3 grid(static_cast<unsigned>(ceil_div(p.rows, kBM)), static_cast<unsigned>(ceil_div(p.N, kBN)),
                  static_cast<unsigned>(slices));
  kernel<<<grid, fp8g::kThreads, fp8g::kSmem, stream>>>(p);
  check_launch(op, "fp8_gemm_tiles");
}

// Whether the code the device loads for the kernel is sm_89+ (a build
// without sm_89 code runs its sm_80 code on an sm_89 GPU).
bool has_fp8_mma(const char* op) {
  cudaFuncAttributes attr{};
  check(cudaFuncGetAttributes(&attr, &fp8g::fp8_gemm_tiles<float, true, true>), op, "cudaFuncGetAttributes");
  return attr.binaryVersion >= 89;
}

// `slices` grid slices (experts of the masked layout, else 1) on out's dtype;
// cp.async when a and b start 16-byte aligned (their rows then do too: K % 16 == 0).
void launch(const char* op, const fp8g::Params& p, int64_t slices, DType out_dtype, const KernelConfig& config,
            int device, Stream stream) {
  if (p.rows == 0 || p.N == 0) return;
  LOWBIT_REQUIRE(ceil_div(p.rows, kBM) <= INT32_MAX && ceil_div(p.N, kBN) <= 65535 && slices <= 65535,
                 ErrorCode::invalid_argument, op, ": shape too large for the cuda kernel's grid (rows ", p.rows, ", N ",
                 p.N, ", experts ", slices, ")");
  DeviceGuard guard(device, op);
  const bool fp8_mma = config != f16_config() && has_fp8_mma(op);
  LOWBIT_REQUIRE(fp8_mma || config != e4m3_config(), ErrorCode::invalid_argument, op, ": config '", config.name(),
                 "' needs sm_89+ code for this device (this build runs its sm_80 code here)");
  const bool async = aligned16(p.a) && aligned16(p.b);
  with_float_type(out_dtype, op, "out", [&](auto t) {
    using Out = decltype(t);
    if (async && fp8_mma) launch_tiles<Out, true, true>(op, p, slices, to_cuda(stream));
    if (async && !fp8_mma) launch_tiles<Out, true, false>(op, p, slices, to_cuda(stream));
    if (!async && fp8_mma) launch_tiles<Out, false, true>(op, p, slices, to_cuda(stream));
    if (!async && !fp8_mma) launch_tiles<Out, false, false>(op, p, slices, to_cuda(stream));
  });
}

}  // namespace

void fp8_gemm(const Fp8GemmArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = Fp8GemmArgs::kName;
  require_cuda_config(op, a.config);
  const int64_t K = a.a.size(-1);
  fp8g::Params p = base_params(a.a, a.a_s, a.b, a.b_s, a.out, a.a.numel() / K, a.b.shape[0], K);
  p.bias = a.bias.present() ? a.bias.ptr<const float>() : nullptr;
  launch(op, p, 1, a.out.dtype, a.config, a.a.device.index, stream);
}

void fp8_grouped_gemm_contiguous(const Fp8GroupedGemmContiguousArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = Fp8GroupedGemmContiguousArgs::kName;
  require_cuda_config(op, a.config);
  fp8g::Params p = base_params(a.a, a.a_s, a.b, a.b_s, a.out, a.a.shape[0], a.b.shape[1], a.b.shape[2]);
  p.m_indices = a.m_indices.ptr<const int32_t>();
  LOWBIT_REQUIRE(a.b.shape[0] <= INT32_MAX, ErrorCode::invalid_argument, op, ": too many experts (", a.b.shape[0], ")");
  p.experts = static_cast<int>(a.b.shape[0]);
  launch(op, p, 1, a.out.dtype, a.config, a.a.device.index, stream);
}

void fp8_grouped_gemm_masked(const Fp8GroupedGemmMaskedArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = Fp8GroupedGemmMaskedArgs::kName;
  require_cuda_config(op, a.config);
  fp8g::Params p = base_params(a.a, a.a_s, a.b, a.b_s, a.out, a.a.shape[1], a.b.shape[1], a.b.shape[2]);
  p.masked_m = a.masked_m.ptr<const int32_t>();
  p.experts = static_cast<int>(a.a.shape[0]);  // at most 65535: launch checks the grid
  launch(op, p, a.a.shape[0], a.out.dtype, a.config, a.a.device.index, stream);
}

}  // namespace lowbit::cuda
