// The sm_90a block-scaled FP8 GEMM (docs/fp8_gemm.md, "Backends"): a
// persistent, warp-specialized kernel on TMA and wgmma.
//
//   - One producer warp loads, for every 128-wide K block (the scale block),
//     a [BM, 128] tile of a and a [BN, 128] tile of b by TMA (3-D tensor
//     maps: slice, row, byte; zeros past every edge, so ragged M, N and K
//     need no masking) into one of kStages shared-memory stages, 128-byte
//     swizzled, and for 256-row tiles where a_s allows (its rows 16-byte
//     multiples), with every fourth block, the [BM, 4] box of a_s holding
//     the scales of that block and the next three (a box row takes 16 bytes
//     at least; one bulk copy instead of BM scattered floats, and a fourth
//     of the TMA unit's row requests of one box a block) into a ring of
//     scale slots; a second producer warp copies b_s of the two 128-column
//     blocks the tile can touch beside the stage (and a_s into the slots
//     where TMA cannot) by cp.async; both complete the stage's full barrier.
//     The consumers read their scales from shared memory: no global latency
//     in their loop.
//   - WM x WN consumer warpgroups each own WV parts (waves) of 64 x WGN of
//     the tile. For a K block and a wave each issues 4 wgmma m64nWGNk32 into
//     fresh fp32 registers, waits for them, and adds them times
//     a_s[m, kb] * b_s[n / 128, kb] to the wave's running fp32 sums: the
//     tensor cores' narrower FP8 accumulation never spans more than one K
//     block (the promotion of DeepGEMM). After the last wave the stage is
//     freed (its empty barrier). Two waves make a 256-row tile from two
//     warpgroups: L2's bandwidth, not the tensor cores, bounds the smaller
//     tiles, and a taller tile loads fewer bytes per product.
//   - 16-bit results leave by TMA: each consumer warpgroup writes its rows
//     (converted, bias added) into a staging buffer, one thread stores its
//     boxes, and the warpgroup starts its next tile while the stores drain,
//     so the tile's output overlaps the next tile's MMA instead of idling
//     the tensor cores (its own loads run ahead meanwhile). fp32 results,
//     and rows not 16-byte aligned, are stored by each thread directly.
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

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/common/convert.cuh"
#include "cuda/common/ptx/arch.cuh"
#include "cuda/common/ptx/arith.cuh"
#include "cuda/common/ptx/mma.cuh"
#include "cuda/common/ptx/sync.cuh"
#include "cuda/common/ptx/tma.cuh"
#include "cuda/common/ptx/wgmma.cuh"
#include "cuda/common/ptx/wgmma_e4m3.cuh"
#include "cuda/gemm/fp8_gemm.cuh"
#include "lowbit/ops/fp8_gemm.h"

