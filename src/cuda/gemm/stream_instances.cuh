// KernelInfo of the tiles-layout streaming kernel's instances (used by the
// generated instances/tiles_stream_*.cu, one translation unit per decoder).
#pragma once

#include <utility>

#include "cuda/gemm/kernels.h"
#include "cuda/gemm/tiles_instances.cuh"
#include "cuda/gemm/tiles_stream.cuh"

namespace lowbit::cuda::gemm {

template <class Dec, class T, StreamShape kShape>
KernelInfo stream_instance() {
  using S = TilesStreamShape<Dec, kShape.m_tiles, kShape.row_tiles, kShape.warps, kShape.depth>;
  KernelInfo k;
  k.kernel = reinterpret_cast<const void*>(
      tiles_stream_kernel<Dec, T, kShape.m_tiles, kShape.row_tiles, kShape.warps, kShape.depth, kShape.blocks>);
  k.blocks = kShape.blocks;
  k.smem = S::kTabBytes;  // + A's rows for the split (the plan's)
  k.chunk = k.step = S::kKT;
  k.threads = S::kThreads;
  k.m_tile = S::kBM;
  k.n_tile = kShape.warps * kShape.row_tiles * core::kTileRows;
  return k;
}

// The instance of shape `index` (kStreamShapes) for fp16 or bf16 activations.
template <template <class> class DecOf>
KernelInfo stream_instance_at(bool bf16, int index) {
  return shape_instance_at<kStreamShapes>(bf16, index, [](auto i, auto t) {
    using T = decltype(t);
    return stream_instance<DecOf<T>, T, kStreamShapes[decltype(i)::value]>();
  });
}

}  // namespace lowbit::cuda::gemm
