// KernelInfo of the tiles-layout streaming kernel's instances (used by the
// kernels_stream_*.cu, one translation unit per decoder).
#pragma once

#include <utility>

#include "cuda/gemm/kernels.h"
#include "cuda/gemm/tiles_instances.cuh"
#include "cuda/gemm/tiles_stream.cuh"

namespace lowbit::cuda::gemm {

// The kernel's configs {m_tiles, row_tiles, warps, depth, blocks}
// (StreamShape): M tiles of 8 and 16 with 8 warps a block and 2 blocks an
// SM; M tile 16 with 16 warps and one block an SM (twice the shared memory a
// block for the activations: fewer K splits when they, not the GPU's fill,
// set the count); M tile 32, 16 warps of one row tile, one block an SM; M
// tile 64, 12 warps of one row tile (165 registers), one block an SM. The
// heuristic's choices for M <= 8, 16, 32, and M <= 64 where wgmma does not
// serve (matmul.cu).
inline constexpr StreamShape kStreamShapes[] = {
    {1, 2, 8, 4, 2}, {2, 2, 8, 4, 2}, {2, 2, 16, 4, 1}, {4, 1, 16, 4, 1}, {8, 1, 12, 4, 1}};
inline constexpr int kNumStreamShapes = static_cast<int>(sizeof(kStreamShapes) / sizeof(kStreamShapes[0]));

template <class Dec, class T, StreamShape kShape>
KernelInfo stream_instance() {
  using S = TilesStreamShape<Dec, kShape.m_tiles, kShape.row_tiles, kShape.warps, kShape.depth>;
  KernelInfo k;
  k.kernel = reinterpret_cast<const void*>(
      tiles_stream_kernel<Dec, T, kShape.m_tiles, kShape.row_tiles, kShape.warps, kShape.depth, kShape.blocks>);
  k.stream = true;
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
  return shape_instance_at<kNumStreamShapes>(bf16, index, [](auto i, auto t) {
    using T = decltype(t);
    return stream_instance<DecOf<T>, T, kStreamShapes[decltype(i)::value]>();
  });
}

}  // namespace lowbit::cuda::gemm
