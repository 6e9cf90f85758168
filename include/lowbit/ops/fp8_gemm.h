// Block-scaled FP8 GEMM (DeepSeek-V3) and the grouped GEMMs of mixture-of-
// experts layers (docs/fp8_gemm.md).
//
// Operands as act_quant and weight_quant write them: a e4m3 with fp32 scales
// over 1 x 128 blocks of K, b e4m3 [N, K] with fp32 scales over 128 x 128
// blocks. For each output element
//   out[m, n] = sum over K blocks kb of
//               (sum_{k in kb} a[m, k] * b[n, k]) * a_s[m, kb] * b_s[n / 128, kb]
// (+ bias[n]): each block's products summed on their own, then scaled, then
// added to the running sum. K is a multiple of 16; the last K block may be
// shorter than 128. Scales are any positive floats (ue8m0 powers of two
// included); NaN and Inf propagate as in IEEE arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "lowbit/ops/declare_op.h"
#include "lowbit/ops/kernel_config.h"
#include "lowbit/tensor.h"

namespace lowbit {

// The K (and weight N) extent of one scale.
inline constexpr int64_t kFp8ScaleBlock = 128;

// The CUDA kernels' error bound, relative to the sum of the terms'
// magnitudes (|a| |b| scaled, plus |bias|), before the output's rounding:
// Hopper's FP8 tensor cores align each step's products to the largest and
// keep fewer bits than fp32 (random codes of every exponent come within a
// third of it; the CPU's bound is fp32's, 1e-5).
inline constexpr double kFp8TensorCoreError = 1.0 / 512;

struct Fp8GemmArgs {
  static constexpr const char* kName = "fp8_gemm";
  TensorRef a;     // f8_e4m3 [..., K], contiguous (rows: every leading dim)
  TensorRef a_s;   // f32 [..., ceil(K / 128)]: a's leading dims
  TensorRef b;     // f8_e4m3 [N, K], contiguous
  TensorRef b_s;   // f32 [ceil(N / 128), ceil(K / 128)]
  TensorRef bias;  // optional f32 [N]
  TensorRef out;   // f32/f16/bf16 [..., N]: a's leading dims
  KernelConfig config;
};

// The contiguous grouped layout: every expert's rows in one a, each row
// tagged with its expert (runs padded to the kernels' M tile by the router).
// Rows tagged -1 are padding: their output rows are zeros.
struct Fp8GroupedGemmContiguousArgs {
  static constexpr const char* kName = "fp8_grouped_gemm_contiguous";
  TensorRef a;          // f8_e4m3 [M, K]
  TensorRef a_s;        // f32 [M, ceil(K / 128)]
  TensorRef b;          // f8_e4m3 [E, N, K]
  TensorRef b_s;        // f32 [E, ceil(N / 128), ceil(K / 128)]
  TensorRef m_indices;  // i32 [M]: the expert of each row in [0, E), or -1
  TensorRef out;        // f32/f16/bf16 [M, N]
  KernelConfig config;
};

// The masked grouped layout (decode under CUDA graphs): expert e's first
// masked_m[e] rows of a[e] are valid, the rest are not read and their output
// rows are zeros. masked_m lives on a's device; no call reads it on the host.
struct Fp8GroupedGemmMaskedArgs {
  static constexpr const char* kName = "fp8_grouped_gemm_masked";
  TensorRef a;         // f8_e4m3 [E, max_m, K]
  TensorRef a_s;       // f32 [E, max_m, ceil(K / 128)]
  TensorRef b;         // f8_e4m3 [E, N, K]
  TensorRef b_s;       // f32 [E, ceil(N / 128), ceil(K / 128)]
  TensorRef masked_m;  // i32 [E], each in [0, max_m]
  TensorRef out;       // f32/f16/bf16 [E, max_m, N]
  KernelConfig config;
};

LOWBIT_DECLARE_OP(Fp8GemmArgs)
LOWBIT_DECLARE_OP(Fp8GroupedGemmContiguousArgs)
LOWBIT_DECLARE_OP(Fp8GroupedGemmMaskedArgs)

// The kernel configs the backend of a's device can run for the call, best
// first (empty where it has none to choose); any of them may go in args.config.
std::vector<KernelConfig> kernel_configs(const Fp8GemmArgs& args);
std::vector<KernelConfig> kernel_configs(const Fp8GroupedGemmContiguousArgs& args);
std::vector<KernelConfig> kernel_configs(const Fp8GroupedGemmMaskedArgs& args);

// Allocating front ends: out on a's device, of out_dtype; config as in the args.
Tensor fp8_gemm(const TensorRef& a, const TensorRef& a_s, const TensorRef& b, const TensorRef& b_s,
                DType out_dtype = DType::bf16, const TensorRef& bias = {}, Stream stream = {},
                const KernelConfig& config = {});
Tensor fp8_grouped_gemm_contiguous(const TensorRef& a, const TensorRef& a_s, const TensorRef& b, const TensorRef& b_s,
                                   const TensorRef& m_indices, DType out_dtype = DType::bf16, Stream stream = {},
                                   const KernelConfig& config = {});
Tensor fp8_grouped_gemm_masked(const TensorRef& a, const TensorRef& a_s, const TensorRef& b, const TensorRef& b_s,
                               const TensorRef& masked_m, DType out_dtype = DType::bf16, Stream stream = {},
                               const KernelConfig& config = {});

}  // namespace lowbit
