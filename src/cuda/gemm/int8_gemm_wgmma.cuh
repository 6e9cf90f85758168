// The sm_90a int8 GEMM (docs/int8.md, "Backends"): a persistent,
// warp-specialized kernel on TMA and wgmma, its two consumer warpgroups in
// ping-pong.
//
//   - One producer thread loads, for every 128-byte K block, a [BM, 128]
//     tile of a and a [BN, 128] tile of b by TMA (zeros past every edge, so
//     ragged M, N and K need no masking) into one of kStages shared-memory
//     stages, 128-byte swizzled, the tiles of the CTA's sequence one after
//     another.
//   - The CTA's tiles go to its two consumer warpgroups in turns, each
//     computing a whole BM x BN tile: 4 wgmma m64nBNk32 a wave of 64 rows
//     and K block into s32 accumulators kept across K (exact; no
//     promotion), one K block's group in flight while the next is issued.
//     The stages are consumed in load order, a warpgroup's tile after the
//     other's (named barriers pass the turn once a tile's MMAs are issued),
//     so the second warpgroup's MMA starts as the first's ends, and each
//     warpgroup's epilogue (the int32
//     sums or their dequantization, stored from registers) runs under the
//     other's MMA: the tensor cores do not wait for the output.
//   - Tiles are taken in turn by the CTAs of a grid no larger than the GPU
//     (m fastest, so the CTAs at work share b's rows and a stays in L2).
//   - a with fewer rows than a tile is loaded in a box of just its rows
//     (rounded up to 8): the TMA unit's time goes by rows, zeros included.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/common/ptx/arch.cuh"
#include "cuda/common/ptx/sync.cuh"
#include "cuda/common/ptx/tma.cuh"
#include "cuda/common/ptx/wgmma.cuh"
#include "cuda/common/ptx/wgmma_s8.cuh"
#include "cuda/gemm/int8_gemm.cuh"

namespace lowbit::cuda::i8g {

// A consumer warpgroup's tile: WV waves of 64 rows by WGN columns.
template <int WV, int WGN>
struct WgmmaTile {
  static constexpr int kBM = 64 * WV;
  static constexpr int kBN = WGN;
  static constexpr int kThreads = 128 * 3;  // the producer warpgroup and two consumers
  static constexpr int kABytes = kBM * kBK;
  static constexpr int kBBytes = kBN * kBK;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // As many stages as fit in sm_90's 227 KB beside the alignment slack and the barriers, at most 8.
  static constexpr int kStages = std::min((232448 - 1024 - 128) / kStageBytes, 8);
  static constexpr size_t kSmem = 1024 + static_cast<size_t>(kStages) * kStageBytes + 2 * 8 * kStages;
  // The producer warpgroup keeps 40 registers; the consumers take the rest (setmaxnreg).
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static_assert(WV == 1 || WV == 2, "one or two waves a warpgroup");
  static_assert(WGN % 32 == 0 && WGN <= 256, "the wgmma widths of wgmma_s8.cuh");
  static_assert(WV * WGN / 2 <= 128, "accumulators within the consumers' registers");
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "stage tiles stay 1024-byte aligned (the swizzle atom)");
  static_assert(kStages >= 2, "a pipeline of at least two stages");
};

