// Front ends of the BSR products (lowbit/ops/sparse.h): the shape, dtype and
// device checks every backend relies on, and the allocating calls. The
// index arrays' contents (ascending, in range, consistent with nnz) are
// each backend's to check where the data lives.
#include <cmath>
#include <string>
#include <vector>

#include "core/broadcast.h"
#include "core/check.h"
#include "lowbit/ops/sparse.h"
#include "ops/common.h"
#include "ops/dispatch.h"

namespace lowbit {
namespace {

std::string dims_str(const std::vector<int64_t>& d) { return core::shape_str(Shape(d.data(), d.size())); }

// The BSR operand: index dtypes, layout, block shape, M and K (values of a float dtype, or int8 where
// `int8` allows). Returns its batch dims.
std::vector<int64_t> check_bsr(const char* op, const BsrRef& b, bool int8 = false) {
  core::require_present(op, "bsr.values", b.values);
  if (int8) {
    core::require_dtype(op, "bsr.values", b.values, {DType::f32, DType::f16, DType::bf16, DType::i8});
  } else {
    core::require_dtype(op, "bsr.values", b.values, core::kFloatDTypes);
  }
  core::require_contiguous(op, "bsr.values", b.values);
  LOWBIT_REQUIRE(b.values.ndim >= 3, ErrorCode::invalid_argument, op,
                 ": bsr.values must be [*batch, nnz, BM, BK] (got ", core::shape_str(b.values), ")");
  const int batch_ndim = b.values.ndim - 3;
  const int64_t nnz = b.values.size(-3), BM = b.values.size(-2), BK = b.values.size(-1);
  LOWBIT_REQUIRE(BM >= 1 && BK >= 1, ErrorCode::invalid_argument, op, ": the blocks must not be empty (got ", BM, " x ",
                 BK, ")");
  LOWBIT_REQUIRE(b.M >= 0 && b.K >= 0 && b.M % BM == 0 && b.K % BK == 0, ErrorCode::invalid_argument, op,
                 ": bsr's M and K must be multiples of the block shape ", BM, " x ", BK, " (got M ", b.M, ", K ", b.K,
                 ")");
  core::require_present(op, "bsr.crow_indices", b.crow_indices);
  core::require_dtype(op, "bsr.crow_indices", b.crow_indices, {DType::i32, DType::i64});
  core::require_contiguous(op, "bsr.crow_indices", b.crow_indices);
  core::require_present(op, "bsr.col_indices", b.col_indices);
  core::require_dtype(op, "bsr.col_indices", b.col_indices, {b.crow_indices.dtype});
  core::require_contiguous(op, "bsr.col_indices", b.col_indices);
  const std::vector<int64_t> batch = core::lead_dims(b.values, 3);
  std::vector<int64_t> crow = batch, col = batch;
  crow.push_back(b.M / BM + 1);
  col.push_back(nnz);
  LOWBIT_REQUIRE(b.crow_indices.ndim == batch_ndim + 1 && core::lead_dims(b.crow_indices, 0) == crow,
                 ErrorCode::invalid_argument, op, ": bsr.crow_indices must have shape ", dims_str(crow),
                 " (values' batch dims, then M / BM + 1; got ", core::shape_str(b.crow_indices), ")");
  LOWBIT_REQUIRE(b.col_indices.ndim == batch_ndim + 1 && core::lead_dims(b.col_indices, 0) == col,
                 ErrorCode::invalid_argument, op, ": bsr.col_indices must have shape ", dims_str(col),
                 " (values' batch dims, then nnz; got ", core::shape_str(b.col_indices), ")");
  return batch;
}

// The product's dtype: the values', or int32 for int8 values.
DType product_dtype(const BsrRef& bsr) { return bsr.values.dtype == DType::i8 ? DType::i32 : bsr.values.dtype; }

// out's shape for bsr and dense: broadcast batch dims, then M and N.
std::vector<int64_t> product_shape(const char* op, const BsrRef& bsr, const TensorRef& dense) {
  const std::vector<int64_t> batch = check_bsr(op, bsr, /*int8=*/true);
  core::require_present(op, "dense", dense);
  core::require_dtype(op, "dense", dense, {bsr.values.dtype});
  core::require_contiguous(op, "dense", dense);
  LOWBIT_REQUIRE(dense.ndim >= 2, ErrorCode::invalid_argument, op, ": dense must be at least 2-D [*batch, K, N] (got ",
                 core::shape_str(dense), ")");
  LOWBIT_REQUIRE(dense.size(-2) == bsr.K, ErrorCode::invalid_argument, op, ": dense's rows (", dense.size(-2),
                 ") must equal bsr's K (", bsr.K, ")");
  const std::vector<int64_t> dense_batch = core::lead_dims(dense, 2);
  std::vector<int64_t> out;
  LOWBIT_REQUIRE(core::broadcast_dims(batch, dense_batch, &out), ErrorCode::invalid_argument, op,
                 ": the batch dims of bsr ", dims_str(batch), " and dense ", dims_str(dense_batch),
                 " do not broadcast");
  out.push_back(bsr.M);
  out.push_back(dense.size(-1));
  return out;
}

// The batch dims of the product of mat1 [*, M, K] and mat2 [*, K, N] with input's, and the result's values' shape.
std::vector<int64_t> sampled_shape(const char* op, const BsrRef& input, const TensorRef& mat1, const TensorRef& mat2) {
  const std::vector<int64_t> batch = check_bsr(op, input);
  const DType dtype = input.values.dtype;
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"mat1", &mat1}, {"mat2", &mat2}}) {
    core::require_present(op, name, *t);
    core::require_dtype(op, name, *t, {dtype});
    core::require_contiguous(op, name, *t);
    LOWBIT_REQUIRE(t->ndim >= 2, ErrorCode::invalid_argument, op, ": ", name, " must be at least 2-D (got ",
                   core::shape_str(*t), ")");
  }
  LOWBIT_REQUIRE(mat1.size(-2) == input.M && mat2.size(-1) == input.K && mat1.size(-1) == mat2.size(-2),
                 ErrorCode::invalid_argument, op, ": mat1 ", core::shape_str(mat1), " @ mat2 ", core::shape_str(mat2),
                 " must be [*, ", input.M, ", K] @ [*, K, ", input.K, "] for input's shape [", input.M, ", ", input.K,
                 "]");
  std::vector<int64_t> joined, out;
  LOWBIT_REQUIRE(core::broadcast_dims(batch, core::lead_dims(mat1, 2), &joined) &&
                     core::broadcast_dims(joined, core::lead_dims(mat2, 2), &out),
                 ErrorCode::invalid_argument, op, ": the batch dims of input ", dims_str(batch), ", mat1 ",
                 dims_str(core::lead_dims(mat1, 2)), " and mat2 ", dims_str(core::lead_dims(mat2, 2)), " do not broadcast");
  const Shape v = input.values.sizes();
  out.insert(out.end(), v.end() - 3, v.end());
  return out;
}

}  // namespace

