// Integer-decoder instances for 2-bit weights (magic_instances.cuh).
#include "cuda/gemm/magic_instances.cuh"

namespace lowbit::cuda::gemm {

KernelInfo magic_kernel_b2(int lb, bool bf16, int mt) { return magic_bits<2>(lb, bf16, mt); }

}  // namespace lowbit::cuda::gemm
