// The tensor-core attention kernel's head-dim-128 instances (instances.cuh).
#include "cuda/attention/instances.cuh"

namespace lowbit::cuda::attention {

FlashKernel flash_kernel_d128(DType dtype, Variant variant) { return flash_kernel_for<128>(dtype, variant); }

}  // namespace lowbit::cuda::attention
