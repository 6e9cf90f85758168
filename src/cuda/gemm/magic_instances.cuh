// Instances of the integer (magic-number) decoder for one bit width: span
// loads of 16 or 8 bytes × fp16 / bf16 × M tiles. Each bit width has its own
// translation unit (kernels_magic_b*.cu), so they compile in parallel.
#pragma once

#include "cuda/gemm/instance.cuh"

namespace lowbit::cuda::gemm {

template <int kBits, int kLB>
struct Magic {
  template <class T>
  using Of = MagicDecoder<kBits, kLB, T>;
};

template <int kBits>
KernelInfo magic_bits(int lb, bool bf16, int mt) {
  if (lb == 16) return instance_at<Magic<kBits, 16>::template Of>(bf16, mt);
  if (lb == 8) return instance_at<Magic<kBits, 8>::template Of>(bf16, mt);
  return {};
}

}  // namespace lowbit::cuda::gemm
