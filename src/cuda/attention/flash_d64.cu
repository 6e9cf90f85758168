// The tensor-core attention kernel's head-dim-64 instances (instances.cuh).
#include "cuda/attention/instances.cuh"

namespace lowbit::cuda::attention {

FlashKernel flash_kernel_d64(DType dtype, Variant variant) { return flash_kernel_for<64>(dtype, variant); }

}  // namespace lowbit::cuda::attention
