// KernelInfo of the tiles-layout wgmma kernel's instances (used by the
// generated instances/tiles_wgmma_*.cu, one translation unit per decoder).
#pragma once

#include "cuda/gemm/kernels.h"
#include "cuda/gemm/tiles_instances.cuh"
#include "cuda/gemm/tiles_wgmma.cuh"

namespace lowbit::cuda::gemm {

template <class Dec, class T, int BM, int KS, int CW>
KernelInfo wgmma_instance() {
  using S = WgmmaShape<Dec, BM, KS, CW>;
  KernelInfo k;
  k.kernel = reinterpret_cast<const void*>(tiles_wgmma_kernel<Dec, T, BM, KS, CW>);
  k.tma = true;
  k.smem = S::kBytes;
  k.chunk = S::kKS;
  k.step = S::kKS;
  k.threads = S::kThreads;
  k.m_tile = BM;
  k.n_tile = S::kBlockN;
  return k;
}

// The instance of shape `index` (kWgmmaShapes).
template <template <class> class DecOf>
KernelInfo wgmma_instance_at(bool bf16, int index) {
  return shape_instance_at<kWgmmaShapes>(bf16, index, [](auto i, auto t) {
    using T = decltype(t);
    constexpr WgmmaShapeConfig c = kWgmmaShapes[decltype(i)::value];
    return wgmma_instance<DecOf<T>, T, c.block_m, c.stage_k, c.consumers>();
  });
}

}  // namespace lowbit::cuda::gemm
