// Block-sparse (BSR) products of torch.sparse's block-sparse ops
// (docs/sparse.md).
//
//   bsr_dense_addmm: out = beta * input + alpha * (bsr @ dense), bsr a BSR
//     matrix [*B, M, K] of BM x BK blocks, dense [*D, K, N], out
//     [broadcast(*B, *D), M, N]; input broadcast to out, not read when
//     beta == 0 (a NaN there does not reach out). The products of a row
//     are summed in float64 and alpha and beta applied in float64; the
//     result is rounded to float32, then to out's dtype.
//   bsr_dense_mm: bsr @ dense (beta = 0, alpha = 1).
//   With int8 values and an int8 dense (torch's _int_bsr_dense_addmm), out
//   and input are int32, beta and alpha integers, and every step exact
//   (int64 sums, the result wrapped to int32 as two's complement).
//   sampled_addmm: the values of a BSR with input's pattern, each stored
//     element beta * input + alpha * (mat1 @ mat2) there (SDDMM: only the
//     stored blocks' products are computed); input's values not read when
//     beta == 0. Batch dims of input, mat1 and mat2 broadcast.
//   bsr_softmax: the values of a BSR with input's pattern, each row's stored
//     elements softmaxed together (absent elements count as -inf).
//   Every sum is taken in float64, rounded to float32, then to the dtype.
#pragma once

#include <cstdint>

#include "lowbit/ops/declare_op.h"
#include "lowbit/tensor.h"

namespace lowbit {

// A BSR matrix [*B, M, K] (torch's layout): block row i of batch b holds
// the blocks crow_indices[b, i] .. crow_indices[b, i + 1] - 1, block j at
// block column col_indices[b, j] (ascending within a row, no repeats) with
// its values values[b, j] (BM x BK, row-major).
struct BsrRef {
  TensorRef crow_indices;  // i32/i64 [*B, M / BM + 1], contiguous
  TensorRef col_indices;   // crow_indices' dtype [*B, nnz], contiguous
  TensorRef values;        // f32/f16/bf16 (i8: bsr_dense_addmm) [*B, nnz, BM, BK], contiguous
  int64_t M = 0;           // a multiple of BM
  int64_t K = 0;           // a multiple of BK
};

struct BsrDenseAddmmArgs {
  static constexpr const char* kName = "bsr_dense_addmm";
  TensorRef input;  // out's dtype, broadcastable to out's shape; may be absent when beta == 0
  BsrRef bsr;
  TensorRef dense;  // values' dtype [*D, K, N], contiguous
  double beta = 1.0;
  double alpha = 1.0;
  TensorRef out;  // values' dtype (i32 for i8 values) [broadcast(*B, *D), M, N], contiguous
};

struct SampledAddmmArgs {
  static constexpr const char* kName = "sampled_addmm";
  BsrRef input;    // [*B, M, N] in BM x BN blocks (its M and K are M and N); values not read when beta == 0
  TensorRef mat1;  // input's values' dtype [*D1, M, K], contiguous
  TensorRef mat2;  // the same dtype [*D2, K, N], contiguous
  double beta = 1.0;
  double alpha = 1.0;
  TensorRef out_values;  // [broadcast(*B, *D1, *D2), nnz, BM, BN], contiguous: the result's blocks
};

struct BsrSoftmaxArgs {
  static constexpr const char* kName = "bsr_softmax";
  BsrRef input;
  TensorRef out_values;  // input.values' dtype and shape, contiguous
};

LOWBIT_DECLARE_OP(BsrDenseAddmmArgs)
LOWBIT_DECLARE_OP(SampledAddmmArgs)
LOWBIT_DECLARE_OP(BsrSoftmaxArgs)

// Allocating front ends: out on the operands' device.
Tensor bsr_dense_addmm(const TensorRef& input, const BsrRef& bsr, const TensorRef& dense, double beta = 1.0,
                       double alpha = 1.0, Stream stream = {});
Tensor bsr_dense_mm(const BsrRef& bsr, const TensorRef& dense, Stream stream = {});
// The result's values (its indices are input's, broadcast to the result's batch dims).
Tensor sampled_addmm(const BsrRef& input, const TensorRef& mat1, const TensorRef& mat2, double beta = 1.0,
                     double alpha = 1.0, Stream stream = {});
Tensor bsr_softmax(const BsrRef& input, Stream stream = {});

}  // namespace lowbit
