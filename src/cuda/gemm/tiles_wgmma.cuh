// The tiles-layout matmul for large M on Hopper (sm_90a): warpgroup MMA with
// the weight as the A operand from registers and the activations as the B
// operand from shared memory, brought by the bulk tensor copy engine
// (docs/gemm.md, "CUDA kernels").
//
// out[m, n] = Σ_k A[m, k] · w[n, k]: computed as D[n, m] = W[n, :] · A[m, :]ᵀ,
// so the low-bit operand is the one in registers (wgmma reads only its B
// operand from shared memory, and the dequantized weight never goes there).
//
// Block: 3 warpgroups. Warpgroup 0 is the producer: one thread streams A's
// [BN, KS] stages (the block's BN rows of M, KS columns of K as boxes of 64,
// 128-byte swizzle, zeros past M and K) into kStages slots, each with a full and an
// empty mbarrier. Warpgroups 1 and 2 are consumers of 64 rows of N each
// (warp w of them: row tile nt0 + 4·(wg - 1) + w): per stage of KS columns
// a warp loads its tile's 16 bytes a lane straight from global memory into
// registers (kDepth stages ahead), decodes them into the wgmma A fragments
// (the tiles layout is that fragment order), scales them in A's dtype
// (w = (v - z) · s, the scale rounded to A's dtype: a weight is rounded at
// most three times, see docs/gemm.md's tolerance), and issues 4 wgmma k16
// steps a box on the slot. One consumer's decode overlaps the other's MMA.
//
//   shared: A slots [kStages][BN rows][128 B] (1024-aligned, swizzled by the
//           TMA), full / empty barriers, the 4-bit tables' lookup table
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/weight_format.h"
#include "cuda/gemm/decoders.cuh"
#include "cuda/gemm/kernel.cuh"
#include "cuda/gemm/params.h"
#include "cuda/gemm/sm90.cuh"
#include "cuda/gemm/tiles_mma.cuh"

namespace lowbit::cuda::gemm {

// BN rows of M and KS columns of K a stage: KS / 64 boxes of [BN, 64] (each
// a 1024-aligned swizzled tile of BN rows of 128 bytes).
template <class Dec, int BN, int KS>
struct WgmmaShape {
  static constexpr int kKT = core::tile_k(Dec::kBits);  // 64 (4-bit) or 32 (8-bit)
  static constexpr int kKS = KS;
  static constexpr int kBoxes = KS / 64;
  static constexpr int kBoxBytes = BN * 128;
  static constexpr int kTiles = kKS / kKT;  // tiles a warp a stage
  static constexpr int kSteps = kKS / 16;   // k16 steps a stage
  static constexpr int kABytes = kBoxBytes * kBoxes;
  // A slots: up to 192 KB (with the tables' 32 KB lookup table the block
  // still fits in 227 KB), at most 8.
  static constexpr int kStages = 196608 / kABytes < 8 ? 196608 / kABytes : 8;
  static constexpr int kDepth = KS == 64 ? 4 : 2;  // weight prefetch, stages
  static constexpr int kThreads = 384;
  static constexpr int kRows = 128;  // rows of N a block
  static constexpr int kBarBytes = 2 * kStages * 8;
  static constexpr int kTabBytes = Dec::kTable ? 256 * 32 * 4 : 0;
  // + 1024: the dynamic shared base is aligned up to the swizzle's 1024 bytes.
  static constexpr size_t kBytes = 1024 + static_cast<size_t>(kStages) * kABytes + kBarBytes + kTabBytes;
  static_assert(kKT <= kKS, "a stage holds whole tiles");
};

template <class Dec, class T, int BN, int KS>
__global__ void __launch_bounds__(384, 1) tiles_wgmma_kernel(const __grid_constant__ CUtensorMap tmap, const Params p) {
#if LOWBIT_SM90A
  using S = WgmmaShape<Dec, BN, KS>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S::kStages * S::kABytes);
  uint64_t* empty = full + S::kStages;
  uint32_t* tab = reinterpret_cast<uint32_t*>(empty + S::kStages);

  // Blocks walk M within groups of 16 column blocks of N, so the blocks in
  // flight share their weight rows and activation rows in L2.
  const int64_t n_blocks = (p.N + S::kRows - 1) / S::kRows;
  const int64_t m_blocks = (p.M + BN - 1) / BN;
  const int64_t b = blockIdx.x;
  const int64_t group = b / (16 * m_blocks);
  const int64_t first_n = group * 16;
  const int64_t group_n = n_blocks - first_n < 16 ? n_blocks - first_n : 16;
  const int64_t in_group = b % (16 * m_blocks);
  const int64_t n_block = first_n + in_group % group_n;
  const int64_t m0 = (in_group / group_n) * BN;

