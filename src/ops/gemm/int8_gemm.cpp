// Front ends of the int8 GEMMs (lowbit/ops/int8_gemm.h): the argument checks
// every backend relies on, and the allocating calls.
#include "lowbit/ops/int8_gemm.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "lowbit/ops/quant.h"
#include "ops/common.h"
#include "ops/dispatch.h"

namespace lowbit {
namespace {

// a: `dtype`, contiguous, at least 1-D. Returns its last dimension.
int64_t check_lhs(const char* op, const TensorRef& a, DType dtype, const char* last_name) {
  core::require_present(op, "a", a);
  core::require_dtype(op, "a", a, {dtype});
  core::require_contiguous(op, "a", a);
  LOWBIT_REQUIRE(a.ndim >= 1, ErrorCode::invalid_argument, op, ": a must have at least 1 dimension (got a scalar)");
  const int64_t last = a.size(-1);
  LOWBIT_REQUIRE(last >= 1, ErrorCode::invalid_argument, op, ": ", last_name,
                 " (a's last dimension) must be at least 1 (got ", last, ")");
  return last;
}

// K within the int32 products' exact range.
void check_k(const char* op, int64_t K) {
  LOWBIT_REQUIRE(K <= kInt8GemmMaxK, ErrorCode::invalid_argument, op, ": K must be at most ", kInt8GemmMaxK,
                 " for exact int32 products (got ", K, ")");
}

// b int8 [N, K], contiguous. Returns N.
int64_t check_rhs(const char* op, const TensorRef& b, int64_t K) {
  core::require_present(op, "b", b);
  core::require_dtype(op, "b", b, {DType::i8});
  core::require_contiguous(op, "b", b);
  LOWBIT_REQUIRE(b.ndim == 2, ErrorCode::invalid_argument, op, ": b must be 2-D [N, K] (got ", b.ndim, "-D ",
                 core::shape_str(b), ")");
  LOWBIT_REQUIRE(b.shape[1] == K, ErrorCode::invalid_argument, op, ": b's last dimension (", b.shape[1],
                 ") must equal a's K (", K, ")");
  return b.shape[0];
}

// a int8 [..., K] and b int8 [N, K]. Returns N.
int64_t check_int8_operands(const char* op, const TensorRef& a, const TensorRef& b) {
  const int64_t K = check_lhs(op, a, DType::i8, "K");
  check_k(op, K);
  return check_rhs(op, b, K);
}

// The dequantization's statistics and bias for rows of `lhs` (its last dimension dropped) and N columns.
void check_stats(const char* op, const TensorRef& lhs, int64_t N, const TensorRef& row_stats,
                 const TensorRef& col_stats, const TensorRef& bias) {
  ops::require_shaped(op, "row_stats", row_stats, {DType::f32}, {lhs.numel() / lhs.size(-1)});
  ops::require_shaped(op, "col_stats", col_stats, {DType::f32}, {N});
  if (bias.present()) ops::require_shaped(op, "bias", bias, core::kFloatDTypes, {N});
}

}  // namespace

void check(const Int8LinearMatmulArgs& a) {
  const char* op = Int8LinearMatmulArgs::kName;
  const int64_t N = check_int8_operands(op, a.a, a.b);
  ops::require_shaped(op, "out", a.out, {DType::i32}, ops::with_last(a.a, N));
  core::require_same_device(op, {{"a", &a.a}, {"b", &a.b}, {"out", &a.out}});
}
size_t workspace_size(const Int8LinearMatmulArgs& a) { return ops::backend_workspace(a, a.a.device); }
void run(const Int8LinearMatmulArgs& a, void* ws, Stream s) { ops::dispatch(a, a.a.device, ws, s); }
std::vector<KernelConfig> kernel_configs(const Int8LinearMatmulArgs& a) { return ops::backend_configs(a, a.a.device); }

void check(const Int8MmDequantArgs& a) {
  const char* op = Int8MmDequantArgs::kName;
  const int64_t N = check_lhs(op, a.a, DType::i32, "N");
  check_stats(op, a.a, N, a.row_stats, a.col_stats, a.bias);
  ops::require_shaped(op, "out", a.out, core::kFloatDTypes, ops::with_last(a.a, N));
  core::require_same_device(
      op, {{"a", &a.a}, {"row_stats", &a.row_stats}, {"col_stats", &a.col_stats}, {"bias", &a.bias}, {"out", &a.out}});
}
size_t workspace_size(const Int8MmDequantArgs& a) { return ops::backend_workspace(a, a.a.device); }
void run(const Int8MmDequantArgs& a, void* ws, Stream s) { ops::dispatch(a, a.a.device, ws, s); }

void check(const Int8ScaledMmArgs& a) {
  const char* op = Int8ScaledMmArgs::kName;
  const int64_t N = check_int8_operands(op, a.a, a.b);
  check_stats(op, a.a, N, a.row_stats, a.col_stats, a.bias);
  ops::require_shaped(op, "out", a.out, core::kFloatDTypes, ops::with_last(a.a, N));
  core::require_same_device(op, {{"a", &a.a},
                                 {"b", &a.b},
                                 {"row_stats", &a.row_stats},
                                 {"col_stats", &a.col_stats},
                                 {"bias", &a.bias},
                                 {"out", &a.out}});
}
size_t workspace_size(const Int8ScaledMmArgs& a) { return ops::backend_workspace(a, a.a.device); }
void run(const Int8ScaledMmArgs& a, void* ws, Stream s) { ops::dispatch(a, a.a.device, ws, s); }
std::vector<KernelConfig> kernel_configs(const Int8ScaledMmArgs& a) { return ops::backend_configs(a, a.a.device); }

void check(const Int8LinearOutliersArgs& a) {
  const char* op = Int8LinearOutliersArgs::kName;
  core::require_present(op, "a", a.a);
  core::require_dtype(op, "a", a.a, core::kFloatDTypes);
  const int64_t K = check_lhs(op, a.a, a.a.dtype, "K");
  ops::require_shaped(op, "outlier_mask", a.outlier_mask, {DType::u8}, {K});
  const int64_t N = check_rhs(op, a.b, K);
  ops::require_shaped(op, "b_stats", a.b_stats, {DType::f32}, {N});
  ops::require_shaped(op, "out", a.out, {a.a.dtype}, ops::with_last(a.a, N));
  core::require_same_device(op, {{"a", &a.a},
                                 {"outlier_mask", &a.outlier_mask},
                                 {"b", &a.b},
                                 {"b_stats", &a.b_stats},
                                 {"out", &a.out}});
}
size_t workspace_size(const Int8LinearOutliersArgs& a) { return ops::backend_workspace(a, a.a.device); }
void run(const Int8LinearOutliersArgs& a, void* ws, Stream s) { ops::dispatch(a, a.a.device, ws, s); }

void check(const Int8LinearGradInputArgs& a) {
  const char* op = Int8LinearGradInputArgs::kName;
  core::require_present(op, "grad_out", a.grad_out);
  core::require_dtype(op, "grad_out", a.grad_out, core::kFloatDTypes);
  core::require_contiguous(op, "grad_out", a.grad_out);
  LOWBIT_REQUIRE(a.grad_out.ndim >= 1, ErrorCode::invalid_argument, op,
                 ": grad_out must have at least 1 dimension (got a scalar)");
  core::require_present(op, "b", a.b);
  core::require_dtype(op, "b", a.b, {DType::i8});
  core::require_contiguous(op, "b", a.b);
  LOWBIT_REQUIRE(a.b.ndim == 2, ErrorCode::invalid_argument, op, ": b must be 2-D [N, K] (got ", a.b.ndim, "-D ",
                 core::shape_str(a.b), ")");
  const int64_t N = a.b.shape[0], K = a.b.shape[1];
  LOWBIT_REQUIRE(a.grad_out.size(-1) == N, ErrorCode::invalid_argument, op, ": grad_out's last dimension (",
                 a.grad_out.size(-1), ") must equal b's N (", N, ")");
  ops::require_shaped(op, "b_stats", a.b_stats, {DType::f32}, {N});
  ops::require_shaped(op, "grad_a", a.grad_a, {a.grad_out.dtype}, ops::with_last(a.grad_out, K));
  core::require_same_device(
      op, {{"grad_out", &a.grad_out}, {"b", &a.b}, {"b_stats", &a.b_stats}, {"grad_a", &a.grad_a}});
}
size_t workspace_size(const Int8LinearGradInputArgs& a) { return ops::backend_workspace(a, a.grad_out.device); }
void run(const Int8LinearGradInputArgs& a, void* ws, Stream s) { ops::dispatch(a, a.grad_out.device, ws, s); }

Tensor int8_linear_grad_input(const TensorRef& grad_out, const TensorRef& b, const TensorRef& b_stats, Stream stream) {
  const char* op = Int8LinearGradInputArgs::kName;
  core::require_present(op, "grad_out", grad_out);
  core::require_present(op, "b", b);
  LOWBIT_REQUIRE(b.ndim == 2, ErrorCode::invalid_argument, op, ": b must be 2-D [N, K] (got ", b.ndim, "-D ",
                 core::shape_str(b), ")");
  LOWBIT_REQUIRE(grad_out.ndim >= 1, ErrorCode::invalid_argument, op,
                 ": grad_out must have at least 1 dimension (got a scalar)");
  Tensor grad_a = Tensor::empty(Shape(ops::with_last(grad_out, b.shape[1])), grad_out.dtype, grad_out.device, stream);
  ops::run_with_workspace(Int8LinearGradInputArgs{grad_out, b, b_stats, grad_a}, grad_out.device, stream);
  return grad_a;
}

namespace {

// int8_linear's checks. Returns N.
int64_t check_linear(const char* op, const TensorRef& a, const TensorRef& b, const TensorRef& b_stats,
                     const TensorRef& bias, float threshold) {
  core::require_present(op, "a", a);
  core::require_dtype(op, "a", a, core::kFloatDTypes);
  LOWBIT_REQUIRE(std::isfinite(threshold) && threshold >= 0.0f, ErrorCode::invalid_argument, op,
                 ": threshold must be >= 0 and finite (got ", threshold, ")");
  const int64_t K = check_lhs(op, a, a.dtype, "K");
  check_k(op, K);
  const int64_t N = check_rhs(op, b, K);
  ops::require_shaped(op, "b_stats", b_stats, {DType::f32}, {N});
  if (bias.present()) ops::require_shaped(op, "bias", bias, core::kFloatDTypes, {N});
  core::require_same_device(op, {{"a", &a}, {"b", &b}, {"b_stats", &b_stats}, {"bias", &bias}});
  return N;
}

}  // namespace

void check(const Int8LinearArgs& a) {
  const char* op = Int8LinearArgs::kName;
  const int64_t N = check_linear(op, a.a, a.b, a.b_stats, a.bias, a.threshold);
  ops::require_shaped(op, "out", a.out, {a.a.dtype}, ops::with_last(a.a, N));
  core::require_same_device(op, {{"a", &a.a}, {"out", &a.out}});
}
size_t workspace_size(const Int8LinearArgs& a) { return ops::backend_workspace(a, a.a.device); }
void run(const Int8LinearArgs& a, void* ws, Stream s) { ops::dispatch(a, a.a.device, ws, s); }
std::vector<KernelConfig> kernel_configs(const Int8LinearArgs& a) { return ops::backend_configs(a, a.a.device); }

Tensor int8_linear(const TensorRef& a, const TensorRef& b, const TensorRef& b_stats, const TensorRef& bias,
                   float threshold, Stream stream, const KernelConfig& config) {
  const int64_t N = check_linear(Int8LinearArgs::kName, a, b, b_stats, bias, threshold);
  Tensor out = Tensor::empty(Shape(ops::with_last(a, N)), a.dtype, a.device, stream);
  ops::run_with_workspace(Int8LinearArgs{a, b, b_stats, bias, threshold, out, config}, a.device, stream);
  return out;
}

void int8_linear_into(const TensorRef& a, const TensorRef& b, const TensorRef& b_stats, const TensorRef& bias,
                      float threshold, const TensorRef& out, Stream stream) {
  ops::run_with_workspace(Int8LinearArgs{a, b, b_stats, bias, threshold, out, {}}, a.device, stream);
}

void int8_linear_outliers(const TensorRef& a, const TensorRef& outlier_mask, const TensorRef& b,
                          const TensorRef& b_stats, const TensorRef& out, Stream stream) {
  ops::run_with_workspace(Int8LinearOutliersArgs{a, outlier_mask, b, b_stats, out}, a.device, stream);
}

Tensor int8_linear_matmul(const TensorRef& a, const TensorRef& b, Stream stream) {
  const int64_t N = check_int8_operands(Int8LinearMatmulArgs::kName, a, b);
  Tensor out = Tensor::empty(Shape(ops::with_last(a, N)), DType::i32, a.device, stream);
  ops::run_with_workspace(Int8LinearMatmulArgs{a, b, out, {}}, a.device, stream);
  return out;
}

Tensor int8_mm_dequant(const TensorRef& a, const TensorRef& row_stats, const TensorRef& col_stats, DType out_dtype,
                       const TensorRef& bias, Stream stream) {
  const int64_t N = check_lhs(Int8MmDequantArgs::kName, a, DType::i32, "N");
  Tensor out = Tensor::empty(Shape(ops::with_last(a, N)), out_dtype, a.device, stream);
  ops::run_with_workspace(Int8MmDequantArgs{a, row_stats, col_stats, bias, out}, a.device, stream);
  return out;
}

Tensor int8_scaled_mm(const TensorRef& a, const TensorRef& b, const TensorRef& row_stats, const TensorRef& col_stats,
                      DType out_dtype, const TensorRef& bias, Stream stream) {
  const int64_t N = check_int8_operands(Int8ScaledMmArgs::kName, a, b);
  Tensor out = Tensor::empty(Shape(ops::with_last(a, N)), out_dtype, a.device, stream);
  ops::run_with_workspace(Int8ScaledMmArgs{a, b, row_stats, col_stats, bias, out, {}}, a.device, stream);
  return out;
}

}  // namespace lowbit
