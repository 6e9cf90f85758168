// KernelInfo of the tiles-layout mma.sync kernel's instances (used by the
// generated instances/tiles_mma_*.cu, one translation unit per decoder so they
// compile in parallel).
#pragma once

#include <type_traits>
#include <utility>

#include "cuda/gemm/kernels.h"
#include "cuda/gemm/tiles_mma.cuh"

namespace lowbit::cuda::gemm {

// A shape's tiles per stage for a bit width: columns from 64 (the A
// swizzle's 8 chunks) to 512, and A's stage at most 8 KB.
constexpr TilesShape tiles_shape_for(TilesShape s, int bits) {
  const int kt = core::tile_k(bits);
  int tps = s.stage_tiles;
  while (tps > 1 && (tps * kt > 512 || 8 * s.m_tiles * tps * kt * 2 > 8192)) tps /= 2;
  while (tps * kt < 64) tps *= 2;
  s.stage_tiles = tps;
  return s;
}

template <class Dec, class T, TilesShape kShape>
KernelInfo tiles_instance() {
  using S = TilesMmaShape<Dec, kShape.m_tiles, kShape.row_tiles, kShape.stage_tiles, kShape.warps, kShape.stages>;
  KernelInfo k;
  k.kernel = reinterpret_cast<const void*>(
      tiles_mma_kernel<Dec, T, kShape.m_tiles, kShape.row_tiles, kShape.stage_tiles, kShape.warps, kShape.stages>);
  k.smem = S::kBytes;
  k.chunk = S::kKS;
  k.step = S::kKS;
  k.threads = S::kThreads;
  k.m_tile = S::kBM;
  k.n_tile = kShape.warps * kShape.row_tiles * core::kTileRows;
  return k;
}

// Instance `index` of a family's shape list (shapes.h) for fp16 or bf16
// activations: make(std::integral_constant<int, I>{}, T{}) builds shape I's
// (the kernels' *_instance_at below and in wgmma_ / stream_instances.cuh).
// Shapes this build leaves out (built() false) give an empty KernelInfo.
template <class T, const auto& kShapes, class Make, int... I>
KernelInfo shape_instance(int index, Make make, std::integer_sequence<int, I...>) {
  KernelInfo k;
  auto one = [&](auto i) {
    if constexpr (built(kShapes[decltype(i)::value])) {
      if (index == decltype(i)::value) k = make(i, T{});
    }
  };
  (one(std::integral_constant<int, I>{}), ...);
  return k;
}
template <const auto& kShapes, class Make>
KernelInfo shape_instance_at(bool bf16, int index, Make make) {
  using Seq = std::make_integer_sequence<int, count_of(kShapes)>;
  return bf16 ? shape_instance<BF16, kShapes>(index, make, Seq{}) : shape_instance<F16, kShapes>(index, make, Seq{});
}

// The instance of shape `index` (kTilesShapes) for fp16 or bf16 activations.
template <template <class> class DecOf>
KernelInfo tiles_instance_at(bool bf16, int index) {
  return shape_instance_at<kTilesShapes>(bf16, index, [](auto i, auto t) {
    using T = decltype(t);
    return tiles_instance<DecOf<T>, T, tiles_shape_for(kTilesShapes[decltype(i)::value], DecOf<T>::kBits)>();
  });
}

// A tile's 16 bytes per lane as the decoders' span of 16 bytes (codes in
// offset binary: no sign flip).
template <int kBits>
struct TileMagic {
  template <class T>
  using Of = MagicDecoder<kBits, 16, T, false>;
};
struct TileTable {
  template <class T>
  using Of = TableDecoder<16, T>;
};

}  // namespace lowbit::cuda::gemm
