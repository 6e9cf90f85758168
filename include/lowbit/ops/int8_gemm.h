// The int8 GEMMs of LLM.int8 (docs/int8.md): bitsandbytes' int8_linear_matmul,
// int8_mm_dequant and their fusion int8_scaled_mm.
//
//   int8_linear_matmul: out[m, n] = sum_k a[m, k] * b[n, k], exact in int32
//     (|out| <= K * 128 * 128 stays below 2^31 for K < 131072).
//   int8_mm_dequant: out[m, n] = float(c[m, n]) * (row_stats[m] * col_stats[n])
//     * (1 / 127^2) (+ bias[n]), each step in fp32 in that order, rounded
//     once to out's dtype: row_stats and col_stats are the absmax of a's rows
//     and b's rows that int8_vectorwise_quant writes.
//   int8_scaled_mm: int8_mm_dequant(int8_linear_matmul(a, b), ...) in one
//     op, the same result bit for bit.
#pragma once

#include <cstdint>

#include <vector>

#include "lowbit/ops/declare_op.h"
#include "lowbit/ops/kernel_config.h"
#include "lowbit/tensor.h"

namespace lowbit {

// The largest K the int32 products hold exactly (K * 128 * 128 < 2^31).
inline constexpr int64_t kInt8GemmMaxK = (int64_t{1} << 31) / (128 * 128) - 1;

// 1 / 127^2 in fp32: int8_mm_dequant's constant.
inline constexpr float kInt8DequantScale = 1.0f / (127.0f * 127.0f);

struct Int8LinearMatmulArgs {
  static constexpr const char* kName = "int8_linear_matmul";
  TensorRef a;    // i8 [..., K], contiguous (rows: every leading dim)
  TensorRef b;    // i8 [N, K], contiguous
  TensorRef out;  // i32 [..., N]: a's leading dims
  KernelConfig config;  // empty: the backend's pick; else one of kernel_configs(args)
};

struct Int8MmDequantArgs {
  static constexpr const char* kName = "int8_mm_dequant";
  TensorRef a;          // i32 [..., N], contiguous
  TensorRef row_stats;  // f32 [rows] (rows: a's leading dims)
  TensorRef col_stats;  // f32 [N]
  TensorRef bias;       // optional f32/f16/bf16 [N]
  TensorRef out;        // f32/f16/bf16 [..., N]
};

struct Int8ScaledMmArgs {
  static constexpr const char* kName = "int8_scaled_mm";
  TensorRef a;          // i8 [..., K], contiguous
  TensorRef b;          // i8 [N, K], contiguous
  TensorRef row_stats;  // f32 [rows]
  TensorRef col_stats;  // f32 [N]
  TensorRef bias;       // optional f32/f16/bf16 [N]
  TensorRef out;        // f32/f16/bf16 [..., N]
  KernelConfig config;  // empty: the backend's pick; else one of kernel_configs(args)
};

LOWBIT_DECLARE_OP(Int8LinearMatmulArgs)
LOWBIT_DECLARE_OP(Int8MmDequantArgs)
LOWBIT_DECLARE_OP(Int8ScaledMmArgs)

// The kernel configs the backend of a's device can run for the call, best
// first (empty where it has none to choose); any of them may go in args.config.
std::vector<KernelConfig> kernel_configs(const Int8LinearMatmulArgs& args);
std::vector<KernelConfig> kernel_configs(const Int8ScaledMmArgs& args);

// Allocating front ends: out on a's device.
Tensor int8_linear_matmul(const TensorRef& a, const TensorRef& b, Stream stream = {});
Tensor int8_mm_dequant(const TensorRef& a, const TensorRef& row_stats, const TensorRef& col_stats,
                       DType out_dtype = DType::f16, const TensorRef& bias = {}, Stream stream = {});
Tensor int8_scaled_mm(const TensorRef& a, const TensorRef& b, const TensorRef& row_stats, const TensorRef& col_stats,
                      DType out_dtype = DType::f16, const TensorRef& bias = {}, Stream stream = {});

}  // namespace lowbit
