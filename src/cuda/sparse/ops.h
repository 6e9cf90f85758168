// The CUDA implementations of the BSR ops (lowbit/ops/sparse.h), registered
// as "cuda" by register_cuda_backend() (src/cuda/backend.cu); docs/sparse.md
// describes the kernels.
#pragma once

#include <cstddef>

#include "lowbit/ops/sparse.h"

namespace lowbit::cuda {

// bsr_dense_addmm (and so bsr_dense_mm): no workspace.
void bsr_dense_addmm(const BsrDenseAddmmArgs& a, void* workspace, Stream stream);
// sampled_addmm and bsr_softmax (bsr_sampled.cu): the workspace holds a flag a BSR batch (its indices' check).
void sampled_addmm(const SampledAddmmArgs& a, void* workspace, Stream stream);
size_t sampled_addmm_workspace(const SampledAddmmArgs& a);
void bsr_softmax(const BsrSoftmaxArgs& a, void* workspace, Stream stream);
size_t bsr_softmax_workspace(const BsrSoftmaxArgs& a);

}  // namespace lowbit::cuda
