// The CUDA implementations of the matmul op (MatmulArgs) and the block-scaled
// FP8 GEMMs, registered as "cuda" by register_cuda_backend()
// (src/cuda/backend.cu). The matmul reads the `rows` layout; docs/gemm.md and
// docs/fp8_gemm.md describe the kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/registry.h"
#include "lowbit/ops/fp8_gemm.h"
#include "lowbit/ops/gemm.h"
#include "lowbit/ops/int8_gemm.h"

namespace lowbit::cuda {

void matmul(const MatmulArgs& a, void* workspace, Stream stream);
size_t matmul_workspace(const MatmulArgs& a);
// The kernel configs MatmulArgs::config may name for these arguments, the
// heuristic's first (kernel_configs); none when A has no rows.
std::vector<KernelConfig> matmul_configs(const MatmulArgs& a);
// The plan for calls of a's shape (its device, rows, format, dtypes, config
// and A's alignment), made without the per-thread cache; A has rows.
std::shared_ptr<const core::PreparedOp<MatmulArgs>> matmul_prepare(const MatmulArgs& a);
// bitsandbytes matmul_4bit on a 4-bit QuantState (Matmul4bitArgs). The
// workspace holds the dequantized weight and cuBLASLt's scratch on the paths
// that use them (zero bytes otherwise).
void matmul_4bit(const Matmul4bitArgs& a, void* workspace, Stream stream);
size_t matmul_4bit_workspace(const Matmul4bitArgs& a);
// The paths Matmul4bitArgs::config may name for these arguments, the
// heuristic's first: "fused", "dequant_gemm", "cuda_core".
std::vector<KernelConfig> matmul_4bit_configs(const Matmul4bitArgs& a);

// The FP8 block GEMMs (lowbit/ops/fp8_gemm.h): one tile kernel, no workspace.
// config: empty, "mma_e4m3_m64_n128_k128_s3" (FP8 tensor cores, sm_89+ code)
// or "mma_f16_m64_n128_k128_s3" (e4m3 decoded to f16); others are invalid_argument.
void fp8_gemm(const Fp8GemmArgs& a, void* workspace, Stream stream);
void fp8_grouped_gemm_contiguous(const Fp8GroupedGemmContiguousArgs& a, void* workspace, Stream stream);
void fp8_grouped_gemm_masked(const Fp8GroupedGemmMaskedArgs& a, void* workspace, Stream stream);
// Their kernel configs for the call, best first.
std::vector<KernelConfig> fp8_gemm_configs(const Fp8GemmArgs& a);
std::vector<KernelConfig> fp8_grouped_gemm_contiguous_configs(const Fp8GroupedGemmContiguousArgs& a);
std::vector<KernelConfig> fp8_grouped_gemm_masked_configs(const Fp8GroupedGemmMaskedArgs& a);

// The int8 GEMMs (lowbit/ops/int8_gemm.h; docs/int8.md): the sm_90a wgmma
// kernel where it fits, else the mma.sync kernel; no workspace. The configs
// list the kernels the call can run, best first.
void int8_linear_matmul(const Int8LinearMatmulArgs& a, void* workspace, Stream stream);
void int8_scaled_mm(const Int8ScaledMmArgs& a, void* workspace, Stream stream);
void int8_mm_dequant(const Int8MmDequantArgs& a, void* workspace, Stream stream);
std::vector<KernelConfig> int8_linear_matmul_configs(const Int8LinearMatmulArgs& a);
std::vector<KernelConfig> int8_scaled_mm_configs(const Int8ScaledMmArgs& a);
// LLM.int8's outlier part (int8_outliers.cu); the workspace holds the marked columns' list and count.
void int8_linear_outliers(const Int8LinearOutliersArgs& a, void* workspace, Stream stream);
size_t int8_linear_outliers_workspace(const Int8LinearOutliersArgs& a);
// int8_linear_outliers with the marked columns already listed: outliers = {count, columns ascending} on the device.
void int8_linear_outlier_terms(const Int8LinearOutliersArgs& a, const int32_t* outliers, Stream stream);
// LLM.int8's input gradient (int8_grad_input.cu): the CPU's sums in the CPU's order.
void int8_linear_grad_input(const Int8LinearGradInputArgs& a, void* workspace, Stream stream);
void int8_linear(const Int8LinearArgs& a, void* workspace, Stream stream);
// The quantized activations, their statistics, the outlier mask and list.
size_t int8_linear_workspace(const Int8LinearArgs& a);
std::vector<KernelConfig> int8_linear_configs(const Int8LinearArgs& a);

}  // namespace lowbit::cuda
