// Instances of the tiles-layout kernel for the 4-bit tables (nf4, fp4, fp4_e2m1).
#include "cuda/gemm/tiles_instances.cuh"

namespace lowbit::cuda::gemm {
KernelInfo tiles_mma_kernel_table(bool bf16, int shape) {
  return tiles_instance_at<TileTable::template Of>(bf16, shape);
}
}  // namespace lowbit::cuda::gemm
