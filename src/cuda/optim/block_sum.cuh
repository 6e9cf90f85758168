// The CTA-wide float64 sum of the optimizer kernels' norms, in one fixed
// order (warp butterflies, then the warps' sums in index order), so a norm
// has the same bits in every run.
#pragma once

namespace lowbit::cuda::optim {

// a and b summed over a CTA of kThreads threads (a multiple of 32); the sums
// in thread 0, the other threads' values undefined.
template <int kThreads>
__device__ void block_sum(double& a, double& b) {
  __shared__ double s[2][kThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, off);
    b += __shfl_xor_sync(0xffffffffu, b, off);
  }
  if ((threadIdx.x & 31) == 0) {
    s[0][threadIdx.x >> 5] = a;
    s[1][threadIdx.x >> 5] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    a = 0.0;
    b = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) {
      a += s[0][w];
      b += s[1][w];
    }
  }
}

}  // namespace lowbit::cuda::optim
