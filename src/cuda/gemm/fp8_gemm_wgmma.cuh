// The sm_90a block-scaled FP8 GEMM (docs/fp8_gemm.md, "Backends"): a
// persistent, warp-specialized kernel on TMA and wgmma.
//
//   - One producer warp loads, for every 128-wide K block (the scale block),
//     a [BM, 128] tile of a and a [BN, 128] tile of b by TMA (3-D tensor
//     maps: slice, row, byte; zeros past every edge, so ragged M, N and K
//     need no masking) into one of kStages shared-memory stages, 128-byte
//     swizzled, completing on the stage's full barrier.
//   - WM x WN consumer warpgroups each own a 64 x WGN part of the tile. For a
//     K block each issues 4 wgmma m64nWGNk32 into fresh fp32 registers,
//     waits for them, frees the stage (its empty barrier), and adds them
//     times a_s[m, kb] * b_s[n / 128, kb] to the running fp32 sums: the
//     tensor cores' narrower FP8 accumulation never spans more than one K
//     block (the promotion of DeepGEMM).
//   - Tiles are taken in turn by the CTAs of a grid no larger than the GPU
//     (m fastest, so the CTAs at work share b's rows and a fits in L2);
//     producer and consumers walk the same sequence.
//   - Every row carries a code (fp8_gemm.cuh's row_code): a tile is computed
//     once per distinct expert among its rows (once when runs are padded to
//     BM), each pass storing only its expert's rows; zero and NaN rows are
//     written by the last pass (or alone when no row has an expert).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstring>

#include "cuda/common/convert.cuh"
#include "cuda/common/ptx/arch.cuh"
#include "cuda/common/ptx/sync.cuh"
#include "cuda/common/ptx/tma.cuh"
#include "cuda/common/ptx/wgmma.cuh"
#include "cuda/common/ptx/wgmma_e4m3.cuh"
#include "cuda/gemm/fp8_gemm.cuh"
#include "lowbit/ops/fp8_gemm.h"

namespace lowbit::cuda::fp8g {

template <int WM, int WN, int WGN, int C>
struct WgmmaTile {
  static constexpr int kBM = 64 * WM;
  static constexpr int kBN = WGN * WN;
  static constexpr int kConsumerWarps = 4 * WM * WN;
  static constexpr int kThreads = 128 + 32 * kConsumerWarps;
  static constexpr int kABytes = kBM * kBK;
  static constexpr int kBBytes = kBN * kBK;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // Stages: as many as fit in 220 KB beside the barriers, at most 8.
  static constexpr int kStages = 225280 / kStageBytes < 8 ? 225280 / kStageBytes : 8;
  static constexpr size_t kSmem = 1024 + static_cast<size_t>(kStages) * kStageBytes + 2 * 8 * kStages;
  // Registers: with two or more consumer warpgroups the producer's go to them (setmaxnreg).
  static constexpr bool kRealloc = WM * WN >= 2;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kProducerRegs = WGN >= 160 ? 40 : 56;  // the widest tiles need every register
  static constexpr int kConsumerRegs =
      (kLaunchRegs + 128 * (kLaunchRegs - kProducerRegs) / (128 * WM * WN)) / 8 * 8 > 240
          ? 240
          : (kLaunchRegs + 128 * (kLaunchRegs - kProducerRegs) / (128 * WM * WN)) / 8 * 8;
  static_assert(kBN <= 256 && WGN % 16 == 0, "wgmma N: a multiple of 16 up to 256");
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "stage tiles stay 1024-byte aligned (the swizzle atom)");
  static_assert(kStages >= 2, "a pipeline of at least two stages");
  static_assert(C == 1 || C == 2, "clusters of one or two CTAs");
  static_assert(kBM / C % 8 == 0, "a's multicast halves stay whole swizzle atoms");
};

// The row-code scan: the smallest expert id above `after` among the tile's
// rows [m0, m0 + BM) of slice z, or INT_MAX (the calling warp, all lanes).
template <int BM>
__device__ __forceinline__ int next_expert(const Params& p, int64_t z, int64_t m0, int after) {
  int best = INT_MAX;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = lane; r < BM; r += 32) {
    const int code = row_code(p, z, m0 + r);
    if (code > after && code < best) best = code;
  }
  return __reduce_min_sync(0xffffffffu, best);
}