namespace lowbit::cuda::fp8g {

template <int WM, int WN, int WGN, int C, int WV = 1>
struct WgmmaTile {
  static constexpr int kBM = 64 * WM * WV;
  static constexpr int kBN = WGN * WN;
  static constexpr int kConsumerWarps = 4 * WM * WN;
  static constexpr int kThreads = 128 + 32 * kConsumerWarps;
  static constexpr int kABytes = kBM * kBK;
  static constexpr int kBBytes = kBN * kBK;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // A stage's scale area: a scale slot (a_s of the BM rows for 4 K blocks,
  // [BM][4]: the TMA box of a_s, 16 bytes a row, the least a box row takes),
  // then b_s of the stage's two column blocks (128-byte padded). Slots are
  // taken in turn by each run of 4 K blocks (see scale_slot), stages by
  // each K block: the slot a run uses is not its stage's.
  static constexpr int kScaleFloats = 4 * kBM + 32;
  static constexpr int kScaleBytes = 4 * kScaleFloats;
  static constexpr int kScaleBoxBytes = 16 * kBM;
  // The staged epilogue's buffer: the tile in 16-bit elements, as boxes of
  // 64 rows x 128 bytes (so each warpgroup's columns must be whole 128-byte
  // rows); reserved for every output type, so a shape has one stage count.
  static constexpr bool kStagedOut = WGN * 2 % 128 == 0;
  static constexpr int kOutBytes = kStagedOut ? kBM * kBN * 2 : 0;
  // Stages: as many as fit in sm_90's 227 KB beside the alignment slack, the
  // output buffer and the barriers, at most 8.
  static constexpr int kStages = std::min((232448 - 1024 - 128 - kOutBytes) / (kStageBytes + kScaleBytes), 8);
  static constexpr size_t kSmem =
      1024 + static_cast<size_t>(kStages) * (kStageBytes + kScaleBytes) + kOutBytes + 2 * 8 * kStages;
  // Registers: with two or more consumer warpgroups the producer warpgroup
  // (its TMA and scale warps) keeps 56 and the consumers take the rest (setmaxnreg), 240 at most.
  static constexpr bool kRealloc = WM * WN >= 2;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kProducerRegs = 56;
  static constexpr int kConsumerRegs =
      std::min((kLaunchRegs + 128 * (kLaunchRegs - kProducerRegs) / (128 * WM * WN)) / 8 * 8, 240);
  static_assert(kBN <= 256 && WGN % 16 == 0, "wgmma N: a multiple of 16 up to 256");
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "stage tiles stay 1024-byte aligned (the swizzle atom)");
  static_assert(kStages >= 2, "a pipeline of at least two stages");
  static_assert(C == 1 || C == 2, "clusters of one or two CTAs");
  static_assert(WV == 1 || WV == 2, "one or two waves a warpgroup");
  static_assert(kBM / C % 8 == 0, "a's multicast halves stay whole swizzle atoms");
};

// The a_s slot of K block kb, given the previous block's slot: a new run of
// 4 blocks (kb % 4 == 0) takes the next of the kStages slots. A slot's last
// run ended at least kStages blocks before its reuse (every run holds a
// block), so whoever refills it has seen that block's stage released.
template <int kStages>
__device__ __forceinline__ int scale_slot(int slot, int kb) {
  return kb % 4 != 0 ? slot : slot + 1 == kStages ? 0 : slot + 1;
}

// The row-code scan: the smallest expert id above `after` among the tile's
// rows [m0, m0 + BM) of slice z, or INT_MAX (the calling warp, all lanes).
template <int BM>
__device__ __forceinline__ int next_expert(const Params& p, int64_t z, int64_t m0, int after) {
  if (is_plain(p)) return after < 0 ? 0 : INT_MAX;  // one pass, expert 0
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
// Two results rounded to the 16-bit Out in one register, the first in the
// low half, by the hardware (a NaN result comes out as the canonical NaN).
template <class Out>
__device__ __forceinline__ uint32_t pack16(float lo, float hi) {
  if constexpr (std::is_same_v<Out, core::BFloat16>) {
    return ptx::cvt_rn_bf16x2_f32(lo, hi);
  } else {
    return ptx::cvt_rn_f16x2_f32(lo, hi);
  }
}

// One consumer warpgroup's 64 x WGN results of a tile's only pass into the
// staging buffer (the layout of stage_rows below), four 8x8 matrices a
// stmatrix: rows of `expert` get acc + bias, the others zeros (kZero; kSkip,
// past a's rows, which the store clips) or NaN (kNaN). acc is consumed.
template <class Out, int WGN, int BM>
__device__ __forceinline__ void stage_tile(const Params& p, float (&acc)[WGN / 2], uint8_t* box0, int64_t z,
                                           int64_t m_base, int n_base, int expert) {
  static_assert(sizeof(Out) == 2 && WGN % 16 == 0, "the staged epilogue holds 16-bit outputs, 16 columns a stmatrix");
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  // acc[4j + 2h + c]: row 16 warp + lane / 4 + 8h, column 8j + 2 (lane % 4) + c.
  if (p.bias != nullptr) {
#pragma unroll
    for (int j = 0; j < WGN / 8; ++j) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int n = n_base + 8 * j + 2 * (lane & 3) + c;
        const float b = n < p.N ? __ldg(p.bias + n) : 0.0f;
        acc[4 * j + c] += b;
        acc[4 * j + 2 + c] += b;
      }
    }
  }
  if (!is_plain(p)) {
    bool mine[2];
    float fill[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int code = row_code(p, z, m_base + 16 * warp + (lane >> 2) + 8 * h);
      mine[h] = code == expert;
      fill[h] = code == kNaN ? __int_as_float(0x7fc00000) : 0.0f;
    }
    if (!__all_sync(0xffffffffu, mine[0] && mine[1])) {  // padding or another expert's rows in the tile
#pragma unroll
      for (int i = 0; i < WGN / 2; ++i) acc[i] = mine[(i >> 1) & 1] ? acc[i] : fill[(i >> 1) & 1];
    }
  }
  // Lane l gives row l % 8 of matrix l / 8: rows 8 (l / 8 % 2) + l % 8 of the
  // warp's 16, column group j + l / 16; its 16-byte unit swizzled by the row.
  const int q = lane >> 3;
  const uint32_t row_addr = ptx::smem_addr(box0) + (16 * warp + 8 * (q & 1) + (lane & 7)) * 128;
  const int ux = (q >> 1) ^ (lane & 7);
