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
  TensorRef values;        // f32/f16/bf16 [*B, nnz, BM, BK], contiguous
  int64_t M = 0;           // a multiple of BM
  int64_t K = 0;           // a multiple of BK
};

struct BsrDenseAddmmArgs {
  static constexpr const char* kName = "bsr_dense_addmm";
  TensorRef input;  // values' dtype, broadcastable to out's shape; may be absent when beta == 0
  BsrRef bsr;
  TensorRef dense;  // values' dtype [*D, K, N], contiguous
  double beta = 1.0;
  double alpha = 1.0;
  TensorRef out;  // values' dtype [broadcast(*B, *D), M, N], contiguous
};

LOWBIT_DECLARE_OP(BsrDenseAddmmArgs)

// Allocating front ends: out on the operands' device.
Tensor bsr_dense_addmm(const TensorRef& input, const BsrRef& bsr, const TensorRef& dense, double beta = 1.0,
                       double alpha = 1.0, Stream stream = {});
Tensor bsr_dense_mm(const BsrRef& bsr, const TensorRef& dense, Stream stream = {});

}  // namespace lowbit