// The tile `t` of a cluster's sequence: slice z, first row m0, first column
// n0 of the cluster's rank-0 CTA (the CTA of rank r takes the r-th of C
// neighbouring N tiles; past N it loads zeros and stores nothing).
struct TileAt {
  int64_t z, m0, n0;
};
template <int BM, int BN, int C>
__device__ __forceinline__ TileAt tile_at_index(const Params& p, int64_t t) {
  const int64_t tiles_m = (p.rows + BM - 1) / BM, groups_n = (p.N + C * BN - 1) / (C * BN);
  const int64_t per_slice = tiles_m * groups_n;
  const int64_t z = t / per_slice, r = t % per_slice;
  return TileAt{z, (r % tiles_m) * BM, (r / tiles_m) * C * BN};
}

// Two adjacent columns of one row of out (c0 at an even column when `pair`).
template <class Out>
__device__ __forceinline__ void store2(Out* dst, float v0, float v1, bool second, bool pair) {
  const float in[2] = {v0, v1};
  Out y[2];
  from_floats(in, y);
  if (pair) {
    if constexpr (sizeof(Out) == 4) {
      *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
    } else {
      uint16_t h[2];
      memcpy(h, y, 4);
      *reinterpret_cast<uint32_t*>(dst) = h[0] | (uint32_t{h[1]} << 16);
    }
  } else {
    dst[0] = y[0];
    if (second) dst[1] = y[1];
  }
}

#if LOWBIT_SM90A
// One consumer warpgroup's 64 x WGN results out: rows whose code is `expert`
// get acc (+ bias); when `last`, kZero rows get zeros and kNaN rows NaN.
template <class Out, int WGN>
__device__ __forceinline__ void store_rows(const Params& p, const float (&acc)[WGN / 2], int64_t z, int64_t m_base,
                                           int64_t n_base, int expert, bool last, bool pair_ok) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  Out* out = static_cast<Out*>(p.out) + z * p.rows * p.N;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t m = m_base + 16 * warp + (lane >> 2) + 8 * h;
    const int code = row_code(p, z, m);
    const bool mine = code == expert;
    if (!(mine || (last && (code == kZero || code == kNaN)))) continue;
    const float fill = code == kZero ? 0.0f : __int_as_float(0x7fc00000);
#pragma unroll
    for (int j = 0; j < WGN / 8; ++j) {
      const int64_t n = n_base + 8 * j + 2 * (lane & 3);
      if (n >= p.N) continue;
      float v0 = fill, v1 = fill;
      if (mine) {
        v0 = acc[4 * j + 2 * h];
        v1 = acc[4 * j + 2 * h + 1];
        if (p.bias != nullptr) {
          v0 += __ldg(p.bias + n);
          if (n + 1 < p.N) v1 += __ldg(p.bias + n + 1);
        }
      }
      store2(out + m * p.N + n, v0, v1, n + 1 < p.N, pair_ok && n + 1 < p.N);
    }
  }
}
#endif

