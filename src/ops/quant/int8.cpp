// Front ends of LLM.int8 vector-wise quantization (docs/formats.md, "Int8 vector-wise").
#include <cmath>

#include "core/check.h"
#include "ops/common.h"
#include "ops/dispatch.h"

namespace lowbit {
namespace {

void require_rows(const char* op, const TensorRef& t) {
  LOWBIT_REQUIRE(t.ndim >= 1, ErrorCode::invalid_argument, op,
                 ": input must have at least 1 dimension [..., K] (got a scalar)");
}

int64_t rows_of(const TensorRef& t) { return t.size(-1) == 0 ? 0 : t.numel() / t.size(-1); }

// The row and column quantizations' input, threshold and int8 output.
void check_quant(const char* op, const TensorRef& input, float threshold, const TensorRef& out) {
  core::require_present(op, "input", input);
  core::require_dtype(op, "input", input, core::kFloatDTypes);
  core::require_contiguous(op, "input", input);
  require_rows(op, input);
  LOWBIT_REQUIRE(std::isfinite(threshold) && threshold >= 0.0f, ErrorCode::invalid_argument, op,
                 ": threshold must be finite and >= 0 (got ", threshold, ")");
  core::require_present(op, "out", out);
  core::require_dtype(op, "out", out, {DType::i8});
  core::require_contiguous(op, "out", out);
  core::require_numel(op, "out", out, input.numel());
}

}  // namespace

void check(const Int8VectorwiseQuantArgs& a) {
  const char* op = Int8VectorwiseQuantArgs::kName;
  check_quant(op, a.input, a.threshold, a.out);
  core::require_present(op, "row_stats", a.row_stats);
  core::require_dtype(op, "row_stats", a.row_stats, {DType::f32});
  core::require_contiguous(op, "row_stats", a.row_stats);
  core::require_numel(op, "row_stats", a.row_stats, rows_of(a.input));
  if (a.threshold > 0.0f) {
    core::require_present(op, "outlier_mask (needed when threshold > 0)", a.outlier_mask);
    core::require_dtype(op, "outlier_mask", a.outlier_mask, {DType::u8});
    core::require_contiguous(op, "outlier_mask", a.outlier_mask);
    core::require_numel(op, "outlier_mask", a.outlier_mask, a.input.size(-1));
  }
  core::require_same_device(op, {{"input", &a.input},
                                 {"out", &a.out},
                                 {"row_stats", &a.row_stats},
                                 {"outlier_mask", &a.outlier_mask}});
}
size_t workspace_size(const Int8VectorwiseQuantArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const Int8VectorwiseQuantArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

void check(const Int8ColwiseQuantArgs& a) {
  const char* op = Int8ColwiseQuantArgs::kName;
  check_quant(op, a.input, a.threshold, a.out);
  ops::require_shaped(op, "col_stats", a.col_stats, {DType::f32}, {a.input.size(-1)});
  core::require_same_device(op, {{"input", &a.input}, {"out", &a.out}, {"col_stats", &a.col_stats}});
}
size_t workspace_size(const Int8ColwiseQuantArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const Int8ColwiseQuantArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

void check(const Int8VectorwiseDequantArgs& a) {
  const char* op = Int8VectorwiseDequantArgs::kName;
  core::require_present(op, "input", a.input);
  core::require_dtype(op, "input", a.input, {DType::i8});
  core::require_contiguous(op, "input", a.input);
  require_rows(op, a.input);
  core::require_present(op, "row_stats", a.row_stats);
  core::require_dtype(op, "row_stats", a.row_stats, {DType::f32});
  core::require_contiguous(op, "row_stats", a.row_stats);
  core::require_numel(op, "row_stats", a.row_stats, rows_of(a.input));
  core::require_present(op, "out", a.out);
  core::require_dtype(op, "out", a.out, core::kFloatDTypes);
  core::require_contiguous(op, "out", a.out);
  core::require_numel(op, "out", a.out, a.input.numel());
  core::require_same_device(op, {{"input", &a.input}, {"row_stats", &a.row_stats}, {"out", &a.out}});
}
size_t workspace_size(const Int8VectorwiseDequantArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const Int8VectorwiseDequantArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

Int8Quantized int8_vectorwise_quant(const TensorRef& a, float threshold, Stream stream, bool read_outlier_cols) {
  const char* op = Int8VectorwiseQuantArgs::kName;
  core::require_present(op, "input", a);
  require_rows(op, a);
  const int64_t k = a.size(-1);
  Int8Quantized r{Tensor::empty(a.sizes(), DType::i8, a.device, stream),
                  Tensor::empty({rows_of(a)}, DType::f32, a.device, stream),
                  threshold > 0.0f ? Tensor::empty({k}, DType::u8, a.device, stream) : Tensor(),
                  {}};
  Int8VectorwiseQuantArgs args{a, r.values, r.row_stats, r.outlier_mask.ref(), threshold};
  ops::run_with_workspace(args, a.device, stream);
  if (r.outlier_mask.defined() && read_outlier_cols) {
    // The columns' count decides the list's size: read on the host (the
    // one wait of this op, as torch.nonzero's in bitsandbytes).
    const Tensor host = r.outlier_mask.to(Device::cpu(), stream);
    const uint8_t* m = host.ptr<const uint8_t>();
    for (int64_t j = 0; j < k; ++j) {
      if (m[j]) r.outlier_cols.push_back(j);
    }
  }
  return r;
}

Int8ColwiseQuantized int8_colwise_quant(const TensorRef& a, float threshold, Stream stream) {
  const char* op = Int8ColwiseQuantArgs::kName;
  core::require_present(op, "input", a);
  require_rows(op, a);
  Int8ColwiseQuantized r{Tensor::empty(a.sizes(), DType::i8, a.device, stream),
                         Tensor::empty({a.size(-1)}, DType::f32, a.device, stream)};
  ops::run_with_workspace(Int8ColwiseQuantArgs{a, r.values, r.col_stats, threshold}, a.device, stream);
  return r;
}

Tensor int8_vectorwise_dequant(const TensorRef& q, const TensorRef& row_stats, DType out_dtype, Stream stream) {
  core::require_present(Int8VectorwiseDequantArgs::kName, "input", q);
  Tensor out = Tensor::empty(q.sizes(), out_dtype, q.device, stream);
  Int8VectorwiseDequantArgs args{q, row_stats, out};
  ops::run_with_workspace(args, q.device, stream);
  return out;
}

}  // namespace lowbit
