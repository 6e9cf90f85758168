// Instances of the tiles-layout wgmma kernel for 8-bit integer codes.
#include "cuda/gemm/wgmma_instances.cuh"

namespace lowbit::cuda::gemm {
KernelInfo tiles_wgmma_kernel_b8(bool bf16, int shape) {
  return wgmma_instance_at<TileMagic<8>::template Of>(bf16, shape);
}
}  // namespace lowbit::cuda::gemm
