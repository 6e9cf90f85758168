// The instances of the rows-layout matmul kernel (kernel.cuh), one
// translation unit per decoder family so they compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/gemm/params.h"
#include "cuda/gemm/shapes.h"
#include "lowbit/ops/gemm.h"

namespace lowbit::cuda::gemm {

struct KernelInfo {
  const void* kernel = nullptr;  // a __global__ taking (Params), or (CUtensorMap, Params) when tma; null: none
  bool tma = false;              // takes A's tensor map first (the wgmma kernel)
  bool stream = false;           // the streaming kernels: smem grows with the split (A's rows)
  int blocks = 0;                // streaming kernels: blocks an SM they are sized for
  size_t smem = 0;               // dynamic shared memory bytes (streaming kernels: without A)
  int chunk = 0;                 // columns of K per chunk: 4 spans of E
  int step = 0;                  // columns of K per main-loop pass
  bool direct_a = false;         // reads A from global memory (see Params::A)
  // Tile kernels fix these (rows kernels take them from their config).
  int threads = 0;  // per block
  int m_tile = 0;   // rows of M per block
  int n_tile = 0;   // rows of N per block
};

// Integer decoder of 1, 2, 4 or 8 bits (kernels_magic_b*.cu); lb (bytes per
// span load) 16 or 8; mt 1, 2, 4.
KernelInfo magic_kernel_b1(int lb, bool bf16, int mt);
KernelInfo magic_kernel_b2(int lb, bool bf16, int mt);
KernelInfo magic_kernel_b4(int lb, bool bf16, int mt);
KernelInfo magic_kernel_b8(int lb, bool bf16, int mt);
inline KernelInfo magic_kernel(int bits, int lb, bool bf16, int mt) {
  switch (bits) {
    case 1: return magic_kernel_b1(lb, bf16, mt);
    case 2: return magic_kernel_b2(lb, bf16, mt);
    case 4: return magic_kernel_b4(lb, bf16, mt);
    case 8: return magic_kernel_b8(lb, bf16, mt);
    default: return {};
  }
}
// 4-bit tables; lb 16 or 8.
KernelInfo table_kernel(int lb, bool bf16, int mt);
// The tiles layout's kernels, one instance function per decoder (one
// translation unit each): integer codes of 1, 2, 4, 8 bits, and the 4-bit
// tables; shape: an index into the kernel's shape list.
// - tiles_mma_kernel_* (tiles_mma.cuh, kernels_tiles_*.cu): kTilesShapes;
// - tiles_wgmma_kernel_* (tiles_wgmma.cuh, sm_90a, kernels_wgmma_*.cu): 4- and
//   8-bit codes and the tables only, kWgmmaShapes;
// - tiles_stream_kernel_* (tiles_stream.cuh, kernels_stream_*.cu): kStreamShapes.
// (shapes.h lists them; an instance this build leaves out is empty.)
KernelInfo tiles_mma_kernel_b1(bool bf16, int shape);
KernelInfo tiles_mma_kernel_b2(bool bf16, int shape);
KernelInfo tiles_mma_kernel_b4(bool bf16, int shape);
KernelInfo tiles_mma_kernel_b8(bool bf16, int shape);
KernelInfo tiles_mma_kernel_table(bool bf16, int shape);
KernelInfo tiles_wgmma_kernel_b4(bool bf16, int shape);
KernelInfo tiles_wgmma_kernel_b8(bool bf16, int shape);
KernelInfo tiles_wgmma_kernel_table(bool bf16, int shape);
KernelInfo tiles_stream_kernel_b1(bool bf16, int shape);
KernelInfo tiles_stream_kernel_b2(bool bf16, int shape);
KernelInfo tiles_stream_kernel_b4(bool bf16, int shape);
KernelInfo tiles_stream_kernel_b8(bool bf16, int shape);
KernelInfo tiles_stream_kernel_table(bool bf16, int shape);

// One tiles-layout kernel's instance functions by decoder (null: the kernel
// does not take those codes).
struct TilesFamily {
  using Fn = KernelInfo (*)(bool bf16, int shape);
  Fn b1, b2, b4, b8, table;
};
inline constexpr TilesFamily kTilesMma{tiles_mma_kernel_b1, tiles_mma_kernel_b2, tiles_mma_kernel_b4,
                                       tiles_mma_kernel_b8, tiles_mma_kernel_table};
inline constexpr TilesFamily kTilesWgmma{nullptr, nullptr, tiles_wgmma_kernel_b4, tiles_wgmma_kernel_b8,
                                         tiles_wgmma_kernel_table};
inline constexpr TilesFamily kTilesStream{tiles_stream_kernel_b1, tiles_stream_kernel_b2, tiles_stream_kernel_b4,
                                          tiles_stream_kernel_b8, tiles_stream_kernel_table};

// The kernel's instance for a format's decoder (4-bit tables, or integer
// codes of `bits`); empty when it has none.
inline KernelInfo tiles_kernel_for(const TilesFamily& f, int bits, bool table, bool bf16, int shape) {
  const TilesFamily::Fn fn = table       ? f.table
                             : bits == 1 ? f.b1
                             : bits == 2 ? f.b2
                             : bits == 4 ? f.b4
                             : bits == 8 ? f.b8
                                         : nullptr;
  return fn != nullptr ? fn(bf16, shape) : KernelInfo{};
}

// Any weight type.
KernelInfo generic_kernel(WeightType type, bool bf16, int mt);

// a[m, k] = A[m, perm[k]] (or A[m, k]) for k < K, 0 up to lda: A made fit
// for the direct-A kernels, in the workspace.
void gather_a_launch(const Params& p, uint16_t* a, int64_t lda, int blocks, cudaStream_t stream);

// out = Σ_split partial (+ bias) over `blocks` blocks of 256 threads
// (side_kernels.cu); early (sm_90): a programmatic dependent launch.
void reduce_splits_launch(const Params& p, int blocks, cudaStream_t stream, bool early);

// Makes the instance usable with its shared memory (once per device).
void prepare(const KernelInfo& k, const char* op);

}  // namespace lowbit::cuda::gemm
