// Instances of the tiles-layout kernel for 2-bit integer codes.
#include "cuda/gemm/tiles_instances.cuh"

namespace lowbit::cuda::gemm {
KernelInfo tiles_mma_kernel_b2(bool bf16, int shape) {
  return tiles_instance_at<TileMagic<2>::template Of>(bf16, shape);
}
}  // namespace lowbit::cuda::gemm
