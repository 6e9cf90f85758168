// The small kernels around rows_mma_kernel: the gather of A for the
// direct-A kernels, and the reduction of split-K partial sums.
#include "cuda/common/check.h"
#include "cuda/common/ptx/sync.cuh"
#include "cuda/gemm/kernel.cuh"
#include "cuda/gemm/kernels.h"

namespace lowbit::cuda::gemm {
namespace {

// out[m, n] = Σ_split partial[split, m, n] (+ bias[n]), in split order:
// the result does not depend on which split finished first.
__global__ void reduce_splits(const Params p) {
  // Launched early (programmatic dependent launch): wait for the matmul
  // kernel's grid to finish and its partial sums to be visible.
  ptx::griddepcontrol_wait();
  const int64_t total = p.M * p.N;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // Eight independent loads in flight, then added in split order.
    float v = 0.0f;
    for (int s0 = 0; s0 < p.splits; s0 += 8) {
      float x[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = s0 + j < p.splits ? p.partial[(s0 + j) * total + i] : 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (s0 + j < p.splits) v = s0 + j == 0 ? x[j] : __fadd_rn(v, x[j]);
      }
    }
    const int64_t n = i % p.N;
    if (p.bias) v = __fadd_rn(v, p.bias[n]);
    store_out(p, i / p.N, n, v);
  }
}

__global__ void gather_a(const Params p, uint16_t* a, int64_t lda) {
  const int64_t total = p.M * lda;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / lda, k = i % lda;
    uint16_t v = 0;
    if (k < p.K) v = p.A[m * p.lda + (p.perm ? static_cast<int64_t>(p.perm[k]) : k)];
    a[i] = v;
  }
}

}  // namespace

void gather_a_launch(const Params& p, uint16_t* a, int64_t lda, int blocks, cudaStream_t stream) {
  gather_a<<<blocks, 256, 0, stream>>>(p, a, lda);
  check_launch(MatmulArgs::kName, "gather_a");
}

void reduce_splits_launch(const Params& p, int blocks, cudaStream_t stream, bool early) {
  if (!early) {
    reduce_splits<<<blocks, 256, 0, stream>>>(p);
    check_launch(MatmulArgs::kName, "reduce_splits");
    return;
  }
  // Programmatic dependent launch (sm_90): the reduce kernel is launched
  // while the matmul kernel runs and waits for it in griddepcontrol.wait,
  // so the launch latency is not paid after the matmul kernel ends.
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(256);
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  check(cudaLaunchKernelEx(&config, reduce_splits, p), MatmulArgs::kName, "launch of reduce_splits");
}

}  // namespace lowbit::cuda::gemm
