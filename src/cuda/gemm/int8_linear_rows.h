// int8_linear for a few rows of activations in one kernel after the
// quantization (int8_linear_rows.cu; docs/int8.md, "Few rows").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lowbit/ops/int8_gemm.h"
#include "lowbit/ops/kernel_config.h"

namespace lowbit::cuda {

// The most rows of activations the kernel takes.
inline constexpr int64_t kInt8LinearRowsMax = 32;

// Its config for `rows` rows (<= kInt8LinearRowsMax): "rows_i8_m16..." or "..._m32...".
KernelConfig int8_linear_rows_config(int64_t rows);
bool is_int8_linear_rows_config(const KernelConfig& config);

// out = int8_linear(a's rows) from the quantization's outputs
// (int8_linear_quant_bits on the same stream just before: q, row_stats,
// row_bits, null where threshold is 0). rows in [1, kInt8LinearRowsMax], N > 0.
void int8_linear_rows(const Int8LinearArgs& a, const int8_t* q, const float* row_stats, const uint32_t* row_bits,
                      cudaStream_t stream);

}  // namespace lowbit::cuda
