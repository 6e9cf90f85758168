// KernelInfo of one instance of rows_mma_kernel (used by rows_instances.cuh and kernels_generic.cu).
#pragma once

#include "cuda/gemm/kernel.cuh"
#include "cuda/gemm/kernels.h"

namespace lowbit::cuda::gemm {

template <class Dec, class T, int MT>
KernelInfo instance() {
  using S = Smem<Dec, MT>;
  KernelInfo k;
  k.kernel = reinterpret_cast<const void*>(rows_mma_kernel<Dec, T, MT>);
  k.smem = S::kBytes;
  k.chunk = S::kCH;
  k.step = S::kCH * S::kU;
  k.direct_a = kDirectA<MT>;
  return k;
}

// The instance for a runtime M tile (1, 2 or 4 n8 tiles).
template <template <class> class DecOf, class T>
KernelInfo instance_mt(int mt) {
  switch (mt) {
    case 1: return instance<DecOf<T>, T, 1>();
    case 2: return instance<DecOf<T>, T, 2>();
    case 4: return instance<DecOf<T>, T, 4>();
    default: return {};
  }
}

template <template <class> class DecOf>
KernelInfo instance_at(bool bf16, int mt) {
  return bf16 ? instance_mt<DecOf, BF16>(mt) : instance_mt<DecOf, F16>(mt);
}

}  // namespace lowbit::cuda::gemm
