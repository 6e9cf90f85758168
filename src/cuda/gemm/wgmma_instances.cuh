// KernelInfo of the tiles-layout wgmma kernel's instances (used by the
// kernels_wgmma_*.cu, one translation unit per decoder).
#pragma once

#include "cuda/gemm/kernels.h"
#include "cuda/gemm/tiles_instances.cuh"
#include "cuda/gemm/tiles_wgmma.cuh"

namespace lowbit::cuda::gemm {

// The kernel's configs: {rows of M, columns of K} a stage.
struct WgmmaShapeConfig {
  int bn, ks;
};
inline constexpr WgmmaShapeConfig kWgmmaShapes[] = {{128, 64}, {256, 64}, {64, 64}, {256, 128}, {128, 128}};
inline constexpr int kNumWgmmaShapes = static_cast<int>(sizeof(kWgmmaShapes) / sizeof(kWgmmaShapes[0]));

template <class Dec, class T, int BN, int KS>
KernelInfo wgmma_instance() {
  using S = WgmmaShape<Dec, BN, KS>;
  KernelInfo k;
  k.kernel = reinterpret_cast<const void*>(tiles_wgmma_kernel<Dec, T, BN, KS>);
  k.tma = true;
  k.smem = S::kBytes;
  k.chunk = S::kKS;
  k.step = S::kKS;
  k.threads = S::kThreads;
  k.m_tile = BN;
  k.n_tile = S::kRows;
  return k;
}

template <template <class> class DecOf, class T, int... I>
KernelInfo wgmma_instance_index(int index, std::integer_sequence<int, I...>) {
  KernelInfo k;
  ((index == I ? (k = wgmma_instance<DecOf<T>, T, kWgmmaShapes[I].bn, kWgmmaShapes[I].ks>(), 0) : 0), ...);
  return k;
}

// The instance of shape `index` (kWgmmaShapes).
template <template <class> class DecOf>
KernelInfo wgmma_instance_at(bool bf16, int index) {
  using Seq = std::make_integer_sequence<int, kNumWgmmaShapes>;
  return bf16 ? wgmma_instance_index<DecOf, BF16>(index, Seq{}) : wgmma_instance_index<DecOf, F16>(index, Seq{});
}

}  // namespace lowbit::cuda::gemm
