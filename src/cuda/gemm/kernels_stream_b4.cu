// Instances of the tiles-layout streaming kernel for 4-bit integer codes.
#include "cuda/gemm/stream_instances.cuh"

namespace lowbit::cuda::gemm {
KernelInfo tiles_stream_kernel_b4(bool bf16, int shape) {
  return stream_instance_at<TileMagic<4>::template Of>(bf16, shape);
}
}  // namespace lowbit::cuda::gemm
