// The reduction of split-K partial sums (kernel.cuh writes them).
#include "cuda/common/check.h"
#include "cuda/gemm/kernel.cuh"
#include "cuda/gemm/kernels.h"

namespace lowbit::cuda::gemm {
namespace {

// out[m, n] = Σ_split partial[split, m, n] (+ bias[n]), in split order:
// the result does not depend on which split finished first.
__global__ void reduce_splits(const Params p) {
  const int64_t total = p.M * p.N;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = p.partial[i];
    for (int s = 1; s < p.splits; ++s) v = __fadd_rn(v, p.partial[s * total + i]);
    const int64_t n = i % p.N;
    if (p.bias) v = __fadd_rn(v, p.bias[n]);
    store_out(p, i / p.N, n, v);
  }
}

}  // namespace

void reduce_splits_launch(const Params& p, int blocks, cudaStream_t stream) {
  reduce_splits<<<blocks, 256, 0, stream>>>(p);
  check_launch(MatmulArgs::kName, "reduce_splits");
}

}  // namespace lowbit::cuda::gemm
