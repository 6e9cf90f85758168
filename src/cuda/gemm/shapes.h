// The CUDA matmul's kernel shapes: one list a kernel family, read by both the
// instance files (which compile them) and the selection in matmul.cu (which
// enumerates them as configs, kernel_configs). A shape marked `sweep_only` is
// one the heuristic never picks: it is compiled only with the CMake option
// LOWBIT_ALL_CONFIGS (the tuner and the config-sweep tests), so a default
// build carries only what runs.
#pragma once

#ifndef LOWBIT_ALL_CONFIGS
#define LOWBIT_ALL_CONFIGS 0
#endif

namespace lowbit::cuda::gemm {

inline constexpr bool kAllConfigs = LOWBIT_ALL_CONFIGS != 0;

// rows layout (rows_mma_kernel): n8 tiles of M a block (M tile 8·mt) and warps
// along N (16 rows each). The instances are per mt, the warps a launch choice.
struct RowsShape {
  int mt, warps;
};
inline constexpr RowsShape kRowsShapes[] = {{1, 4}, {1, 8}, {2, 4}, {4, 4}, {4, 8}};

// tiles layout, mma.sync (tiles_mma_kernel): n8 tiles of M a block, row tiles
// a warp, tile columns a stage, warps and pipeline stages a block. M tiles of
// 8..64 with 4 stages (two blocks an SM at 8 and 16), and of 8 and 16 with 3
// stages (three blocks an SM, two with the 4-bit tables' 32 KB lookup table).
struct TilesShape {
  int m_tiles, row_tiles, stage_tiles, warps, stages;
  bool sweep_only;
};
inline constexpr TilesShape kTilesShapes[] = {{1, 2, 2, 8, 4, true},  {2, 2, 2, 8, 4, true},  {4, 1, 2, 8, 4, true},
                                              {8, 1, 1, 8, 4, false}, {1, 2, 2, 8, 3, false}, {2, 2, 2, 8, 3, true}};

// tiles layout, wgmma (tiles_wgmma_kernel, sm_90a): rows of M a block, columns
// of K a stage, consumer warpgroups (64 rows of N each).
struct WgmmaShapeConfig {
  int block_m, stage_k, consumers;
  bool sweep_only;
};
inline constexpr WgmmaShapeConfig kWgmmaShapes[] = {{128, 64, 2, true},   {256, 64, 2, true},   {64, 64, 2, true},
                                                    {256, 128, 2, false}, {128, 128, 2, false}, {64, 64, 4, false}};

// tiles layout, streaming (tiles_stream_kernel): n8 tiles of M a block, row
// tiles a warp, warps a block, tiles prefetched a row tile, and the blocks an
// SM its registers (launch bounds) and shared memory (the host's split) are
// sized for. M tiles of 8 and 16 with 8 warps, two blocks an SM; 16 with 16
// warps, one block an SM (twice the shared memory a block for the
// activations: fewer K splits when they, not the GPU's fill, set the count);
// 32 with 16 warps of one row tile; 64 with 12 warps of one row tile (165
// registers), one block an SM.
struct StreamShape {
  int m_tiles, row_tiles, warps, depth, blocks;
  bool sweep_only;
};
inline constexpr StreamShape kStreamShapes[] = {{1, 2, 8, 4, 2, false},
                                                {2, 2, 8, 4, 2, false},
                                                {2, 2, 16, 4, 1, false},
                                                {4, 1, 16, 4, 1, false},
                                                {8, 1, 12, 4, 1, false}};

template <class T, int N>
constexpr int count_of(const T (&)[N]) {
  return N;
}
inline constexpr int kNumRowsShapes = count_of(kRowsShapes);
inline constexpr int kNumTilesShapes = count_of(kTilesShapes);
inline constexpr int kNumWgmmaShapes = count_of(kWgmmaShapes);
inline constexpr int kNumStreamShapes = count_of(kStreamShapes);

// Whether this build compiles the shape.
template <class Shape>
constexpr bool built(const Shape& s) {
  return kAllConfigs || !s.sweep_only;
}

}  // namespace lowbit::cuda::gemm