void check(const BsrDenseAddmmArgs& a) {
  const char* op = BsrDenseAddmmArgs::kName;
  const std::vector<int64_t> shape = product_shape(op, a.bsr, a.dense);
  const DType dtype = product_dtype(a.bsr);
  ops::require_shaped(op, "out", a.out, {dtype}, shape);
  if (dtype == DType::i32) {  // exact integer arithmetic: integral factors
    for (const auto& [name, v] : {std::pair<const char*, double>{"beta", a.beta}, {"alpha", a.alpha}}) {
      LOWBIT_REQUIRE(v == std::nearbyint(v) && std::fabs(v) < 2147483648.0, ErrorCode::invalid_argument, op, ": ", name,
                     " must be an integer for int8 operands (got ", v, ")");
    }
  }
  LOWBIT_REQUIRE(a.input.present() || a.beta == 0.0, ErrorCode::invalid_argument, op,
                 ": input is needed when beta is not 0 (got beta ", a.beta, ")");
  if (a.input.present()) {
    core::require_dtype(op, "input", a.input, {dtype});
    core::require_contiguous(op, "input", a.input);
    std::vector<int64_t> joined;
    LOWBIT_REQUIRE(core::broadcast_dims(core::lead_dims(a.input, 0), shape, &joined) && joined == shape,
                   ErrorCode::invalid_argument, op, ": input ", core::shape_str(a.input),
                   " must broadcast to out's shape ", dims_str(shape));
  }
  core::require_same_device(op, {{"bsr.values", &a.bsr.values},
                                 {"bsr.crow_indices", &a.bsr.crow_indices},
                                 {"bsr.col_indices", &a.bsr.col_indices},
                                 {"dense", &a.dense},
                                 {"input", &a.input},
                                 {"out", &a.out}});
}
size_t workspace_size(const BsrDenseAddmmArgs& a) { return ops::backend_workspace(a, a.dense.device); }
void run(const BsrDenseAddmmArgs& a, void* ws, Stream s) { ops::dispatch(a, a.dense.device, ws, s); }

