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

// scatter_mm: scattered block products added into `accumulators`, in one of
// torch's three index formats (docs/sparse.md spells each out as a loop).
// Every index array is c_indices' dtype, i32 or i64, 1-D (pq [G, 2]).
//   scatter_mm: for r < R, g in [c_indices[r], c_indices[r + 1]):
//     accumulators[r] += blocks[pq[g, 0]] @ others[pq[g, 1]]
//     (others [Q, Ks, Ns], accumulators [R, Ms, Ns], c_indices [R + 1]).
//   bsr_strided_mm: for batch b, i < len(r_offsets), (r0, r1) = divmod(r_offsets[i], N),
//     g in [c_indices[i], c_indices[i + 1]), (q0, q1) = divmod(q_offsets[g], N):
//     accumulators[b, r0:r0+Ms, r1:r1+Ns] += blocks[p_offsets[g]] @ others[b, q0:q0+Ks, q1:q1+Ns]
//     (others [B, K, N], accumulators [B, M, N], Ns = N / split_n).
//   bsr_strided_mm_compressed: as bsr_strided_mm with c_indices the BSR's
//     crow_indices [M / Ms + 1] and the blocks of output row block m = r0 / Ms
//     (column part n = r1 / Ns) those of c_indices[m] .. c_indices[m + 1] - 1,
//     the i-th taking q_offsets[n * c1 + (split_n - n) * c0 + i].
// Each listed output block sums its products in float64 onto its old value,
// rounded once (to float32, then to the dtype); a block listed twice adds twice.
enum class ScatterMmFormat : int { scatter_mm = 0, bsr_strided_mm = 1, bsr_strided_mm_compressed = 2 };
const char* scatter_mm_format_name(ScatterMmFormat f);

struct ScatterMmArgs {
  static constexpr const char* kName = "scatter_mm";
  ScatterMmFormat format = ScatterMmFormat::scatter_mm;
  TensorRef blocks;        // f32/f16/bf16 [P, Ms, Ks], contiguous
  TensorRef others;        // blocks' dtype: [Q, Ks, Ns] (scatter_mm) or [B, K, N], contiguous
  TensorRef c_indices;     // i32/i64 [R + 1], [len(r_offsets) + 1] or [M / Ms + 1]
  TensorRef pq;            // scatter_mm: [G, 2]
  TensorRef r_offsets;     // the bsr_strided formats: [R']
  TensorRef p_offsets;     // bsr_strided_mm: [G]
  TensorRef q_offsets;     // the bsr_strided formats: [G]
  int64_t split_n = 1;     // the bsr_strided formats: N / Ns (N a multiple)
  TensorRef accumulators;  // blocks' dtype: [R, Ms, Ns] (scatter_mm) or [B, M, N], contiguous; read and written
};

LOWBIT_DECLARE_OP(BsrDenseAddmmArgs)
LOWBIT_DECLARE_OP(SampledAddmmArgs)
LOWBIT_DECLARE_OP(BsrSoftmaxArgs)
LOWBIT_DECLARE_OP(ScatterMmArgs)

// Allocating front ends: out on the operands' device.
Tensor bsr_dense_addmm(const TensorRef& input, const BsrRef& bsr, const TensorRef& dense, double beta = 1.0,
                       double alpha = 1.0, Stream stream = {});
Tensor bsr_dense_mm(const BsrRef& bsr, const TensorRef& dense, Stream stream = {});
// The result's values (its indices are input's, broadcast to the result's batch dims).
Tensor sampled_addmm(const BsrRef& input, const TensorRef& mat1, const TensorRef& mat2, double beta = 1.0,
                     double alpha = 1.0, Stream stream = {});
Tensor bsr_softmax(const BsrRef& input, Stream stream = {});

}  // namespace lowbit
