// C entry points of the quantization ops: DLTensors in, Args out, then the
// op's own check / workspace_size / run.
#include "lowbit/ops/fp8_gemm.h"
#include "lowbit/ops/int8_gemm.h"
#include "lowbit/ops/quant.h"

#include <string>

#include "capi/capi.h"

namespace lowbit::capi {
namespace {

// Frameworks without fp8 in their DLPack export hand fp8 data over as uint8.
constexpr DType kFp8FromUint8 = DType::f8_e4m3;


// An FP8 GEMM call: the operands every layout shares, and the one tensor
// the layout adds (bias, m_indices or masked_m).
template <class Args, TensorRef Args::*kExtra>
lowbit_status fp8_gemm_call(const char* extra_name, const DLTensor* a, const DLTensor* a_s, const DLTensor* b,
                            const DLTensor* b_s, const DLTensor* extra, DLTensor* out, void* stream) {
  constexpr const char* op = Args::kName;
  return guarded(op, [&] {
    Args x;
    x.a = to_ref(op, "a", a, &kFp8FromUint8);
    x.a_s = to_ref(op, "a_s", a_s);
    x.b = to_ref(op, "b", b, &kFp8FromUint8);
    x.b_s = to_ref(op, "b_s", b_s);
    x.*kExtra = to_ref(op, extra_name, extra);
    x.out = to_ref(op, "out", out);
    run_op(x, x.a.device, stream);
  });
}

}  // namespace
}  // namespace lowbit::capi

using namespace lowbit;  // NOLINT(google-build-using-namespace): this file only forwards
using capi::guarded;
using capi::run_op;
using capi::to_ref;