template <class Out, int WV, int WGN>
__global__ void __launch_bounds__(WgmmaTile<WV, WGN>::kThreads, 1)
    int8_gemm_wgmma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const Params p, int64_t tiles, bool pair_ok) {
#if LOWBIT_SM90A
  using S = WgmmaTile<WV, WGN>;
  constexpr int BM = S::kBM, BN = S::kBN, kStages = S::kStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * S::kStageBytes);
  uint64_t* empty = full + kStages;
  const int wg = threadIdx.x / 128;
  const int64_t tiles_m = (p.rows + BM - 1) / BM;
  // a box shorter than the tile (a has fewer rows) leaves the stages' last
  // rows to these zeros: the MMA reads them for rows never stored.
  if (p.a_box_rows < BM) {
    constexpr int kChunks = S::kABytes / 16;
    for (int i = threadIdx.x; i < kStages * kChunks; i += S::kThreads) {
      const int off = i % kChunks * 16;
      if (off >= p.a_box_rows * kBK) *reinterpret_cast<uint4*>(smem + i / kChunks * S::kStageBytes + off) = uint4{};
    }
    ptx::fence_proxy_async_shared();  // the MMA reads shared memory through the async proxy
  }
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(full + s, 1);      // the producer's arrival (and its bytes)
      ptx::mbarrier_init(empty + s, 128);  // every thread of the consuming warpgroup
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  ptx::griddepcontrol_wait();

  if (wg == 0) {  // the producer
    ptx::setmaxnreg_dec<S::kProducerRegs>();
    if (threadIdx.x == 0) {
      int stage = 0;
      uint32_t phase = 0;
      const uint32_t stage_bytes = static_cast<uint32_t>(p.a_box_rows * kBK + S::kBBytes);
      for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int m0 = static_cast<int>(t % tiles_m * BM), n0 = static_cast<int>(t / tiles_m * BN);
        for (int kb = 0; kb < p.kb; ++kb) {
          ptx::mbarrier_try_wait_parity(empty + stage, phase ^ 1);
          uint8_t* sa = smem + stage * S::kStageBytes;
          ptx::mbarrier_arrive_expect_tx(full + stage, stage_bytes);
          ptx::cp_async_bulk_tensor_3d(sa, &map_a, kb * kBK, m0, 0, full + stage);
          ptx::cp_async_bulk_tensor_3d(sa + S::kABytes, &map_b, kb * kBK, n0, 0, full + stage);
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
    }
    return;
  }

  ptx::setmaxnreg_inc<S::kConsumerRegs>();
  const int cw = wg - 1;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  // The low descriptor words of a's first wave and of b in stage 0 (warp-uniform).
  const uint32_t a_lo = __shfl_sync(0xffffffffu, ptx::wgmma_desc_k128_lo(smem), 0);
  const uint32_t b_lo = __shfl_sync(0xffffffffu, ptx::wgmma_desc_k128_lo(smem + S::kABytes), 0);
  constexpr uint32_t kStageLo = S::kStageBytes >> 4, kWaveLo = (64 * kBK) >> 4;
  int32_t acc[WV][WGN / 2];
  // The warpgroups' turns: a warpgroup starts waiting on its tile's stages
  // only once the other has issued the MMAs of the tile before (named
  // barrier kTurn[cw], 256 threads: the other's 128 arrive, these 128 wait).
  // A stage's full barrier is then never more than one phase behind the
  // fill waited for, so its parity names that fill and no earlier one.
  constexpr int kTurn[2] = {1, 2};
  const int64_t step = gridDim.x;
  // This warpgroup takes the CTA's tiles cw, cw + 2, ...; tile j of the CTA's
  // sequence starts at its j * kb-th stage fill.
  for (int64_t j = cw, t = blockIdx.x + cw * step; t < tiles; j += 2, t += 2 * step) {
    if (j > 0) ptx::bar_sync(kTurn[cw], 256);
    const int64_t fill = j * p.kb;
    int stage = static_cast<int>(fill % kStages);
    uint32_t phase = static_cast<uint32_t>(fill / kStages) & 1u;
    int prev = -1;
    for (int kb = 0; kb < p.kb; ++kb) {
      ptx::mbarrier_try_wait_parity(full + stage, phase);
      const uint32_t stage_lo = static_cast<uint32_t>(stage) * kStageLo;
      ptx::wgmma_fence();
#pragma unroll
      for (int v = 0; v < WV; ++v) {
#pragma unroll
        for (int k = 0; k < kBK / 32; ++k) {
          ptx::wgmma_ss_s8<WGN>(acc[v], ptx::wgmma_desc_k128_of(a_lo + stage_lo + v * kWaveLo + 2 * k),
                                ptx::wgmma_desc_k128_of(b_lo + stage_lo + 2 * k), kb | k);
        }
      }
      ptx::wgmma_commit_group();
      // The previous K block's MMAs have read their stage: it may be refilled.
      ptx::wgmma_wait_group<1>();
      if (prev >= 0) ptx::mbarrier_arrive(empty + prev);
      prev = stage;
      if (++stage == kStages) stage = 0, phase ^= 1;
    }
    // The next tile's turn (only if it exists: every arrival is waited for).
    if (t + step < tiles) ptx::bar_arrive(kTurn[cw ^ 1], 256);
    const int64_t m0 = t % tiles_m * BM, n0 = t / tiles_m * BN;
    const int64_t n_lane = n0 + 2 * (lane & 3);
    // Dequantized outputs of a tile inside a and b with pair-aligned rows and statistics:
    // the columns' col_stats read while the last MMAs run, whole row segments
    // converted at once, no bounds checks.
    if constexpr (!std::is_same_v<Out, int32_t>) {
      if (pair_ok && p.stat_pairs && m0 + BM <= p.rows && n0 + BN <= p.N) {
        float cs[WGN / 4];
#pragma unroll
        for (int q = 0; q < WGN / 8; ++q) {
          const float2 c2 = __ldg(reinterpret_cast<const float2*>(p.col_stats + n_lane + 8 * q));
          cs[2 * q] = c2.x;
          cs[2 * q + 1] = c2.y;
        }
        ptx::wgmma_wait_group<0>();
        if (prev >= 0) ptx::mbarrier_arrive(empty + prev);
#pragma unroll
        for (int v = 0; v < WV; ++v) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t m = m0 + 64 * v + 16 * warp + (lane >> 2) + 8 * h;
            int32_t c[WGN / 4];
#pragma unroll
            for (int q = 0; q < WGN / 8; ++q) {
              c[2 * q] = acc[v][4 * q + 2 * h];
              c[2 * q + 1] = acc[v][4 * q + 2 * h + 1];
            }
            dequant_row_pairs<Out, WGN / 8>(p, m, n_lane, __ldg(p.row_stats + m), c, cs);
          }
        }
        continue;
      }
    }
    ptx::wgmma_wait_group<0>();
    if (prev >= 0) ptx::mbarrier_arrive(empty + prev);
#pragma unroll
    for (int v = 0; v < WV; ++v) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t m = m0 + 64 * v + 16 * warp + (lane >> 2) + 8 * h;
        if (m >= p.rows) continue;
        const float rs = row_stat<Out>(p, m);
#pragma unroll
        for (int q = 0; q < WGN / 8; ++q) {
          store_pair<Out>(p, m, n_lane + 8 * q, rs, acc[v][4 * q + 2 * h], acc[v][4 * q + 2 * h + 1], pair_ok);
        }
      }
    }
  }
  ptx::griddepcontrol_launch_dependents();
#endif
}

}  // namespace lowbit::cuda::i8g
