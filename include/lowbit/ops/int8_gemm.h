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

// LLM.int8's outlier part, added into out in place: for the columns k of a
// whose outlier_mask[k] is set (int8_vectorwise_quant's mask),
//   out[m, n] = round(float(out[m, n]) + sum_k a[m, k] * w[n, k]),
//   w[n, k] = int8_decode(b[n, k], b_stats[n]) (int8_vectorwise_dequant's rule),
// the sum in fp32 over ascending k, each product and sum rounded separately,
// rounded once to out's dtype. The mask stays on a's device: no call reads it on the host.
struct Int8LinearOutliersArgs {
  static constexpr const char* kName = "int8_linear_outliers";
  TensorRef a;             // f32/f16/bf16 [..., K], contiguous
  TensorRef outlier_mask;  // u8 [K]
  TensorRef b;             // i8 [N, K], contiguous
  TensorRef b_stats;       // f32 [N]
  TensorRef out;           // a's dtype [..., N], updated
};

// The input gradient of int8_linear (bitsandbytes' MatMul8bitLt backward on
// an int8 weight): grad_a = grad_out @ w, w[n, k] = int8_decode(b[n, k],
// b_stats[n]) as int8_linear_outliers reads it,
//   grad_a[m, k] = round(sum_n grad_out[m, n] * w[n, k]),
// in fp32 over ascending n, each product and sum rounded separately, one
// rounding to grad_out's dtype.
struct Int8LinearGradInputArgs {
  static constexpr const char* kName = "int8_linear_grad_input";
  TensorRef grad_out;  // f32/f16/bf16 [..., N], contiguous
  TensorRef b;         // i8 [N, K], contiguous
  TensorRef b_stats;   // f32 [N]
  TensorRef grad_a;    // grad_out's dtype [..., K]
};

// The LLM.int8 linear layer's forward as one op (int8_linear below spells out
// its three steps; every backend gives their result bit for bit). The CUDA
// backend fuses it into three launches on sm_90a: the outlier columns marked
// while a is quantized, and the GEMM's epilogue taking their int8 products
// out of its sums and adding their fp32 products.
struct Int8LinearArgs {
  static constexpr const char* kName = "int8_linear";
  TensorRef a;          // f32/f16/bf16 [..., K], contiguous
  TensorRef b;          // i8 [N, K], contiguous
  TensorRef b_stats;    // f32 [N]
  TensorRef bias;       // optional f32/f16/bf16 [N]
  float threshold;      // >= 0 and finite; 0: no outlier columns
  TensorRef out;        // a's dtype [..., N]
  KernelConfig config;  // empty for the backend's pick; else one of kernel_configs(args)
};

LOWBIT_DECLARE_OP(Int8LinearMatmulArgs)
LOWBIT_DECLARE_OP(Int8MmDequantArgs)
LOWBIT_DECLARE_OP(Int8ScaledMmArgs)
LOWBIT_DECLARE_OP(Int8LinearOutliersArgs)
LOWBIT_DECLARE_OP(Int8LinearGradInputArgs)
LOWBIT_DECLARE_OP(Int8LinearArgs)

// The kernel configs the backend of a's device can run for the call, best
// first (empty where it has none to choose); any of them may go in args.config.
std::vector<KernelConfig> kernel_configs(const Int8LinearMatmulArgs& args);
std::vector<KernelConfig> kernel_configs(const Int8ScaledMmArgs& args);
std::vector<KernelConfig> kernel_configs(const Int8LinearArgs& args);

// Allocating front ends: out on a's device.
Tensor int8_linear_matmul(const TensorRef& a, const TensorRef& b, Stream stream = {});
Tensor int8_mm_dequant(const TensorRef& a, const TensorRef& row_stats, const TensorRef& col_stats,
                       DType out_dtype = DType::f16, const TensorRef& bias = {}, Stream stream = {});
Tensor int8_scaled_mm(const TensorRef& a, const TensorRef& b, const TensorRef& row_stats, const TensorRef& col_stats,
                      DType out_dtype = DType::f16, const TensorRef& bias = {}, Stream stream = {});

// The LLM.int8 linear layer's forward (bitsandbytes' Linear8bitLt with an int8
// weight): a f32/f16/bf16 [..., K], b i8 [N, K] with its row absmax b_stats
// f32 [N] (int8_vectorwise_quant of the weight), bias optional [N]. Out in
// a's dtype [..., N]:
//   1. int8_vectorwise_quant(a, threshold): a's rows to int8, the columns
//      holding a value of magnitude >= threshold (threshold > 0) zeroed there
//      and marked in a mask on the device;
//   2. int8_scaled_mm of the int8 rows and b, with bias;
//   3. threshold > 0: int8_linear_outliers adds the marked columns of a times
//      the same columns of b, dequantized, in fp32.
// One launch chain (the op Int8LinearArgs), nothing read on the host;
// config: one of kernel_configs(Int8LinearArgs), empty for the backend's pick.
Tensor int8_linear(const TensorRef& a, const TensorRef& b, const TensorRef& b_stats, const TensorRef& bias = {},
                   float threshold = 0.0f, Stream stream = {}, const KernelConfig& config = {});
// int8_linear's input gradient: grad_out's dtype [..., K] on its device.
Tensor int8_linear_grad_input(const TensorRef& grad_out, const TensorRef& b, const TensorRef& b_stats,
                              Stream stream = {});
// int8_linear_outliers into out in place, its workspace from a's device's allocator.
void int8_linear_outliers(const TensorRef& a, const TensorRef& outlier_mask, const TensorRef& b,
                          const TensorRef& b_stats, const TensorRef& out, Stream stream = {});
// int8_linear into out (a's dtype [..., N], contiguous); its temporaries from a's device's allocator.
void int8_linear_into(const TensorRef& a, const TensorRef& b, const TensorRef& b_stats, const TensorRef& bias,
                      float threshold, const TensorRef& out, Stream stream = {});

}  // namespace lowbit
