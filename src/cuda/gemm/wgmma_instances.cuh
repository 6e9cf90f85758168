// KernelInfo of the tiles-layout wgmma kernel's instances (used by the
// kernels_wgmma_*.cu, one translation unit per decoder).
#pragma once

#include "cuda/gemm/kernels.h"
#include "cuda/gemm/tiles_instances.cuh"
#include "cuda/gemm/tiles_wgmma.cuh"

namespace lowbit::cuda::gemm {

template <class Dec, class T, int BN>
KernelInfo wgmma_instance() {
  using S = WgmmaShape<Dec, BN>;
  KernelInfo k;
  k.kernel = reinterpret_cast<const void*>(tiles_wgmma_kernel<Dec, T, BN>);
  k.tma = true;
  k.smem = S::kBytes;
  k.chunk = S::kKS;
  k.step = S::kKS;
  k.post_scale = false;
  k.threads = S::kThreads;
  k.m_tile = BN;
  k.n_tile = S::kRows;
  return k;
}

template <template <class> class DecOf>
KernelInfo wgmma_instance_at(bool bf16, int bn) {
  if (bn == 128) return bf16 ? wgmma_instance<DecOf<BF16>, BF16, 128>() : wgmma_instance<DecOf<F16>, F16, 128>();
  if (bn == 256) return bf16 ? wgmma_instance<DecOf<BF16>, BF16, 256>() : wgmma_instance<DecOf<F16>, F16, 256>();
  return {};
}

}  // namespace lowbit::cuda::gemm
