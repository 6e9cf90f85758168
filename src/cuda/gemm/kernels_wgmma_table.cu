// Instances of the tiles-layout wgmma kernel for the 4-bit tables.
#include "cuda/gemm/wgmma_instances.cuh"

namespace lowbit::cuda::gemm {
KernelInfo tiles_wgmma_kernel_table(bool bf16, int shape) {
  return wgmma_instance_at<TileTable::template Of>(bf16, shape);
}
}  // namespace lowbit::cuda::gemm