// C == 2: clusters of two CTAs on neighbouring N tiles of the same rows;
// each loads half of a's tile for both (TMA multicast), so a stage of a CTA
// is refilled only when the consumers of both have released it (its empty
// barrier counts both CTAs' consumer warps). `tiles`: the clusters' tiles.
template <class Out, int WM, int WN, int WGN, int C>
__global__ void __launch_bounds__(WgmmaTile<WM, WN, WGN, C>::kThreads, 1)
    fp8_gemm_wgmma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const Params p, int64_t tiles, bool pair_ok) {
#if LOWBIT_SM90A
  using S = WgmmaTile<WM, WN, WGN, C>;
  constexpr int BM = S::kBM, BN = S::kBN, kStages = S::kStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * S::kStageBytes);
  uint64_t* empty = full + kStages;
  const int wg = threadIdx.x / 128;
  const uint32_t rank = C == 1 ? 0 : ptx::cluster_ctarank();
  const int64_t first = blockIdx.x / C, step = gridDim.x / C;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(full + s, 1);
      ptx::mbarrier_init(empty + s, C * S::kConsumerWarps);
    }
    ptx::fence_mbarrier_init();
  }
  // The peer's first multicast or arrival may come only after these inits.
  if constexpr (C == 1) {
    __syncthreads();
  } else {
    ptx::cluster_sync();
  }
  ptx::griddepcontrol_wait();

  if (wg == 0) {  // producer
    if constexpr (S::kRealloc) ptx::setmaxnreg_dec<S::kProducerRegs>();
    if (threadIdx.x < 32) {
      const bool leader = threadIdx.x == 0;
      int stage = 0;
      uint32_t phase = 0;
      for (int64_t t = first; t < tiles; t += step) {
        const TileAt tile = tile_at_index<BM, BN, C>(p, t);
        const int n0 = static_cast<int>(tile.n0 + rank * BN);
        for (int e = next_expert<BM>(p, tile.z, tile.m0, -1); e != INT_MAX;
             e = next_expert<BM>(p, tile.z, tile.m0, e)) {
          for (int kb = 0; kb < p.kb; ++kb) {
            if (leader) {
              ptx::mbarrier_try_wait_parity(empty + stage, phase ^ 1);
              uint8_t* sa = smem + stage * S::kStageBytes;
              ptx::mbarrier_arrive_expect_tx(full + stage, S::kStageBytes);
              constexpr int kPart = BM / C;  // rows of a this CTA loads for the cluster
              const int m = static_cast<int>(tile.m0) + static_cast<int>(rank) * kPart;
              if constexpr (C == 1) {
                ptx::cp_async_bulk_tensor_3d(sa, &map_a, kb * kBK, m, static_cast<int>(tile.z), full + stage);
              } else {
                ptx::cp_async_bulk_tensor_3d_multicast(sa + rank * kPart * kBK, &map_a, kb * kBK, m,
                                                       static_cast<int>(tile.z), full + stage, (1u << C) - 1);
              }
              ptx::cp_async_bulk_tensor_3d(sa + S::kABytes, &map_b, kb * kBK, n0, e, full + stage);
            }
            if (++stage == kStages) stage = 0, phase ^= 1;
          }
        }
      }
    }
    // No CTA leaves while its peer may still multicast into it or arrive on its barriers.
    if constexpr (C == 2) ptx::cluster_sync();
    return;
  }

  // consumers
  if constexpr (S::kRealloc) ptx::setmaxnreg_inc<S::kConsumerRegs>();
  const int cw = wg - 1;  // consumer warpgroup
  const int wm = cw % WM, wn = cw / WM;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  int stage = 0;
  uint32_t phase = 0;
  // Two consumer warpgroups issue their K blocks' wgmma in turns (named
  // barriers: the first's block kb, the second's kb, the first's kb + 1...),
  // so the tensor cores finish the first's before the second's and each
  // warpgroup promotes while the other's MMA runs (issued together, their
  // wgmma interleave and both promote at once, the tensor cores idle).
  constexpr bool kPingPong = WM * WN == 2;
  constexpr int kAfterFirst = 1, kAfterSecond = 2;
  // The second's first turn waits for nothing: the first warpgroup's barrier is primed.
  if constexpr (kPingPong) {
    if (cw == 1) ptx::bar_arrive(kAfterSecond, 256);
  }
  float acc[WGN / 2];
  float part[WGN / 2];
  for (int64_t t = first; t < tiles; t += step) {
    const TileAt tile = tile_at_index<BM, BN, C>(p, t);
    const int64_t m_base = tile.m0 + 64 * wm, n_base = tile.n0 + rank * BN + WGN * wn;
    // This thread's two rows, their a_s rows (nullptr past a's rows: scale 0).
    const float* as_row[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = m_base + 16 * warp + (lane >> 2) + 8 * h;
      as_row[h] = m < p.rows ? p.a_s + (tile.z * p.rows + m) * p.kb : nullptr;
    }
    // Columns of this warpgroup before `split` take b_s row n_base / 128, the
    // rest the next (rows clamped to b_s: columns past N are not stored).
    const int64_t nblocks = (p.N + ::lowbit::kFp8ScaleBlock - 1) / ::lowbit::kFp8ScaleBlock;
    const int64_t nb0 = min(n_base / ::lowbit::kFp8ScaleBlock, nblocks - 1);
    const int split = static_cast<int>((n_base / ::lowbit::kFp8ScaleBlock + 1) * ::lowbit::kFp8ScaleBlock - n_base);
    int e = next_expert<BM>(p, tile.z, tile.m0, -1);
    if (e == INT_MAX) store_rows<Out, WGN>(p, acc, tile.z, m_base, n_base, INT_MIN, true, pair_ok);
    while (e != INT_MAX) {
      const float* bs = p.b_s + static_cast<int64_t>(e) * nblocks * p.kb;
      const float* bs0 = bs + nb0 * p.kb;
      const float* bs1 = nb0 + 1 < nblocks ? bs0 + p.kb : bs0;
      // The scales of K block kb, loaded two blocks ahead: an L2 round trip
      // outlasts a block's MMA, so a load issued for the block at hand stalls it.
      auto scales = [&](int kb, float (&s)[4]) {
        if (kb < p.kb) {
          s[0] = as_row[0] ? __ldg(as_row[0] + kb) : 0.0f;
          s[1] = as_row[1] ? __ldg(as_row[1] + kb) : 0.0f;
          s[2] = __ldg(bs0 + kb);
          s[3] = __ldg(bs1 + kb);
        }
      };
      float next1[4], next2[4];
      scales(0, next1);
      scales(1, next2);
      for (int kb = 0; kb < p.kb; ++kb) {
        const float sa0 = next1[0], sa1 = next1[1], sb0 = next1[2], sb1 = next1[3];
#pragma unroll
        for (int i = 0; i < 4; ++i) next1[i] = next2[i];
        scales(kb + 2, next2);
        ptx::mbarrier_try_wait_parity(full + stage, phase);
        uint8_t* sa = smem + stage * S::kStageBytes;
        const uint64_t da = ptx::wgmma_desc_k128(sa + wm * 64 * kBK);
        const uint64_t db = ptx::wgmma_desc_k128(sa + S::kABytes + wn * WGN * kBK);
        if constexpr (kPingPong) ptx::bar_sync(cw == 0 ? kAfterSecond : kAfterFirst, 256);
        ptx::wgmma_fence();
#pragma unroll
        for (int k = 0; k < kBK / 32; ++k) ptx::wgmma_ss_e4m3<WGN>(part, da + 2 * k, db + 2 * k, k);
        ptx::wgmma_commit_group();
        if constexpr (kPingPong) ptx::bar_arrive(cw == 0 ? kAfterFirst : kAfterSecond, 256);
        ptx::wgmma_wait_group<0>();
        if (lane == 0) {
          if constexpr (C == 1) {
            ptx::mbarrier_arrive(empty + stage);
          } else {
#pragma unroll
            for (uint32_t r = 0; r < C; ++r) ptx::mbarrier_arrive_cluster(empty + stage, r);
          }
        }
        if (++stage == kStages) stage = 0, phase ^= 1;
        const float s00 = sa0 * sb0, s01 = sa0 * sb1, s10 = sa1 * sb0, s11 = sa1 * sb1;
#pragma unroll
        for (int j = 0; j < WGN / 8; ++j) {
          const bool lo = 8 * j < split;  // 8-column groups never straddle a 128 boundary
          const float r0 = lo ? s00 : s01, r1 = lo ? s10 : s11;
          if (kb == 0) {
            acc[4 * j] = part[4 * j] * r0;
            acc[4 * j + 1] = part[4 * j + 1] * r0;
            acc[4 * j + 2] = part[4 * j + 2] * r1;
            acc[4 * j + 3] = part[4 * j + 3] * r1;
          } else {
            acc[4 * j] = fmaf(part[4 * j], r0, acc[4 * j]);
            acc[4 * j + 1] = fmaf(part[4 * j + 1], r0, acc[4 * j + 1]);
            acc[4 * j + 2] = fmaf(part[4 * j + 2], r1, acc[4 * j + 2]);
            acc[4 * j + 3] = fmaf(part[4 * j + 3], r1, acc[4 * j + 3]);
          }
        }
      }
      const int next = next_expert<BM>(p, tile.z, tile.m0, e);
      store_rows<Out, WGN>(p, acc, tile.z, m_base, n_base, e, next == INT_MAX, pair_ok);
      e = next;
    }
  }
  // The second warpgroup's last arrival is matched here (barriers end balanced).
  if constexpr (kPingPong) {
    if (cw == 0) ptx::bar_sync(kAfterSecond, 256);
  }
  ptx::griddepcontrol_launch_dependents();
  if constexpr (C == 2) ptx::cluster_sync();
#endif
}

}  // namespace lowbit::cuda::fp8g
