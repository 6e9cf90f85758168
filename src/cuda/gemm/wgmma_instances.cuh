// KernelInfo of the tiles-layout wgmma kernel's instances (used by the
// kernels_wgmma_*.cu, one translation unit per decoder).
#pragma once

#include "cuda/gemm/kernels.h"
#include "cuda/gemm/tiles_instances.cuh"
#include "cuda/gemm/tiles_wgmma.cuh"

namespace lowbit::cuda::gemm {

// The kernel's configs: rows of M a block, columns of K a stage, consumer
// warpgroups (64 rows of N each).
struct WgmmaShapeConfig {
  int block_m, stage_k, consumers;
};
inline constexpr WgmmaShapeConfig kWgmmaShapes[] = {{128, 64, 2},  {256, 64, 2},  {64, 64, 2},
                                                    {256, 128, 2}, {128, 128, 2}, {64, 64, 4}};
inline constexpr int kNumWgmmaShapes = static_cast<int>(sizeof(kWgmmaShapes) / sizeof(kWgmmaShapes[0]));

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
  return shape_instance_at<kNumWgmmaShapes>(bf16, index, [](auto i, auto t) {
    using T = decltype(t);
    constexpr WgmmaShapeConfig c = kWgmmaShapes[decltype(i)::value];
    return wgmma_instance<DecOf<T>, T, c.block_m, c.stage_k, c.consumers>();
  });
}

}  // namespace lowbit::cuda::gemm
