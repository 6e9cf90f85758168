// The tensor-core attention kernel's head-dim-256 instances (instances.cuh).
#include "cuda/attention/instances.cuh"

namespace lowbit::cuda::attention {

FlashKernel flash_kernel_d256(DType dtype, Variant variant) { return flash_kernel_for<256>(dtype, variant); }

}  // namespace lowbit::cuda::attention
