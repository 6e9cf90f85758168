// The CPU BSR products (src/cpu/sparse/bsr.cpp: the float64 references and
// the index checks; bsr_fast.cpp: the fast bsr_dense_addmm, sampled_addmm and
// bsr_softmax).
#pragma once

#include <cstdint>
#include <vector>

#include "lowbit/ops/sparse.h"

namespace lowbit::core::cpu {

// The index arrays of every batch, as int64: crow [batches][rows + 1], col [batches][nnz].
struct Indices {
  std::vector<int64_t> crow, col;
};

// b's index arrays, checked (row pointers from 0 to nnz, never decreasing; columns in range and ascending
// without repeats in each row); invalid_argument naming `op`, the array, the batch and the row otherwise.
Indices indices_of(const char* op, const BsrRef& b);

// float64 sums (int64 for int8), the reference every backend is tested against.
void bsr_dense_addmm_reference(const BsrDenseAddmmArgs& a, void* workspace, Stream stream);
// fp32 sums in block order, vectorized: float dtypes (int8 goes to the reference, already exact).
void bsr_dense_addmm_fast(const BsrDenseAddmmArgs& a, void* workspace, Stream stream);
// fp32 sums over K ascending, vectorized.
void sampled_addmm_fast(const SampledAddmmArgs& a, void* workspace, Stream stream);
// fp32 maximum, exponentials and sum.
void bsr_softmax_fast(const BsrSoftmaxArgs& a, void* workspace, Stream stream);

// acc[r][0, nc) += sum over k < BK of a[r][k] * d[k][0, nc), r < BM (acc rows `as` apart, d rows `ds` apart),
// k ascending for every element, vectorized (bsr_fast.cpp; scatter_mm's fast path shares it).
void block_product(float* acc, int64_t as, const float* a, int64_t BM, int64_t BK, const float* d, int64_t ds,
                   int64_t nc);

}  // namespace lowbit::core::cpu
