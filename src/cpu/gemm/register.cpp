#include "cpu/register.h"

#include "core/check.h"
#include "core/registry.h"
#include "cpu/gemm/impls.h"

namespace lowbit::core::cpu {

void require_cpu_config(const char* op, const KernelConfig& config) {
  LOWBIT_REQUIRE(config.empty(), ErrorCode::invalid_argument, op, ": config '", config.name(),
                 "' is not a cpu kernel config (the cpu backend has one kernel and no configs)");
}

void register_gemm_ops() {
  constexpr DeviceType kCpu = DeviceType::cpu;
  OpRegistry<MatmulArgs>::add({"cpu-reference", kCpu, 0, matmul_reference, matmul_reference_workspace});
  OpRegistry<MatmulArgs>::add({"cpu", kCpu, 10, matmul_fast, matmul_fast_workspace, matmul_fast_configs});
  OpRegistry<Matmul4bitArgs>::add({"cpu-reference", kCpu, 0, matmul_4bit_reference, matmul_4bit_reference_workspace});
  OpRegistry<Matmul4bitArgs>::add(
      {"cpu", kCpu, 10, matmul_4bit_fast, matmul_4bit_fast_workspace, matmul_4bit_fast_configs});
  OpRegistry<Fp8GemmArgs>::add({"cpu-reference", kCpu, 0, fp8_gemm_reference});
  OpRegistry<Fp8GemmArgs>::add({"cpu", kCpu, 10, fp8_gemm_fast});
  OpRegistry<Fp8GroupedGemmContiguousArgs>::add({"cpu-reference", kCpu, 0, fp8_grouped_contiguous_reference});
  OpRegistry<Fp8GroupedGemmContiguousArgs>::add({"cpu", kCpu, 10, fp8_grouped_contiguous_fast});
  OpRegistry<Fp8GroupedGemmMaskedArgs>::add({"cpu-reference", kCpu, 0, fp8_grouped_masked_reference});
  OpRegistry<Fp8GroupedGemmMaskedArgs>::add({"cpu", kCpu, 10, fp8_grouped_masked_fast});
  OpRegistry<Int8LinearMatmulArgs>::add({"cpu-reference", kCpu, 0, int8_linear_matmul_reference});
  OpRegistry<Int8LinearMatmulArgs>::add({"cpu", kCpu, 10, int8_linear_matmul_fast});
  OpRegistry<Int8MmDequantArgs>::add({"cpu", kCpu, 10, int8_mm_dequant_cpu});
  OpRegistry<Int8ScaledMmArgs>::add({"cpu-reference", kCpu, 0, int8_scaled_mm_reference});
  OpRegistry<Int8ScaledMmArgs>::add({"cpu", kCpu, 10, int8_scaled_mm_fast});
  OpRegistry<Int8LinearOutliersArgs>::add({"cpu", kCpu, 10, int8_linear_outliers_cpu});
  OpRegistry<Int8LinearGradInputArgs>::add({"cpu", kCpu, 10, int8_linear_grad_input_cpu});
  OpRegistry<Int8LinearArgs>::add({"cpu", kCpu, 10, int8_linear_cpu});
}

}  // namespace lowbit::core::cpu
