// The CUDA implementations of the BSR ops (lowbit/ops/sparse.h), registered
// as "cuda" by register_cuda_backend() (src/cuda/backend.cu); docs/sparse.md
// describes the kernels.
#pragma once

#include "lowbit/ops/sparse.h"

namespace lowbit::cuda {

// bsr_dense_addmm (and so bsr_dense_mm): no workspace.
void bsr_dense_addmm(const BsrDenseAddmmArgs& a, void* workspace, Stream stream);

}  // namespace lowbit::cuda
