// Instances of the tiles-layout wgmma kernel for the 4-bit tables.
#include "cuda/gemm/wgmma_instances.cuh"

namespace lowbit::cuda::gemm {
KernelInfo tiles_wgmma_kernel_table(bool bf16, int bn) { return wgmma_instance_at<TileTable::template Of>(bf16, bn); }
}  // namespace lowbit::cuda::gemm