  const int K = static_cast<int>(p.K);
  const int kb = static_cast<int>(blockIdx.z) * static_cast<int>(p.k_split);
  const int ke = K - kb > static_cast<int>(p.k_split) ? kb + static_cast<int>(p.k_split) : K;
  const int stages = (ke - kb + S::kKS - 1) / S::kKS;

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 8);  // one arrival per consumer warp
    }
    mbar_fence_init();
  }
  if constexpr (Dec::kTable) Dec::fill(tab, p);
  __syncthreads();

  if (wg == 0) {
    // Producer: one thread streams A.
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      for (int s = 0; s < stages; ++s) {
        const int slot = s % S::kStages;
        mbar_wait(&empty[slot], ((s / S::kStages) & 1) ^ 1);
        mbar_expect_tx(&full[slot], S::kABytes);
#pragma unroll
        for (int box = 0; box < S::kBoxes; ++box) {
          tma_load_2d(smem + slot * S::kABytes + box * S::kBoxBytes, &tmap, kb + s * S::kKS + 64 * box,
                      static_cast<int>(m0), &full[slot]);
        }
      }
    }
    return;
  }

  setmaxnreg_inc<232>();
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int64_t row_tiles = (p.N + core::kTileRows - 1) / core::kTileRows;
  const int64_t nt_own = n_block * (S::kRows / core::kTileRows) + (wg - 1) * 4 + warp;
  const int64_t nt = nt_own < row_tiles ? nt_own : row_tiles - 1;  // past N: loads stay in bounds, no stores
  const uint8_t* wsrc = p.qweight + nt * p.k_tiles * core::kTileBytes + lane * 16;
  const int sb = scale_bytes(p.scale_kind);
  const uint8_t* ssrc = static_cast<const uint8_t*>(p.tscale) + (nt * core::kTileRows + g) * sb;
  const uint8_t* zsrc = p.zcodes + nt * core::kTileRows + g;
  const int shift = tile_group_shift(p, S::kKT);

  // The weight ring: a stage's tiles, their rows' scales (raw bits) and zero codes.
  uint4 wring[S::kDepth][S::kTiles];
  uint32_t sring[S::kDepth][S::kTiles][2];
  uint32_t zring[S::kDepth][S::kTiles][2];
  auto fetch = [&](int d, int s) {
#pragma unroll
    for (int u = 0; u < S::kTiles; ++u) {
      const int kt = (kb + s * S::kKS) / S::kKT + u;
      const bool live = s < stages && kt * S::kKT < ke;
      wring[d][u] = live ? __ldg(reinterpret_cast<const uint4*>(wsrc + static_cast<int64_t>(kt) * core::kTileBytes))
                         : make_uint4(0, 0, 0, 0);
      const int64_t grp = live ? kt >> shift : 0;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        sring[d][u][r] = 0x3f800000u;  // 1.0f
        zring[d][u][r] = 0;
        if (live && p.tscale) {
          sring[d][u][r] = load_scale_bits(ssrc + (grp * p.np + 8 * r) * sb, sb);
        }
        if (live && p.zcodes) zring[d][u][r] = __ldg(zsrc + grp * p.np + 8 * r);
      }
    }
  };

  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
  uint32_t af[S::kSteps][4];
  const RowCtx plain = Dec::ctx(p, 1.0f, 0.0f);

#pragma unroll
  for (int d = 0; d < S::kDepth; ++d) fetch(d, d);

  for (int s0 = 0; s0 < stages; s0 += S::kDepth) {
#pragma unroll
    for (int d = 0; d < S::kDepth; ++d) {
      const int s = s0 + d;
      if (s >= stages) break;
        // Decode the stage's tiles (the previous stage's MMA is complete).
#pragma unroll
      for (int u = 0; u < S::kTiles; ++u) {
        const uint32_t w[4] = {wring[d][u].x, wring[d][u].y, wring[d][u].z, wring[d][u].w};
        RowCtx ctx[2] = {plain, plain};
        if (p.zcodes) {
#pragma unroll
          for (int r = 0; r < 2; ++r) ctx[r] = Dec::ctx(p, 1.0f, int_code_value(zring[d][u][r], p));
        }
        const uint32_t s2[2] = {splat2<T>(scale_value(sring[d][u][0], p.scale_kind)),
                                splat2<T>(scale_value(sring[d][u][1], p.scale_kind))};
#pragma unroll
        for (int j = 0; j < S::kKT / 16; ++j) {
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const uint32_t v = Dec::pair(w, 4 * j + r, ctx[r & 1], p, tab, lane);
            af[u * (S::kKT / 16) + j][r] = fma2<T>(v, s2[r & 1], 0x80008000u);  // v · s (+ -0)
          }
        }
      }
      fetch(d, s + S::kDepth);
      const int slot = s % S::kStages;
      mbar_wait(&full[slot], (s / S::kStages) & 1);
      // The steps' descriptors before the fence: no instruction may define a
      // wgmma input between the first wgmma and the wait (ptxas serializes them).
      uint64_t desc[S::kSteps];
#pragma unroll
      for (int box = 0; box < S::kBoxes; ++box) {
        const uint64_t base = wgmma_desc_k128(smem + slot * S::kABytes + box * S::kBoxBytes);
#pragma unroll
        for (int j = 0; j < 4; ++j) desc[4 * box + j] = base + 2 * j;  // +32 bytes a k16 step
      }
      wgmma_fence();
#pragma unroll
      for (int j = 0; j < S::kSteps; ++j) wgmma_rs<T, BN>(acc, af[j], desc[j]);
      wgmma_commit();
      // Wait for this stage's MMA before the next decode writes its inputs:
      // with a stage left in flight ptxas serializes every wgmma (C7513:
      // registers defined under an MMA in flight). The two consumer
      // warpgroups overlap one's decode with the other's MMA instead.
      wgmma_wait<0>();
      if (lane == 0) mbar_arrive(&empty[slot]);
    }
  }
  if (nt_own >= row_tiles) return;
  const int64_t n0 = nt_own * core::kTileRows;
  // acc[4i .. 4i + 3]: the warp's 16 rows x columns 8i .. 8i + 7.
#pragma unroll
  for (int i = 0; i < BN / 8; ++i) write_fragment(p, n0, m0 + 8 * i, acc + 4 * i);
#endif
}

}  // namespace lowbit::cuda::gemm
