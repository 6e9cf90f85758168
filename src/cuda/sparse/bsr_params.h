// The arguments of the CUDA bsr_dense_addmm kernels (bsr_dense_mm.cu): the
// operands' pointers, the block shape and the broadcast of batch dims and of
// input, as the host resolves them from BsrDenseAddmmArgs.
#pragma once

#include <cstdint>

namespace lowbit::cuda::sparse {

// Batch dims a call may have (out's dims before M, N).
constexpr int kMaxBatchDims = 8;

struct BsrParams {
  const void* values;  // [bsr batches, nnz, BM, BK]
  const void* crow;    // [bsr batches, rows + 1]
  const void* col;     // [bsr batches, nnz]
  bool index64;        // crow and col are int64 (else int32)
  const void* dense;   // [dense batches, K, N]
  const void* input;   // null when beta == 0
  void* out;           // [batches, M, N]
  int64_t rows;        // block rows, M / BM
  int64_t nnz;
  int64_t M, N, K;
  int BM, BK;
  int64_t kcols;  // block columns, K / BK
  int64_t batches;
  // out's batch dims and each operand's stride along them, 0 where it repeats: the BSR's and dense's in
  // whole matrices, input's (broadcast to out's shape) in elements like its strides along M and N.
  int nd;
  int64_t dims[kMaxBatchDims];
  int64_t bsr_stride[kMaxBatchDims], dense_stride[kMaxBatchDims], input_stride[kMaxBatchDims];
  int64_t input_sm, input_sn;
  float alpha, beta;           // float dtypes
  int32_t ialpha, ibeta;       // int8: products wrap modulo 2^32, as the reference's int64 sums do
};

// Where out batch `ob` starts in the BSR and dense (in matrices) and in input (in elements).
struct BatchOffsets {
  int64_t bsr, dense, input;
};

__host__ __device__ inline BatchOffsets batch_offsets(const BsrParams& p, int64_t ob) {
  BatchOffsets o{0, 0, 0};
  for (int i = p.nd - 1; i >= 0; --i) {
    const int64_t c = ob % p.dims[i];
    ob /= p.dims[i];
    o.bsr += c * p.bsr_stride[i];
    o.dense += c * p.dense_stride[i];
    o.input += c * p.input_stride[i];
  }
  return o;
}

}  // namespace lowbit::cuda::sparse
