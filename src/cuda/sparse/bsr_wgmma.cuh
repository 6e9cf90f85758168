// The sm_90a kernel of bsr_dense_addmm (docs/sparse.md): a CTA computes one
// block row (BM = 64 or 128 rows, a consumer warpgroup per 64) times a
// 128-column panel of dense, over the row's stored blocks in K steps of 64.
// One producer warp loads each step by TMA: the block's [BM, 64] values
// (K-major) and dense's [64, 128] rows for it as two [64, 64] boxes (N-major),
// both with the 128-byte swizzle; the consumers run wgmma m64n128k16 on the
// stage with B transposed (imm-trans-b), fp32 sums, and release the stage
// once the next one's MMAs are issued. Blocks' BK a multiple of 64.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx/arch.cuh"
#include "cuda/common/ptx/sync.cuh"
#include "cuda/common/ptx/tma.cuh"
#include "cuda/common/ptx/wgmma.cuh"
#include "cuda/common/ptx/wgmma_f16.cuh"
#include "cuda/sparse/bsr_tiles.cuh"

namespace lowbit::cuda::sparse {

template <int BM, int Stages>
struct BsrWgmmaShape {
  static constexpr int kTN = 128;
  static constexpr int kKStep = 64;
  static constexpr int kConsumers = BM / 64;  // warpgroups
  static constexpr int kThreads = 128 * kConsumers + 32;
  static constexpr int kStages = Stages;
  static constexpr int kABytes = BM * kKStep * 2;
  static constexpr int kChunkBytes = kKStep * 64 * 2;  // one [64 k, 64 n] box of dense
  static constexpr int kStageBytes = kABytes + 2 * kChunkBytes;
  static constexpr size_t kSmem = 1024 + static_cast<size_t>(kStages) * kStageBytes + 2 * 8 * kStages;
  // CTAs an SM holds (one's prologue and epilogue run under the others' MMAs): as many as shared memory takes,
  // at most 4 and at most 2 of two consumer warpgroups (whose 64 sums a thread then still fit the registers).
  static constexpr int kFit = static_cast<int>(227 * 1024 / (kSmem + 1024));
  static constexpr int kMinBlocks = kFit < 1 ? 1 : kFit > (BM == 128 ? 2 : 4) ? (BM == 128 ? 2 : 4) : kFit;
  static_assert(kABytes % 1024 == 0 && kChunkBytes % 1024 == 0, "stages stay 1024-byte aligned (the swizzle atom)");
};

// Tag: gemm::F16 or gemm::BF16; St its storage type. map_a: the values as [bsr batches, nnz * BM, BK] in boxes of
// [BM, 64]; map_b: dense as [dense batches, K, N] in boxes of [64, 64].
template <class Tag, class St, int BM, int Stages>
__global__ void __launch_bounds__(BsrWgmmaShape<BM, Stages>::kThreads, BsrWgmmaShape<BM, Stages>::kMinBlocks)
    bsr_wgmma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, BsrParams p,
              int64_t n_tiles) {
#if LOWBIT_SM90A
  using S = BsrWgmmaShape<BM, Stages>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S::kStages * S::kStageBytes);
  uint64_t* empty = full + S::kStages;
  const int64_t tile = blockIdx.x;
  const int64_t nt = tile % n_tiles, rest = tile / n_tiles;
  const int64_t row = rest % p.rows, ob = rest / p.rows;
  const int n0 = static_cast<int>(nt * S::kTN);
  const BatchOffsets off = batch_offsets(p, ob);
  __shared__ int bad_column;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      ptx::mbarrier_init(full + s, 1);                // the producer's arrival and its bytes
      ptx::mbarrier_init(empty + s, S::kConsumers);  // one arrival a consumer warpgroup
    }
    ptx::fence_mbarrier_init();
    bad_column = 0;
  }
  // The row's range decides the steps; its columns are checked by the consumers while the loads run (TMA
  // reads zeros at coordinates outside the tensors, so a bad column costs no fault, only the row's NaN).
  const int64_t crow0 = off.bsr * (p.rows + 1) + row;
  const int64_t start = index_at(p, p.crow, crow0), end = index_at(p, p.crow, crow0 + 1);
  const bool range_ok = start >= 0 && start <= end && end <= p.nnz;
  const int64_t steps = range_ok ? (end - start) * (p.BK / S::kKStep) : 0;
  const int wg = threadIdx.x / 128;
  __syncthreads();

  if (wg == S::kConsumers) {  // the producer warp
    if (threadIdx.x % 32 == 0 && steps > 0) {
      const int64_t col_base = off.bsr * p.nnz;
      int64_t blk = start;
      int64_t col = index_at(p, p.col, col_base + blk);
      int kc = 0;
      for (int64_t s = 0; s < steps; ++s) {
        const int stage = static_cast<int>(s % S::kStages);
        if (s >= S::kStages) ptx::mbarrier_try_wait_parity(empty + stage, static_cast<uint32_t>(s / S::kStages - 1) & 1u);
        uint8_t* st = smem + stage * S::kStageBytes;
        ptx::mbarrier_arrive_expect_tx(full + stage, S::kStageBytes);
        ptx::cp_async_bulk_tensor_3d(st, &map_a, kc, static_cast<int>(blk * BM), static_cast<int>(off.bsr), full + stage);
        const int k_row = static_cast<int>(col * p.BK + kc);
        ptx::cp_async_bulk_tensor_3d(st + S::kABytes, &map_b, n0, k_row, static_cast<int>(off.dense), full + stage);
        ptx::cp_async_bulk_tensor_3d(st + S::kABytes + S::kChunkBytes, &map_b, n0 + 64, k_row,
                                     static_cast<int>(off.dense), full + stage);
        kc += S::kKStep;
        if (kc == p.BK) {
          kc = 0;
          if (++blk < end) col = index_at(p, p.col, col_base + blk);
        }
      }
    }
    return;
  }

  if (range_ok) {
    const int64_t base = off.bsr * p.nnz;
    for (int64_t j = start + threadIdx.x; j < end; j += 128 * S::kConsumers) {
      const int64_t c = index_at(p, p.col, base + j);
      if (c < 0 || c >= p.kcols || (j > start && index_at(p, p.col, base + j - 1) >= c)) atomicOr(&bad_column, 1);
    }
  }
  float acc[S::kTN / 2] = {};
  for (int64_t s = 0; s < steps; ++s) {
    const int stage = static_cast<int>(s % S::kStages);
    ptx::mbarrier_try_wait_parity(full + stage, static_cast<uint32_t>(s / S::kStages) & 1u);
    const uint8_t* st = smem + stage * S::kStageBytes;
    const uint32_t a_lo = ptx::wgmma_desc_k128_lo(st + wg * 64 * 128);
    const uint64_t b_desc = ptx::wgmma_desc_n128(st + S::kABytes, S::kChunkBytes);
    ptx::wgmma_fence();
#pragma unroll
    for (int k = 0; k < S::kKStep / 16; ++k) {
      const uint64_t a_desc = ptx::wgmma_desc_k128_of(a_lo + 2 * k);  // 32 bytes a k16 step
      const uint64_t bk_desc = b_desc + static_cast<uint64_t>(k * (2048 >> 4));  // 16 rows of 128 bytes
      if constexpr (std::is_same_v<Tag, gemm::BF16>) {
        ptx::wgmma_ss_bf16_bn<S::kTN>(acc, a_desc, bk_desc, 1);
      } else {
        ptx::wgmma_ss_f16_bn<S::kTN>(acc, a_desc, bk_desc, 1);
      }
    }
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<1>();  // the previous step's MMAs are done with their stage
    if (s > 0 && threadIdx.x % 128 == 0) ptx::mbarrier_arrive(empty + (s - 1) % S::kStages);
  }
  ptx::wgmma_wait_group<0>();
  ptx::bar_sync(1, 128 * S::kConsumers);  // every consumer's column checks are in bad_column
  const bool ok = range_ok && bad_column == 0;

  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t m = row * BM + wg * 64 + warp * 16 + g + 8 * h;
#pragma unroll
    for (int j = 0; j < S::kTN / 8; ++j) {
      store_pair<Tag, St>(p, off, ob, m, n0 + 8 * j + 2 * t, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], ok);
    }
  }
#endif
}

}  // namespace lowbit::cuda::sparse
