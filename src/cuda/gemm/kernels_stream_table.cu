// Instances of the tiles-layout streaming kernel for the 4-bit tables (nf4, fp4, fp4_e2m1).
#include "cuda/gemm/stream_instances.cuh"

namespace lowbit::cuda::gemm {
KernelInfo tiles_stream_kernel_table(bool bf16, int shape) {
  return stream_instance_at<TileTable::template Of>(bf16, shape);
}
}  // namespace lowbit::cuda::gemm
