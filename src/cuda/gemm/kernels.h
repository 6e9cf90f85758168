// The instances of the rows-layout matmul kernel (kernel.cuh), one
// translation unit per decoder family so they compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/gemm/params.h"
#include "lowbit/ops/gemm.h"

namespace lowbit::cuda::gemm {

struct KernelInfo {
  void (*kernel)(Params) = nullptr;  // null: no such instance
  size_t smem = 0;                   // dynamic shared memory bytes
  int chunk = 0;                     // columns of K per chunk: 4 spans of E
  int step = 0;                      // columns of K per main-loop pass
  bool post_scale = false;
  bool direct_a = false;  // reads A from global memory (see Params::A)
};

// Integer decoder of 1, 2, 4 or 8 bits (kernels_magic_b*.cu); lb (bytes per
// span load) 16 or 8; mt 1, 2, 4.
KernelInfo magic_kernel_b1(int lb, bool bf16, int mt);
KernelInfo magic_kernel_b2(int lb, bool bf16, int mt);
KernelInfo magic_kernel_b4(int lb, bool bf16, int mt);
KernelInfo magic_kernel_b8(int lb, bool bf16, int mt);
inline KernelInfo magic_kernel(int bits, int lb, bool bf16, int mt) {
  switch (bits) {
    case 1: return magic_kernel_b1(lb, bf16, mt);
    case 2: return magic_kernel_b2(lb, bf16, mt);
    case 4: return magic_kernel_b4(lb, bf16, mt);
    case 8: return magic_kernel_b8(lb, bf16, mt);
    default: return {};
  }
}
// 4-bit tables; lb 16 or 8.
KernelInfo table_kernel(int lb, bool bf16, int mt);
// Any weight type.
KernelInfo generic_kernel(WeightType type, bool bf16, int mt);

// a[m, k] = A[m, perm[k]] (or A[m, k]) for k < K, 0 up to lda: A made fit
// for the direct-A kernels, in the workspace.
void gather_a_launch(const Params& p, uint16_t* a, int64_t lda, int blocks, cudaStream_t stream);

// out = Σ_split partial (+ bias) over `blocks` blocks of 256 threads (reduce.cu).
void reduce_splits_launch(const Params& p, int blocks, cudaStream_t stream);

// Makes the instance usable with its shared memory (once per device).
void prepare(const KernelInfo& k, const char* op);

}  // namespace lowbit::cuda::gemm