void check(const SampledAddmmArgs& a) {
  const char* op = SampledAddmmArgs::kName;
  const std::vector<int64_t> shape = sampled_shape(op, a.input, a.mat1, a.mat2);
  ops::require_shaped(op, "out_values", a.out_values, {a.input.values.dtype}, shape);
  core::require_same_device(op, {{"input.values", &a.input.values},
                                 {"input.crow_indices", &a.input.crow_indices},
                                 {"input.col_indices", &a.input.col_indices},
                                 {"mat1", &a.mat1},
                                 {"mat2", &a.mat2},
                                 {"out_values", &a.out_values}});
}
size_t workspace_size(const SampledAddmmArgs& a) { return ops::backend_workspace(a, a.mat1.device); }
void run(const SampledAddmmArgs& a, void* ws, Stream s) { ops::dispatch(a, a.mat1.device, ws, s); }

void check(const BsrSoftmaxArgs& a) {
  const char* op = BsrSoftmaxArgs::kName;
  check_bsr(op, a.input);
  ops::require_shaped(op, "out_values", a.out_values, {a.input.values.dtype}, core::lead_dims(a.input.values, 0));
  core::require_same_device(op, {{"input.values", &a.input.values},
                                 {"input.crow_indices", &a.input.crow_indices},
                                 {"input.col_indices", &a.input.col_indices},
                                 {"out_values", &a.out_values}});
}
size_t workspace_size(const BsrSoftmaxArgs& a) { return ops::backend_workspace(a, a.input.values.device); }
void run(const BsrSoftmaxArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.values.device, ws, s); }

Tensor sampled_addmm(const BsrRef& input, const TensorRef& mat1, const TensorRef& mat2, double beta, double alpha,
                     Stream stream) {
  const std::vector<int64_t> shape = sampled_shape(SampledAddmmArgs::kName, input, mat1, mat2);
  Tensor out = Tensor::empty(Shape(shape.data(), shape.size()), input.values.dtype, mat1.device, stream);
  ops::run_with_workspace(SampledAddmmArgs{input, mat1, mat2, beta, alpha, out}, mat1.device, stream);
  return out;
}

Tensor bsr_softmax(const BsrRef& input, Stream stream) {
  check_bsr(BsrSoftmaxArgs::kName, input);
  Tensor out = Tensor::empty(input.values.sizes(), input.values.dtype, input.values.device, stream);
  ops::run_with_workspace(BsrSoftmaxArgs{input, out}, input.values.device, stream);
  return out;
}

Tensor bsr_dense_addmm(const TensorRef& input, const BsrRef& bsr, const TensorRef& dense, double beta, double alpha,
                       Stream stream) {
  const std::vector<int64_t> shape = product_shape(BsrDenseAddmmArgs::kName, bsr, dense);
  Tensor out = Tensor::empty(Shape(shape.data(), shape.size()), product_dtype(bsr), dense.device, stream);
  ops::run_with_workspace(BsrDenseAddmmArgs{input, bsr, dense, beta, alpha, out}, dense.device, stream);
  return out;
}

Tensor bsr_dense_mm(const BsrRef& bsr, const TensorRef& dense, Stream stream) {
  return bsr_dense_addmm(TensorRef{}, bsr, dense, 0.0, 1.0, stream);
}

}  // namespace lowbit
