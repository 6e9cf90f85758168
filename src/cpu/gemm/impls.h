// The CPU matmul implementations, registered by register_gemm_ops():
// "cpu-reference" (priority 0: dequantize to fp32, float64 dot products) and
// "cpu" (priority 10: tiles of W dequantized to fp32, OpenMP, vectorized).
#pragma once

#include <vector>

#include "lowbit/ops/fp8_gemm.h"
#include "lowbit/ops/gemm.h"
#include "lowbit/ops/int8_gemm.h"

namespace lowbit::core::cpu {

void matmul_reference(const MatmulArgs& a, void* workspace, Stream stream);
size_t matmul_reference_workspace(const MatmulArgs& a);
void matmul_4bit_reference(const Matmul4bitArgs& a, void* workspace, Stream stream);
size_t matmul_4bit_reference_workspace(const Matmul4bitArgs& a);

void matmul_fast(const MatmulArgs& a, void* workspace, Stream stream);
size_t matmul_fast_workspace(const MatmulArgs& a);
std::vector<KernelConfig> matmul_fast_configs(const MatmulArgs& a);
void matmul_4bit_fast(const Matmul4bitArgs& a, void* workspace, Stream stream);
size_t matmul_4bit_fast_workspace(const Matmul4bitArgs& a);
std::vector<KernelConfig> matmul_4bit_fast_configs(const Matmul4bitArgs& a);

// Throws invalid_argument unless config is empty: ops whose cpu backend has one kernel and no configs.
void require_cpu_config(const char* op, const KernelConfig& config);

// The block-scaled FP8 GEMMs (fp8_gemm.cpp): float64 references and the fast paths.
void fp8_gemm_reference(const Fp8GemmArgs& a, void* workspace, Stream stream);
void fp8_gemm_fast(const Fp8GemmArgs& a, void* workspace, Stream stream);
void fp8_grouped_contiguous_reference(const Fp8GroupedGemmContiguousArgs& a, void* workspace, Stream stream);
void fp8_grouped_contiguous_fast(const Fp8GroupedGemmContiguousArgs& a, void* workspace, Stream stream);
void fp8_grouped_masked_reference(const Fp8GroupedGemmMaskedArgs& a, void* workspace, Stream stream);
void fp8_grouped_masked_fast(const Fp8GroupedGemmMaskedArgs& a, void* workspace, Stream stream);

// The int8 GEMMs (int8_gemm.cpp): int64 references and the tiled paths; the
// dequantization is one formula, so int8_mm_dequant has one implementation.
void int8_linear_matmul_reference(const Int8LinearMatmulArgs& a, void* workspace, Stream stream);
void int8_linear_matmul_fast(const Int8LinearMatmulArgs& a, void* workspace, Stream stream);
void int8_mm_dequant_cpu(const Int8MmDequantArgs& a, void* workspace, Stream stream);
void int8_scaled_mm_reference(const Int8ScaledMmArgs& a, void* workspace, Stream stream);
void int8_scaled_mm_fast(const Int8ScaledMmArgs& a, void* workspace, Stream stream);
void int8_linear_outliers_cpu(const Int8LinearOutliersArgs& a, void* workspace, Stream stream);
void int8_linear_grad_input_cpu(const Int8LinearGradInputArgs& a, void* workspace, Stream stream);
void int8_linear_cpu(const Int8LinearArgs& a, void* workspace, Stream stream);

}  // namespace lowbit::core::cpu