#pragma unroll
  for (int j = 0; j < WGN / 8; j += 2) {
    const uint32_t addr = row_addr + (j / 8) * BM * 128 + (((j % 8) ^ ux) << 4);
    ptx::stmatrix_x4(addr, pack16<Out>(acc[4 * j], acc[4 * j + 1]), pack16<Out>(acc[4 * j + 2], acc[4 * j + 3]),
                     pack16<Out>(acc[4 * j + 4], acc[4 * j + 5]), pack16<Out>(acc[4 * j + 6], acc[4 * j + 7]));
  }
}

// One consumer warpgroup's 64 x WGN results of one of several passes into
// the staging buffer, as store_rows would write them to out (only the rows
// of `expert`, and when `last` the zero and NaN rows): box0 is the wave's box in the
// warpgroup's first 128-byte column chunk (the next chunks BM rows of
// 128 bytes further each), its rows 128-byte swizzled as the TMA store reads
// them (16-byte unit u of row r at u ^ (r % 8): conflict-free 4-byte writes).
template <class Out, int WGN, int BM>
__device__ __forceinline__ void stage_rows(const Params& p, const float (&acc)[WGN / 2], uint8_t* box0, int64_t z,
                                           int64_t m_base, int n_base, int expert, bool last) {
  static_assert(sizeof(Out) == 2, "the staged epilogue holds 16-bit outputs");
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  const int n_lane = n_base + 2 * (lane & 3);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 16 * warp + (lane >> 2) + 8 * h;
    // The plain layout's rows past a's are clipped by the store: no codes.
    const int code = is_plain(p) ? expert : row_code(p, z, m_base + r);
    const bool mine = code == expert;
    if (!(mine || (last && (code == kZero || code == kNaN)))) continue;
    // The row's WGN / 4 values of this thread (pairs of adjacent columns), converted at once.
    float v[WGN / 4];
    if (mine) {
#pragma unroll
      for (int j = 0; j < WGN / 8; ++j) {
        v[2 * j] = acc[4 * j + 2 * h];
        v[2 * j + 1] = acc[4 * j + 2 * h + 1];
      }
      if (p.bias != nullptr) {
#pragma unroll
        for (int j = 0; j < WGN / 8; ++j) {
          const int n = n_lane + 8 * j;
          v[2 * j] += n < p.N ? __ldg(p.bias + n) : 0.0f;
          v[2 * j + 1] += n + 1 < p.N ? __ldg(p.bias + n + 1) : 0.0f;
        }
      }
    } else {
      const float fill = code == kZero ? 0.0f : __int_as_float(0x7fc00000);
#pragma unroll
      for (int i = 0; i < WGN / 4; ++i) v[i] = fill;
    }
    Out y[WGN / 4];
    from_floats(v, y);
    uint8_t* row = box0 + r * 128 + 4 * (lane & 3);
#pragma unroll
    for (int j = 0; j < WGN / 8; ++j) {
      uint32_t bits;
      memcpy(&bits, y + 2 * j, 4);
      ptx::st_shared_u32(row + (j / 8) * BM * 128 + (((j % 8) ^ (lane >> 2)) << 4), bits);
    }
  }
}

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
    const int code = is_plain(p) ? (m < p.rows ? expert : kSkip) : row_code(p, z, m);
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
// barrier counts both CTAs' consumer threads). `tiles`: the clusters' tiles.
// kStagedOut: 16-bit results leave through the staging buffer by TMA stores
// of map_out ([z][rows, N]): each warpgroup writes its rows there and goes
// on to its next tile while the stores drain (it waits for their reads of
// the buffer only before writing it again); otherwise each thread stores
// its results to out itself and map_out is unused.
template <class Out, int WM, int WN, int WGN, int C, int WV, bool kStagedOut>
__global__ void __launch_bounds__(WgmmaTile<WM, WN, WGN, C, WV>::kThreads, 1)
    fp8_gemm_wgmma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_out, const __grid_constant__ CUtensorMap map_as,
                   const Params p, int64_t tiles, bool pair_ok, bool scale_tma) {
#if LOWBIT_SM90A
  using S = WgmmaTile<WM, WN, WGN, C, WV>;
  static_assert(!kStagedOut || (S::kStagedOut && sizeof(Out) == 2), "the staging buffer holds whole 16-bit rows");
  constexpr int BM = S::kBM, BN = S::kBN, kStages = S::kStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint8_t* out_smem = smem + kStages * S::kStageBytes;  // 1024-byte aligned: stage tiles are
  float* scale_smem = reinterpret_cast<float*>(out_smem + S::kOutBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(scale_smem + kStages * S::kScaleFloats);
  uint64_t* empty = full + kStages;
  const int64_t nblocks = (p.N + ::lowbit::kFp8ScaleBlock - 1) / ::lowbit::kFp8ScaleBlock;
  const int wg = threadIdx.x / 128;
  const uint32_t rank = C == 1 ? 0 : ptx::cluster_ctarank();
  const int64_t first = blockIdx.x / C, step = gridDim.x / C;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(full + s, 1 + 32);                       // the TMA warp's arrival and the scale warp's lanes
      ptx::mbarrier_init(empty + s, C * 32 * S::kConsumerWarps);  // every consumer thread, of each CTA
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

  if (wg == 0) {  // producers: warp 0 the TMA loads, warp 1 the scales
    if constexpr (S::kRealloc) ptx::setmaxnreg_dec<S::kProducerRegs>();
    const int lane = threadIdx.x & 31;
    if (threadIdx.x < 32) {
      const bool leader = lane == 0;
      int stage = 0, slot = kStages - 1;
      uint32_t phase = 0;
      for (int64_t t = first; t < tiles; t += step) {
        const TileAt tile = tile_at_index<BM, BN, C>(p, t);
        const int n0 = static_cast<int>(tile.n0 + rank * BN);
        for (int e = next_expert<BM>(p, tile.z, tile.m0, -1); e != INT_MAX;
             e = next_expert<BM>(p, tile.z, tile.m0, e)) {
          for (int kb = 0; kb < p.kb; ++kb) {
            slot = scale_slot<kStages>(slot, kb);
            if (leader) {
              ptx::mbarrier_try_wait_parity(empty + stage, phase ^ 1);
              uint8_t* sa = smem + stage * S::kStageBytes;
              const bool box = scale_tma && kb % 4 == 0;
              ptx::mbarrier_arrive_expect_tx(full + stage, S::kStageBytes + (box ? S::kScaleBoxBytes : 0));
              constexpr int kPart = BM / C;  // rows of a this CTA loads for the cluster
              const int m = static_cast<int>(tile.m0) + static_cast<int>(rank) * kPart;
              if constexpr (C == 1) {
                ptx::cp_async_bulk_tensor_3d(sa, &map_a, kb * kBK, m, static_cast<int>(tile.z), full + stage);
              } else {
                ptx::cp_async_bulk_tensor_3d_multicast(sa + rank * kPart * kBK, &map_a, kb * kBK, m,
                                                       static_cast<int>(tile.z), full + stage, (1u << C) - 1);
              }
              ptx::cp_async_bulk_tensor_3d(sa + S::kABytes, &map_b, kb * kBK, n0, e, full + stage);
              if (box) {
                ptx::cp_async_bulk_tensor_3d(scale_smem + slot * S::kScaleFloats, &map_as, kb,
                                             static_cast<int>(tile.m0), static_cast<int>(tile.z), full + stage);
              }
            }
            if (++stage == kStages) stage = 0, phase ^= 1;
          }
        }
      }
    } else if (threadIdx.x < 64) {
      // Each lane copies a_s of rows lane, lane + 32, ... (zeros past a's
      // rows) and lanes 0 and 1 the two b_s of a block into the stage's
      // scale slots by cp.async, its arrival on the stage's full barrier
      // deferred until they land: no lane waits for its loads, so the
      // scales of every free stage are in flight at once.
      constexpr int kRowsPerLane = BM / 32;
      int stage = 0, slot = kStages - 1;
      uint32_t phase = 0;
      for (int64_t t = first; t < tiles; t += step) {
        const TileAt tile = tile_at_index<BM, BN, C>(p, t);
        const int n0 = static_cast<int>(tile.n0 + rank * BN);
        // The two b_s rows the tile's columns can take (clamped: columns past N are not stored).
        const int64_t nb0 = min(n0 / ::lowbit::kFp8ScaleBlock, nblocks - 1);
        const int64_t nb_lane = lane == 0 ? nb0 : min(nb0 + 1, nblocks - 1);
        const float* as_lane = p.a_s + (tile.z * p.rows + tile.m0 + lane) * p.kb;
        const int rows_left = static_cast<int>(min(p.rows - tile.m0, static_cast<int64_t>(BM)));
        for (int e = next_expert<BM>(p, tile.z, tile.m0, -1); e != INT_MAX;
             e = next_expert<BM>(p, tile.z, tile.m0, e)) {
          const float* bs_row = p.b_s + (static_cast<int64_t>(e) * nblocks + nb_lane) * p.kb;
          for (int kb = 0; kb < p.kb; ++kb) {
            slot = scale_slot<kStages>(slot, kb);
            ptx::mbarrier_try_wait_parity(empty + stage, phase ^ 1);
            if (!scale_tma) {
              float* sl = scale_smem + slot * S::kScaleFloats;
#pragma unroll
              for (int i = 0; i < kRowsPerLane; ++i) {
                const bool in = lane + 32 * i < rows_left;
                ptx::cp_async4(sl + 4 * (lane + 32 * i) + (kb & 3), in ? as_lane + 32 * i * p.kb + kb : p.a_s,
                               in ? 4 : 0);
              }
            }
            if (lane < 2) ptx::cp_async4(scale_smem + stage * S::kScaleFloats + 4 * BM + lane, bs_row + kb);
            ptx::cp_async_mbarrier_arrive_noinc(full + stage);
            if (++stage == kStages) stage = 0, phase ^= 1;
          }
        }
      }
      ptx::cp_async_wait_all();
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
  int stage = 0, slot = kStages - 1;
  uint32_t phase = 0;
  // Two consumer warpgroups issue their waves' wgmma in turns (named
  // barriers: the first's wave, the second's, the first's next...), so the
  // tensor cores finish the first's before the second's and each warpgroup
  // promotes while the other's MMA runs (issued together, their wgmma
  // interleave and both promote at once, the tensor cores idle).
  constexpr bool kPingPong = WM * WN == 2;
  constexpr int kAfterFirst = 1, kAfterSecond = 2;
  // The staged epilogue: this warpgroup's barrier, its issuing thread, its
  // 128-byte column chunks and the box of wave v in its first chunk.
  const int out_bar = 3 + cw;
  const bool issuer = threadIdx.x % 128 == 0;
  constexpr int kChunks = WGN * 2 / 128;
  auto box = [&](int v) { return out_smem + (wn * kChunks * BM + 64 * (wm + WM * v)) * 128; };
  // Before the first write of a tile: the previous tile's stores have read the buffer.
  auto claim_buffer = [&]() {
    if (issuer) ptx::cp_async_bulk_wait_group_read<0>();
    ptx::bar_sync(out_bar, 128);
  };
  // After the last: every thread's writes reach the async proxy, then one thread stores the boxes.
  auto store_buffer = [&](int64_t z, int64_t m0, int64_t n_base) {
    ptx::fence_proxy_async_shared();
    ptx::bar_sync(out_bar, 128);
    if (issuer) {
#pragma unroll
      for (int v = 0; v < WV; ++v) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int64_t n = n_base + 64 * c;
          if (n < p.N) {
            ptx::cp_async_bulk_tensor_3d_store(&map_out, box(v) + c * BM * 128, static_cast<int>(n),
                                               static_cast<int>(m0 + 64 * (wm + WM * v)), static_cast<int>(z));
          }
        }
      }
      ptx::cp_async_bulk_commit_group();
    }
  };
  // The second's first turn waits for nothing: the first warpgroup's barrier is primed.
  if constexpr (kPingPong) {
    if (cw == 1) ptx::bar_arrive(kAfterSecond, 256);
  }
  float acc[WV][WGN / 2];
  float part[WGN / 2];
  // The low descriptor words of this warpgroup's first wave of a and of its
  // b columns in stage 0 (warp-uniform: the compiler keeps them in uniform registers).
  const uint32_t a_lo = __shfl_sync(0xffffffffu, ptx::wgmma_desc_k128_lo(smem + wm * 64 * kBK), 0);
  const uint32_t b_lo = __shfl_sync(0xffffffffu, ptx::wgmma_desc_k128_lo(smem + S::kABytes + wn * WGN * kBK), 0);
  constexpr uint32_t kStageLo = S::kStageBytes >> 4, kWaveLo = (WM * 64 * kBK) >> 4;
  for (int64_t t = first; t < tiles; t += step) {
    const TileAt tile = tile_at_index<BM, BN, C>(p, t);
    // Wave v's first row (waves of the warpgroups interleave: 64-row blocks wm, WM + wm, ...).
    auto wave_base = [&](int v) { return tile.m0 + 64 * (wm + WM * v); };
    const int64_t n_base = tile.n0 + rank * BN + WGN * wn;
    // Columns of the CTA's tile before `split` take the stage's first b_s, the rest the second.
    const int64_t n0 = tile.n0 + rank * BN;
    const int split = static_cast<int>((n0 / ::lowbit::kFp8ScaleBlock + 1) * ::lowbit::kFp8ScaleBlock - n0);
    // This thread's rows of wave v in the tile: row(v) and row(v) + 8.
    auto row = [&](int v) { return 64 * (wm + WM * v) + 16 * warp + (lane >> 2); };
    // Rows of expert e (and, when last, the zero and NaN rows) out, directly or into the staging buffer.
    auto finish = [&](int e, bool first, bool last) {
      if constexpr (kStagedOut) {
        if (first) claim_buffer();
#pragma unroll
        for (int v = 0; v < WV; ++v) {
          if (first && last) {
            stage_tile<Out, WGN, BM>(p, acc[v], box(v), tile.z, wave_base(v), static_cast<int>(n_base), e);
          } else {
            stage_rows<Out, WGN, BM>(p, acc[v], box(v), tile.z, wave_base(v), static_cast<int>(n_base), e, last);
          }
        }
        if (last) store_buffer(tile.z, tile.m0, n_base);
      } else {
#pragma unroll
        for (int v = 0; v < WV; ++v)
          store_rows<Out, WGN>(p, acc[v], tile.z, wave_base(v), n_base, e, last, pair_ok);
      }
    };
    int e = next_expert<BM>(p, tile.z, tile.m0, -1);
    if (e == INT_MAX) finish(INT_MIN, true, true);
    bool first = true;
    while (e != INT_MAX) {
#pragma unroll
      for (int v = 0; v < WV; ++v) {
#pragma unroll
        for (int i = 0; i < WGN / 2; ++i) acc[v][i] = 0.0f;
      }
      for (int kb = 0; kb < p.kb; ++kb) {
        slot = scale_slot<kStages>(slot, kb);
        ptx::mbarrier_try_wait_parity(full + stage, phase);
        float sc[2 * WV + 2];  // {a_s of each wave's two rows}, the two b_s
        const uint32_t stage_lo = static_cast<uint32_t>(stage) * kStageLo;
#pragma unroll
        for (int v = 0; v < WV; ++v) {
          const uint32_t da = a_lo + stage_lo + v * kWaveLo, db = b_lo + stage_lo;
          if constexpr (kPingPong) ptx::bar_sync(cw == 0 ? kAfterSecond : kAfterFirst, 256);
          ptx::wgmma_fence();
#pragma unroll
          for (int k = 0; k < kBK / 32; ++k) {
            ptx::wgmma_ss_e4m3<WGN>(part, ptx::wgmma_desc_k128_of(da + 2 * k), ptx::wgmma_desc_k128_of(db + 2 * k), k);
          }
          ptx::wgmma_commit_group();
          if constexpr (kPingPong) ptx::bar_arrive(cw == 0 ? kAfterFirst : kAfterSecond, 256);
          if (v == 0) {  // the block's scales, read while the first wave's MMA runs (the asm keeps the order)
            const float* sl = scale_smem + slot * S::kScaleFloats + (kb & 3);
            const float* ss = scale_smem + stage * S::kScaleFloats;
#pragma unroll
            for (int u = 0; u < WV; ++u) {
              sc[2 * u] = ptx::ld_shared_f32(sl + 4 * row(u));
              sc[2 * u + 1] = ptx::ld_shared_f32(sl + 4 * (row(u) + 8));
            }
            sc[2 * WV] = ptx::ld_shared_f32(ss + 4 * BM);
            sc[2 * WV + 1] = ptx::ld_shared_f32(ss + 4 * BM + 1);
          }
          ptx::wgmma_wait_group<0>();
          if (v == WV - 1) {
            // Every thread releases the stage after its own reads of it (its
            // scales); one arrival a warp after __syncwarp measured no faster,
            // and racecheck then reports the lanes' scale reads racing the refill.
            if constexpr (C == 1) {
              ptx::mbarrier_arrive(empty + stage);
            } else {
#pragma unroll
              for (uint32_t r = 0; r < C; ++r) ptx::mbarrier_arrive_cluster(empty + stage, r);
            }
            if (++stage == kStages) stage = 0, phase ^= 1;
          }
          const float sb0 = sc[2 * WV], sb1 = sc[2 * WV + 1];
          const float s00 = sc[2 * v] * sb0, s01 = sc[2 * v] * sb1, s10 = sc[2 * v + 1] * sb0,
                      s11 = sc[2 * v + 1] * sb1;
          float(&av)[WGN / 2] = acc[v];
#pragma unroll
          for (int j = 0; j < WGN / 8; ++j) {
            // 8-column groups never straddle a 128 boundary; a tile of BN
            // dividing 128 lies in one scale block (its n0 a multiple of BN).
            const bool lo = 128 % BN == 0 || WGN * wn + 8 * j < split;
            const float r0 = lo ? s00 : s01, r1 = lo ? s10 : s11;
            av[4 * j] = fmaf(part[4 * j], r0, av[4 * j]);
            av[4 * j + 1] = fmaf(part[4 * j + 1], r0, av[4 * j + 1]);
            av[4 * j + 2] = fmaf(part[4 * j + 2], r1, av[4 * j + 2]);
            av[4 * j + 3] = fmaf(part[4 * j + 3], r1, av[4 * j + 3]);
          }
        }
      }
      const int next = next_expert<BM>(p, tile.z, tile.m0, e);
      finish(e, first, next == INT_MAX);
      first = false;
      e = next;
    }
  }
  // The second warpgroup's last arrival is matched here (barriers end balanced).
  if constexpr (kPingPong) {
    if (cw == 0) ptx::bar_sync(kAfterSecond, 256);
  }
  // The buffer stays alive, and out is written, before the CTA leaves.
  if (kStagedOut && issuer) ptx::cp_async_bulk_wait_group<0>();
  ptx::griddepcontrol_launch_dependents();
  if constexpr (C == 2) ptx::cluster_sync();
#endif
}

}  // namespace lowbit::cuda::fp8g