extern "C" {

lowbit_status lowbit_quantize_blockwise(const DLTensor* input, const DLTensor* code, DLTensor* out, DLTensor* absmax,
                                        int64_t blocksize, void* stream) {
  constexpr const char* op = QuantizeBlockwiseArgs::kName;
  return guarded(op, [&] {
    QuantizeBlockwiseArgs a;
    a.input = to_ref(op, "input", input);
    a.code = to_ref(op, "code", code);
    a.out = to_ref(op, "out", out);
    a.absmax = to_ref(op, "absmax", absmax);
    a.blocksize = blocksize;
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_dequantize_blockwise(const DLTensor* input, const DLTensor* code, const DLTensor* absmax,
                                          const lowbit_nested_absmax* nested, DLTensor* out, int64_t blocksize,
                                          void* stream) {
  constexpr const char* op = DequantizeBlockwiseArgs::kName;
  return guarded(op, [&] {
    DequantizeBlockwiseArgs a;
    a.input = to_ref(op, "input", input);
    a.code = to_ref(op, "code", code);
    a.absmax = to_ref(op, "absmax", absmax);
    a.nested = capi::to_nested(op, nested);
    a.out = to_ref(op, "out", out);
    a.blocksize = blocksize;
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_quantize_no_absmax(const DLTensor* input, const DLTensor* code, DLTensor* out, void* stream) {
  constexpr const char* op = QuantizeNoAbsmaxArgs::kName;
  return guarded(op, [&] {
    QuantizeNoAbsmaxArgs a;
    a.input = to_ref(op, "input", input);
    a.code = to_ref(op, "code", code);
    a.out = to_ref(op, "out", out);
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_dequantize_no_absmax(const DLTensor* input, const DLTensor* code, DLTensor* out, void* stream) {
  constexpr const char* op = DequantizeNoAbsmaxArgs::kName;
  return guarded(op, [&] {
    DequantizeNoAbsmaxArgs a;
    a.input = to_ref(op, "input", input);
    a.code = to_ref(op, "code", code);
    a.out = to_ref(op, "out", out);
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_quantize_tensorwise(const DLTensor* input, const DLTensor* code, DLTensor* out, DLTensor* absmax,
                                         void* stream) {
  constexpr const char* op = QuantizeTensorwiseArgs::kName;
  return guarded(op, [&] {
    QuantizeTensorwiseArgs a;
    a.input = to_ref(op, "input", input);
    a.code = to_ref(op, "code", code);
    a.out = to_ref(op, "out", out);
    a.absmax = to_ref(op, "absmax", absmax);
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_dequantize_tensorwise(const DLTensor* input, const DLTensor* code, const DLTensor* absmax,
                                           DLTensor* out, void* stream) {
  constexpr const char* op = DequantizeTensorwiseArgs::kName;
  return guarded(op, [&] {
    DequantizeTensorwiseArgs a;
    a.input = to_ref(op, "input", input);
    a.code = to_ref(op, "code", code);
    a.absmax = to_ref(op, "absmax", absmax);
    a.out = to_ref(op, "out", out);
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_absmax_center(DLTensor* values, DLTensor* mean, void* stream) {
  constexpr const char* op = AbsmaxCenterArgs::kName;
  return guarded(op, [&] {
    AbsmaxCenterArgs a;
    a.values = to_ref(op, "values", values);
    a.mean = to_ref(op, "mean", mean);
    run_op(a, a.values.device, stream);
  });
}

lowbit_status lowbit_quantize_4bit(const DLTensor* input, DLTensor* out, DLTensor* absmax, int64_t blocksize,
                                   lowbit_quant4_type type, void* stream) {
  constexpr const char* op = Quantize4bitArgs::kName;
  return guarded(op, [&] {
    Quantize4bitArgs a;
    a.input = to_ref(op, "input", input);
    a.out = to_ref(op, "out", out);
    a.absmax = to_ref(op, "absmax", absmax);
    a.blocksize = blocksize;
    a.type = capi::quant4_type(op, type);
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_dequantize_4bit(const DLTensor* input, const DLTensor* absmax, const lowbit_nested_absmax* nested,
                                     DLTensor* out, int64_t blocksize, lowbit_quant4_type type, void* stream) {
  constexpr const char* op = Dequantize4bitArgs::kName;
  return guarded(op, [&] {
    Dequantize4bitArgs a;
    a.input = to_ref(op, "input", input);
    a.absmax = to_ref(op, "absmax", absmax);
    a.nested = capi::to_nested(op, nested);
    a.out = to_ref(op, "out", out);
    a.blocksize = blocksize;
    a.type = capi::quant4_type(op, type);
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_act_quant(const DLTensor* input, DLTensor* out, DLTensor* scale, int64_t block, int ue8m0,
                               void* stream) {
  constexpr const char* op = ActQuantArgs::kName;
  return guarded(op, [&] {
    ActQuantArgs a;
    a.input = to_ref(op, "input", input);
    a.out = to_ref(op, "out", out, &capi::kFp8FromUint8);
    a.scale = to_ref(op, "scale", scale);
    a.block = block;
    a.ue8m0 = ue8m0 != 0;
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_weight_quant(const DLTensor* input, DLTensor* out, DLTensor* scale, int64_t block, void* stream) {
  constexpr const char* op = WeightQuantArgs::kName;
  return guarded(op, [&] {
    WeightQuantArgs a;
    a.input = to_ref(op, "input", input);
    a.out = to_ref(op, "out", out, &capi::kFp8FromUint8);
    a.scale = to_ref(op, "scale", scale);
    a.block = block;
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_weight_dequant(const DLTensor* input, const DLTensor* scale, DLTensor* out, int64_t block,
                                    void* stream) {
  constexpr const char* op = WeightDequantArgs::kName;
  return guarded(op, [&] {
    WeightDequantArgs a;
    a.input = to_ref(op, "input", input, &capi::kFp8FromUint8);
    a.scale = to_ref(op, "scale", scale);
    a.out = to_ref(op, "out", out);
    a.block = block;
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_fp8_gemm(const DLTensor* a, const DLTensor* a_s, const DLTensor* b, const DLTensor* b_s,
                              const DLTensor* bias, DLTensor* out, void* stream) {
  return capi::fp8_gemm_call<Fp8GemmArgs, &Fp8GemmArgs::bias>("bias", a, a_s, b, b_s, bias, out, stream);
}

lowbit_status lowbit_fp8_grouped_gemm_contiguous(const DLTensor* a, const DLTensor* a_s, const DLTensor* b,
                                                 const DLTensor* b_s, const DLTensor* m_indices, DLTensor* out,
                                                 void* stream) {
  return capi::fp8_gemm_call<Fp8GroupedGemmContiguousArgs, &Fp8GroupedGemmContiguousArgs::m_indices>(
      "m_indices", a, a_s, b, b_s, m_indices, out, stream);
}

lowbit_status lowbit_fp8_grouped_gemm_masked(const DLTensor* a, const DLTensor* a_s, const DLTensor* b,
                                             const DLTensor* b_s, const DLTensor* masked_m, DLTensor* out,
                                             void* stream) {
  return capi::fp8_gemm_call<Fp8GroupedGemmMaskedArgs, &Fp8GroupedGemmMaskedArgs::masked_m>(
      "masked_m", a, a_s, b, b_s, masked_m, out, stream);
}

lowbit_status lowbit_int8_vectorwise_quant(const DLTensor* input, DLTensor* out, DLTensor* row_stats,
                                           DLTensor* outlier_mask, float threshold, void* stream) {
  constexpr const char* op = Int8VectorwiseQuantArgs::kName;
  return guarded(op, [&] {
    Int8VectorwiseQuantArgs a;
    a.input = to_ref(op, "input", input);
    a.out = to_ref(op, "out", out);
    a.row_stats = to_ref(op, "row_stats", row_stats);
    a.outlier_mask = to_ref(op, "outlier_mask", outlier_mask);
    a.threshold = threshold;
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_int8_vectorwise_dequant(const DLTensor* input, const DLTensor* row_stats, DLTensor* out,
                                             void* stream) {
  constexpr const char* op = Int8VectorwiseDequantArgs::kName;
  return guarded(op, [&] {
    Int8VectorwiseDequantArgs a;
    a.input = to_ref(op, "input", input);
    a.row_stats = to_ref(op, "row_stats", row_stats);
    a.out = to_ref(op, "out", out);
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_int8_linear_matmul(const DLTensor* a, const DLTensor* b, DLTensor* out, void* stream) {
  constexpr const char* op = Int8LinearMatmulArgs::kName;
  return guarded(op, [&] {
    const Int8LinearMatmulArgs x{to_ref(op, "a", a), to_ref(op, "b", b), to_ref(op, "out", out), {}};
    run_op(x, x.a.device, stream);
  });
}

lowbit_status lowbit_int8_mm_dequant(const DLTensor* a, const DLTensor* row_stats, const DLTensor* col_stats,
                                     const DLTensor* bias, DLTensor* out, void* stream) {
  constexpr const char* op = Int8MmDequantArgs::kName;
  return guarded(op, [&] {
    const Int8MmDequantArgs x{to_ref(op, "a", a), to_ref(op, "row_stats", row_stats),
                              to_ref(op, "col_stats", col_stats), to_ref(op, "bias", bias), to_ref(op, "out", out)};
    run_op(x, x.a.device, stream);
  });
}

lowbit_status lowbit_int8_scaled_mm(const DLTensor* a, const DLTensor* b, const DLTensor* row_stats,
                                    const DLTensor* col_stats, const DLTensor* bias, DLTensor* out, void* stream) {
  constexpr const char* op = Int8ScaledMmArgs::kName;
  return guarded(op, [&] {
    const Int8ScaledMmArgs x{to_ref(op, "a", a),         to_ref(op, "b", b),       to_ref(op, "row_stats", row_stats),
                             to_ref(op, "col_stats", col_stats), to_ref(op, "bias", bias), to_ref(op, "out", out), {}};
    run_op(x, x.a.device, stream);
  });
}

lowbit_status lowbit_int8_linear_outliers(const DLTensor* a, const DLTensor* outlier_mask, const DLTensor* b,
                                          const DLTensor* b_stats, DLTensor* out, void* stream) {
  constexpr const char* op = Int8LinearOutliersArgs::kName;
  return guarded(op, [&] {
    const Int8LinearOutliersArgs x{to_ref(op, "a", a), to_ref(op, "outlier_mask", outlier_mask), to_ref(op, "b", b),
                                   to_ref(op, "b_stats", b_stats), to_ref(op, "out", out)};
    run_op(x, x.a.device, stream);
  });
}

lowbit_status lowbit_int8_linear_grad_input(const DLTensor* grad_out, const DLTensor* b, const DLTensor* b_stats,
                                            DLTensor* grad_a, void* stream) {
  constexpr const char* op = Int8LinearGradInputArgs::kName;
  return guarded(op, [&] {
    const Int8LinearGradInputArgs x{to_ref(op, "grad_out", grad_out), to_ref(op, "b", b),
                                    to_ref(op, "b_stats", b_stats), to_ref(op, "grad_a", grad_a)};
    run_op(x, x.grad_out.device, stream);
  });
}

lowbit_status lowbit_int8_linear(const DLTensor* a, const DLTensor* b, const DLTensor* b_stats, const DLTensor* bias,
                                 float threshold, DLTensor* out, void* stream) {
  constexpr const char* op = "int8_linear";
  return guarded(op, [&] {
    int8_linear_into(to_ref(op, "a", a), to_ref(op, "b", b), to_ref(op, "b_stats", b_stats), to_ref(op, "bias", bias),
                     threshold, to_ref(op, "out", out), Stream{stream});
  });
}

lowbit_status lowbit_estimate_quantiles(const DLTensor* input, DLTensor* out, float offset, void* stream) {
  constexpr const char* op = EstimateQuantilesArgs::kName;
  return guarded(op, [&] {
    EstimateQuantilesArgs a;
    a.input = to_ref(op, "input", input);
    a.out = to_ref(op, "out", out);
    a.offset = offset;
    run_op(a, a.input.device, stream);
  });
}

lowbit_status lowbit_histogram_scatter_add_2d(DLTensor* histogram, const DLTensor* index1, const DLTensor* index2,
                                              const DLTensor* source, void* stream) {
  constexpr const char* op = HistogramScatterAdd2dArgs::kName;
  return guarded(op, [&] {
    HistogramScatterAdd2dArgs a;
    a.histogram = to_ref(op, "histogram", histogram);
    a.index1 = to_ref(op, "index1", index1);
    a.index2 = to_ref(op, "index2", index2);
    a.source = to_ref(op, "source", source);
    run_op(a, a.histogram.device, stream);
  });
}

}  // extern "C"
