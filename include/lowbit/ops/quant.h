// Quantization ops: 8-bit blockwise and tensor-wise with code maps, 4-bit
// NF4/FP4, FP8 with DeepSeek block scales, int8 vector-wise, quantile
// estimation, 2-D histograms. Semantics: docs/formats.md.
//
// Each op has an Args struct and three calls (the CUTLASS pattern):
//   check(args)                 validates; throws lowbit::Error naming the op,
//                               the argument, what was expected and what was given
//   workspace_size(args)        bytes of scratch the caller provides to run()
//   run(args, workspace, stream) enqueues the work on the backend that owns the
//                               tensors' device (CPU ops finish before returning)
// The convenience functions at the end allocate their outputs (stream-ordered:
// lowbit/allocator.h) and chain the primitive ops (for example nested
// absmax). No op waits for the device unless it says so.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "lowbit/ops/declare_op.h"
#include "lowbit/quant_state.h"
#include "lowbit/tensor.h"

namespace lowbit {

// ---------------------------------------------------------------- primitives

// absmax[b] = max|x| over block b; out[i] = code index nearest to x[i] / absmax.
struct QuantizeBlockwiseArgs {
  static constexpr const char* kName = "quantize_blockwise";
  TensorRef input;   // f32/f16/bf16, contiguous, n elements
  TensorRef code;    // f32 [256], sorted ascending
  TensorRef out;     // u8, n elements
  TensorRef absmax;  // f32 [ceil(n / blocksize)]
  int64_t blocksize = 4096;
};

// A double-quantized absmax: absmax[b] = code[q[b]] * absmax2[b / blocksize] + offset.
struct NestedAbsmax {
  TensorRef code;    // f32 [256]
  TensorRef absmax;  // f32 [ceil(nblocks / blocksize)]
  TensorRef offset;  // f32 [1]
  int64_t blocksize = 256;
  bool present() const { return code.present(); }
};

// out[i] = code[q[i]] * absmax[i / blocksize]
struct DequantizeBlockwiseArgs {
  static constexpr const char* kName = "dequantize_blockwise";
  TensorRef input;   // u8, n elements
  TensorRef code;    // f32 [256]
  TensorRef absmax;  // f32 [nblocks], or u8 [nblocks] with `nested`
  NestedAbsmax nested;
  TensorRef out;     // f32/f16/bf16, n elements
  int64_t blocksize = 4096;
};

// Tensor-wise 8-bit codes (bitsandbytes' quantize_no_absmax): out[i] = the
// code index nearest to input[i], with no scale (docs/formats.md, "8-bit
// tensor-wise").
struct QuantizeNoAbsmaxArgs {
  static constexpr const char* kName = "quantize_no_absmax";
  TensorRef input;  // f32/f16/bf16, contiguous, n elements
  TensorRef code;   // f32 [256], sorted ascending
  TensorRef out;    // u8, n elements
};

// out[i] = code[q[i]] (bitsandbytes' dequantize_no_absmax).
struct DequantizeNoAbsmaxArgs {
  static constexpr const char* kName = "dequantize_no_absmax";
  TensorRef input;  // u8, n elements
  TensorRef code;   // f32 [256]
  TensorRef out;    // f32/f16/bf16, n elements
};

// bitsandbytes' quantize in one op: absmax = max|x| over the whole tensor,
// written on the device; out[i] = the code nearest to x[i] / absmax.
struct QuantizeTensorwiseArgs {
  static constexpr const char* kName = "quantize_tensorwise";
  TensorRef input;   // f32/f16/bf16, contiguous, n elements
  TensorRef code;    // f32 [256], sorted ascending
  TensorRef out;     // u8, n elements
  TensorRef absmax;  // f32 [1], written
};

// out[i] = code[q[i]] * absmax[0] (bitsandbytes' dequantize).
struct DequantizeTensorwiseArgs {
  static constexpr const char* kName = "dequantize_tensorwise";
  TensorRef input;   // u8, n elements
  TensorRef code;    // f32 [256]
  TensorRef absmax;  // f32 [1]
  TensorRef out;     // f32/f16/bf16, n elements
};

enum class Quant4Type : uint8_t { nf4, fp4 };

// Packs two 4-bit codes per byte, the even element in the high nibble.
struct Quantize4bitArgs {
  static constexpr const char* kName = "quantize_4bit";
  TensorRef input;   // f32/f16/bf16, contiguous, n elements
  TensorRef out;     // u8, (n + 1) / 2 elements
  TensorRef absmax;  // f32 [ceil(n / blocksize)]
  int64_t blocksize = 64;
  Quant4Type type = Quant4Type::nf4;
};

struct Dequantize4bitArgs {
  static constexpr const char* kName = "dequantize_4bit";
  TensorRef input;   // u8, (n + 1) / 2 elements
  TensorRef absmax;  // f32 [nblocks], or u8 [nblocks] with `nested`
  NestedAbsmax nested;
  TensorRef out;     // f32/f16/bf16, n elements (n comes from here)
  int64_t blocksize = 64;
  Quant4Type type = Quant4Type::nf4;
};

// In place: mean = deterministic_mean(values); values -= mean. The summation
// order is fixed (src/core/reduce.h) so every backend gives the same bits.
struct AbsmaxCenterArgs {
  static constexpr const char* kName = "absmax_center";
  TensorRef values;  // f32 [n], n >= 1
  TensorRef mean;    // f32 [1]
};

// DeepSeek 1×block activation quantization over the last dimension.
struct ActQuantArgs {
  static constexpr const char* kName = "act_quant";
  TensorRef input;  // f32/f16/bf16 [..., K], contiguous, K % block == 0
  TensorRef out;    // f8_e4m3, same shape
  TensorRef scale;  // f32 [..., K / block]
  int64_t block = 128;
  bool ue8m0 = false;  // round each scale up to a power of two
};

// DeepSeek block×block weight quantization (ragged edges allowed).
struct WeightQuantArgs {
  static constexpr const char* kName = "weight_quant";
  TensorRef input;  // f32/f16/bf16 [N, K]
  TensorRef out;    // f8_e4m3 [N, K]
  TensorRef scale;  // f32 [ceil(N / block), ceil(K / block)]
  int64_t block = 128;
};

struct WeightDequantArgs {
  static constexpr const char* kName = "weight_dequant";
  TensorRef input;  // f8_e4m3 [N, K]
  TensorRef scale;  // f32 [ceil(N / block), ceil(K / block)]
  TensorRef out;    // f32/f16/bf16 [N, K]
  int64_t block = 128;
};

// LLM.int8 row-wise quantization with outliers.
struct Int8VectorwiseQuantArgs {
  static constexpr const char* kName = "int8_vectorwise_quant";
  TensorRef input;         // f32/f16/bf16 [..., K] (rows = all leading dims)
  TensorRef out;           // i8, same shape
  TensorRef row_stats;     // f32 [rows]
  TensorRef outlier_mask;  // u8 [K], 1 where the column holds an outlier; needed when threshold > 0
  float threshold = 0.0f;
};

// LLM.int8's column-wise quantization (the column half of int8_double_quant):
// each column of input [..., K] (rows = all leading dims) to int8 on its own
// absmax, by the rule of int8_vectorwise_quant's rows (docs/formats.md). With
// threshold > 0 the elements of magnitude >= threshold are left out of their
// column's absmax and encoded as 0.
struct Int8ColwiseQuantArgs {
  static constexpr const char* kName = "int8_colwise_quant";
  TensorRef input;      // f32/f16/bf16 [..., K]
  TensorRef out;        // i8, same shape
  TensorRef col_stats;  // f32 [K]
  float threshold = 0.0f;
};

struct Int8VectorwiseDequantArgs {
  static constexpr const char* kName = "int8_vectorwise_dequant";
  TensorRef input;      // i8 [..., K]
  TensorRef row_stats;  // f32 [rows]
  TensorRef out;        // f32/f16/bf16, same shape
};

// 256 quantiles of `input` at probabilities linspace(offset, 1 - offset, 256),
// with linear interpolation between order statistics (numpy's default).
struct EstimateQuantilesArgs {
  static constexpr const char* kName = "estimate_quantiles";
  TensorRef input;  // f32/f16/bf16, n >= 256 elements
  TensorRef out;    // f32 [256]
  float offset = 1.0f / 512.0f;
};

// bitsandbytes' histogram_scatter_add_2d, in place:
// histogram[index1[i], index2[i]] += source[i] for every i. An index outside
// the histogram is an error on the CPU (nothing is added) and skipped on
// CUDA, where the host cannot read device data without waiting for it. CUDA
// adds with atomics in no fixed order: sums agree with the CPU's within fp32
// rounding, exactly where the order cannot matter (integer-valued sums).
struct HistogramScatterAdd2dArgs {
  static constexpr const char* kName = "histogram_scatter_add_2d";
  TensorRef histogram;  // f32 [maxdim1, maxdim2], contiguous, updated
  TensorRef index1;     // i32, n elements (any shape), contiguous: rows, in [0, maxdim1)
  TensorRef index2;     // i32, n elements, contiguous: columns, in [0, maxdim2)
  TensorRef source;     // f32, n elements, contiguous: the values added
};

LOWBIT_DECLARE_OP(QuantizeBlockwiseArgs)
LOWBIT_DECLARE_OP(DequantizeBlockwiseArgs)
LOWBIT_DECLARE_OP(QuantizeNoAbsmaxArgs)
LOWBIT_DECLARE_OP(DequantizeNoAbsmaxArgs)
LOWBIT_DECLARE_OP(QuantizeTensorwiseArgs)
LOWBIT_DECLARE_OP(DequantizeTensorwiseArgs)
LOWBIT_DECLARE_OP(Quantize4bitArgs)
LOWBIT_DECLARE_OP(Dequantize4bitArgs)
LOWBIT_DECLARE_OP(AbsmaxCenterArgs)
LOWBIT_DECLARE_OP(ActQuantArgs)
LOWBIT_DECLARE_OP(WeightQuantArgs)
LOWBIT_DECLARE_OP(WeightDequantArgs)
LOWBIT_DECLARE_OP(Int8VectorwiseQuantArgs)
LOWBIT_DECLARE_OP(Int8VectorwiseDequantArgs)
LOWBIT_DECLARE_OP(Int8ColwiseQuantArgs)
LOWBIT_DECLARE_OP(EstimateQuantilesArgs)
LOWBIT_DECLARE_OP(HistogramScatterAdd2dArgs)

// ------------------------------------------------------- allocating front ends

// 8-bit blockwise (bitsandbytes quantize_blockwise). `code` defaults to the
// dynamic map; nested quantizes absmax again (dynamic map, same blocksize).
std::pair<Tensor, QuantState> quantize_blockwise(const TensorRef& input, const TensorRef& code = {},
                                                 int64_t blocksize = 4096, bool nested = false,
                                                 Stream stream = {});
// Output dtype: `out_dtype`, or the state's dtype when not given.
Tensor dequantize_blockwise(const TensorRef& q, const QuantState& state,
                            std::optional<DType> out_dtype = std::nullopt, Stream stream = {});

// 4-bit NF4/FP4 (bitsandbytes quantize_4bit). Output uint8 [(n + 1) / 2, 1].
std::pair<Tensor, QuantState> quantize_4bit(const TensorRef& input, int64_t blocksize = 64,
                                            Quant4Type type = Quant4Type::nf4,
                                            bool compress_statistics = false, Stream stream = {});
Tensor dequantize_4bit(const TensorRef& packed, const QuantState& state,
                       std::optional<DType> out_dtype = std::nullopt, Stream stream = {});

struct Fp8Quantized {
  Tensor values;  // f8_e4m3
  Tensor scale;   // f32
};
Fp8Quantized act_quant(const TensorRef& x, int64_t block = 128, bool ue8m0 = false, Stream stream = {});
Fp8Quantized weight_quant(const TensorRef& w, int64_t block = 128, Stream stream = {});
Tensor weight_dequant(const TensorRef& wq, const TensorRef& scale, int64_t block = 128,
                      DType out_dtype = DType::f32, Stream stream = {});

struct Int8Quantized {
  Tensor values;                      // i8, input's shape
  Tensor row_stats;                   // f32 [rows]
  Tensor outlier_mask;                // u8 [K] on the input's device (threshold > 0)
  std::vector<int64_t> outlier_cols;  // ascending column ids (threshold > 0 and read_outlier_cols)
};
// With threshold > 0 and read_outlier_cols the outlier columns are read back
// to the host, so the call waits for its own kernel (like torch.nonzero);
// otherwise it does not wait.
Int8Quantized int8_vectorwise_quant(const TensorRef& a, float threshold = 0.0f, Stream stream = {},
                                    bool read_outlier_cols = true);
struct Int8ColwiseQuantized {
  Tensor values;     // i8, input's shape
  Tensor col_stats;  // f32 [K]
};
Int8ColwiseQuantized int8_colwise_quant(const TensorRef& a, float threshold = 0.0f, Stream stream = {});
Tensor int8_vectorwise_dequant(const TensorRef& q, const TensorRef& row_stats,
                               DType out_dtype = DType::f32, Stream stream = {});

// bitsandbytes estimate_quantiles: num_quantiles <= 256; with fewer than 256
// and the default offset, offset becomes 1 / (2 * num_quantiles). Returns f32
// [num_quantiles] on the input's device.
Tensor estimate_quantiles(const TensorRef& input, float offset = 1.0f / 512.0f, int num_quantiles = 256,
                          Stream stream = {});

}  // namespace lowbit
