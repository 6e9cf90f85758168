// The tiles-layout matmul for large M on Hopper (sm_90a): warpgroup MMA with
// the weight as the A operand from registers and the activations as the B
// operand from shared memory, brought by the bulk tensor copy engine
// (docs/gemm.md, "CUDA kernels").
//
// out[m, n] = Σ_k A[m, k] · w[n, k]: computed as D[n, m] = W[n, :] · A[m, :]ᵀ,
// so the low-bit operand is the one in registers (wgmma reads only its B
// operand from shared memory, and the dequantized weight never goes there).
//
// Block: 1 + CW warpgroups. Warpgroup 0 is the producer: one thread streams
// A's [BM, KS] stages (the block's BM rows of M, KS columns of K as boxes of
// 64, 128-byte swizzle, zeros past M and K) into kStages slots, each with a
// full and an empty mbarrier. Warpgroups 1 .. CW are consumers of 64 rows of
// N each (warp w of them: row tile nt0 + 4·(wg - 1) + w): per stage of KS columns
// a warp loads its tile's 16 bytes a lane straight from global memory into
// registers (kDepth stages ahead), decodes them into the wgmma A fragments
// (the tiles layout is that fragment order), scales them in A's dtype
// (w = (v - z) · s, the scale rounded to A's dtype: a weight is rounded at
// most three times, see docs/gemm.md's tolerance), and issues 4 wgmma k16
// steps a box on the slot. One consumer's decode overlaps the others' MMAs.
//
//   shared: A slots [kStages][BM rows][128 B] (1024-aligned, swizzled by the
//           TMA; at the end, the results' stage), full / empty barriers, the
//           4-bit tables' lookup table
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "core/weight_format.h"
#include "cuda/common/ptx/arch.cuh"
#include "cuda/common/ptx/copy.cuh"
#include "cuda/common/ptx/mma.cuh"
#include "cuda/common/ptx/sync.cuh"
#include "cuda/common/ptx/tma.cuh"
#include "cuda/common/ptx/wgmma.cuh"
#include "cuda/common/swizzle.cuh"
#include "cuda/gemm/decoders.cuh"
#include "cuda/gemm/kernel.cuh"
#include "cuda/gemm/params.h"
#include "cuda/gemm/tiles_mma.cuh"

namespace lowbit::cuda::gemm {

// BM rows of M and KS columns of K a stage: KS / 64 boxes of [BM, 64] (each
// a 1024-aligned swizzled tile of BM rows of 128 bytes).
template <class Dec, int BM, int KS, int CW>
struct WgmmaShape {
  static constexpr int kKT = core::tile_k(Dec::kBits);  // 64 (4-bit) or 32 (8-bit)
  static constexpr int kKS = KS;
  static constexpr int kBoxes = KS / 64;
  static constexpr int kBoxBytes = BM * 128;
  static constexpr int kTiles = kKS / kKT;  // tiles a warp a stage
  static constexpr int kSteps = kKS / 16;   // k16 steps a stage
  static constexpr int kABytes = kBoxBytes * kBoxes;
  // A slots: up to 192 KB (with the tables' 32 KB lookup table the block
  // still fits in 227 KB), at most 8.
  static constexpr int kStages = 196608 / kABytes < 8 ? 196608 / kABytes : 8;
  static constexpr int kDepth = KS == 64 && CW == 2 ? 4 : 2;  // weight prefetch, stages
  static constexpr int kConsumers = 128 * CW;                 // CW consumer warpgroups of 64 rows of N
  static constexpr int kThreads = 128 + kConsumers;
  static constexpr int kBlockN = 64 * CW;  // rows of N a block
  // Registers a thread: a block starts with kLaunchRegs a thread (64K
  // shared by kThreads, in steps of 8); the producer gives up what the
  // consumers then take, and no more (setmaxnreg.inc waits until the SM has
  // them: asking for more than the producer freed hangs the block). 2
  // consumer warpgroups: 40 and 232, 4: 24 and 112.
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kProducerRegs = CW == 2 ? 40 : 24;
  static constexpr int kConsumerRegs = (kLaunchRegs + 128 * (kLaunchRegs - kProducerRegs) / kConsumers) / 8 * 8;
  static_assert(kConsumerRegs <= 256, "setmaxnreg's limit");
  static constexpr int kBarBytes = 2 * kStages * 8;
  static constexpr int kTabBytes = Dec::kTable ? 256 * 32 * 4 : 0;
  // + 1024: the dynamic shared base is aligned up to the swizzle's 1024 bytes.
  static constexpr size_t kBytes = 1024 + static_cast<size_t>(kStages) * kABytes + kBarBytes + kTabBytes;
  static_assert(kKT <= kKS, "a stage holds whole tiles");
  static_assert(kStages * kABytes >= BM * kBlockN * 4, "the slots hold the block's fp32 results");
};

#if LOWBIT_SM90A
// The block's results go out through shared memory as rows of M ([BM][R
// rows of N]): 16-bit output as halves (rows of 2R bytes, written by
// stmatrix), split partials and fp32 output as floats (rows of 4R bytes).
// The 16-byte chunks of a row are XOR-swizzled by row so the fragment
// writes and the row reads hit distinct banks (halves: swizzle128; floats,
// written as pairs of rows: chunk bits 1-2 by row bits 1-2); these are the
// byte offsets.
template <int R>
__device__ __forceinline__ int stage16_at(int m, int chunk) {
  return m * 2 * R + (swizzle128(m, chunk) << 4);
}
template <int R>
__device__ __forceinline__ int stage32_at(int m, int chunk) {
  return m * 4 * R + ((chunk ^ (((m >> 1) & 3) << 1)) << 4);
}

// Two results rounded to a 16-bit output kind, first in the low half.
__device__ __forceinline__ uint32_t pack_out(float a, float b, OutKind kind) {
  if (kind == OutKind::f16) return f32_to_f16_hw(a) | (uint32_t{f32_to_f16_hw(b)} << 16);
  return f32_to_bf16_hw(a) | (uint32_t{f32_to_bf16_hw(b)} << 16);
}

// The block's results out of the accumulators (acc[4i .. 4i + 3]: the
// warp's 16 rows of N, wrow its row tile in the block, x columns 8i .. 8i + 7
// of M). Each consumer thread puts its fragments in the stage — 16-bit
// output with the bias added and rounded as store_out does, by stmatrix; else
// as floats —, then the block's C consumer threads (R rows of N) write the
// stage out a row of M at a time in 16-byte stores (scalar stores where a
// row's end or the destination's alignment does not allow 16 bytes).
template <int BM, int R, int C>
__device__ __forceinline__ void wgmma_epilogue(const Params& p, uint8_t* stage, const float* acc, int64_t n_base,
                                               int64_t m0, int wrow, int tid) {
  const int lane = tid & 31, g = lane >> 2, q = lane & 3;
  const bool half = p.splits == 1 && p.out_kind != OutKind::f32;
  if (half) {
    float b[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t n = n_base + 16 * wrow + g + 8 * h;
      if (p.bias && n < p.N) b[h] = __ldg(p.bias + n);
    }
    auto out2 = [&](const float* c, int h) {
      return p.bias ? pack_out(__fadd_rn(c[2 * h], b[h]), __fadd_rn(c[2 * h + 1], b[h]), p.out_kind)
                    : pack_out(c[2 * h], c[2 * h + 1], p.out_kind);
    };
    // Matrix k of a pair of n8 blocks (i, i + 1): block i + k / 2, rows of N 8 (k % 2) + 0..7.
    const int k = lane >> 3, j = lane & 7;
    const uint32_t base = ptx::smem_addr(stage);
#pragma unroll
    for (int i = 0; i < BM / 8; i += 2) {
      const uint32_t addr = base + stage16_at<R>(8 * (i + k / 2) + j, 2 * wrow + (k & 1));
      ptx::stmatrix_x4_trans(addr, out2(acc + 4 * i, 0), out2(acc + 4 * i, 1), out2(acc + 4 * i + 4, 0),
                             out2(acc + 4 * i + 4, 1));
    }
  } else {
#pragma unroll
    for (int i = 0; i < BM / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = 16 * wrow + g + 8 * (e >> 1);
        *reinterpret_cast<float*>(stage + stage32_at<R>(8 * i + 2 * q + (e & 1), n >> 2) + 4 * (n & 3)) =
            acc[4 * i + e];
      }
    }
  }
  ptx::bar_sync(1, C);
  void* dst = p.splits > 1 ? static_cast<void*>(p.partial + static_cast<int64_t>(blockIdx.z) * p.M * p.N) : p.out;
  const int per = half ? 8 : 4;  // elements a 16-byte chunk
  const bool vec = p.N % per == 0 && (reinterpret_cast<uintptr_t>(dst) & 15) == 0;
  const int chunks = R / per, rows_a_pass = C / chunks;
  const int c = tid % chunks;
  const int64_t n = n_base + per * c;
  // fp32 output adds the bias here (the partial sums get it in the reduction).
  const bool add_bias = !half && p.splits == 1 && p.bias;
  float bias[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) bias[e] = add_bias && n + e < p.N ? __ldg(p.bias + n + e) : 0.0f;
  for (int m = tid / chunks; m < BM && m0 + m < p.M; m += rows_a_pass) {
    uint4 x = *reinterpret_cast<const uint4*>(stage + (half ? stage16_at<R>(m, c) : stage32_at<R>(m, c)));
    if (add_bias) {
      x = make_uint4(__float_as_uint(__fadd_rn(__uint_as_float(x.x), bias[0])),
                     __float_as_uint(__fadd_rn(__uint_as_float(x.y), bias[1])),
                     __float_as_uint(__fadd_rn(__uint_as_float(x.z), bias[2])),
                     __float_as_uint(__fadd_rn(__uint_as_float(x.w), bias[3])));
    }
    const int64_t at = (m0 + m) * p.N + n;
    if (vec && n + per <= p.N) {
      *reinterpret_cast<uint4*>(static_cast<uint8_t*>(dst) + at * (half ? 2 : 4)) = x;
    } else {
      const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (e >= per || n + e >= p.N) break;
        if (half) {
          static_cast<uint16_t*>(dst)[at + e] = static_cast<uint16_t>(w[e / 2] >> (16 * (e % 2)));
        } else {
          static_cast<uint32_t*>(dst)[at + e] = w[e];
        }
      }
    }
  }
}
#endif

template <class Dec, class T, int BM, int KS, int CW>
__global__ void __launch_bounds__(128 * (CW + 1), 1)
    tiles_wgmma_kernel(const __grid_constant__ CUtensorMap tmap, const Params p) {
#if LOWBIT_SM90A
  using S = WgmmaShape<Dec, BM, KS, CW>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S::kStages * S::kABytes);
  uint64_t* empty = full + S::kStages;
  uint32_t* tab = reinterpret_cast<uint32_t*>(empty + S::kStages);

  // Blocks walk M within groups of 16 column blocks of N, so the blocks in
  // flight share their weight rows and activation rows in L2.
  const int64_t n_blocks = (p.N + S::kBlockN - 1) / S::kBlockN;
  const int64_t m_blocks = (p.M + BM - 1) / BM;
  const int64_t b = blockIdx.x;
  const int64_t group = b / (16 * m_blocks);
  const int64_t first_n = group * 16;
  const int64_t group_n = n_blocks - first_n < 16 ? n_blocks - first_n : 16;
  const int64_t in_group = b % (16 * m_blocks);
  const int64_t n_block = first_n + in_group % group_n;
  const int64_t m0 = (in_group / group_n) * BM;

  const int K = static_cast<int>(p.K);
  const int kb = static_cast<int>(blockIdx.z) * static_cast<int>(p.k_split);
  const int ke = K - kb > static_cast<int>(p.k_split) ? kb + static_cast<int>(p.k_split) : K;
  const int stages = (ke - kb + S::kKS - 1) / S::kKS;

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], 4 * CW);  // one arrival per consumer warp
    }
    ptx::fence_mbarrier_init();
  }
  if constexpr (Dec::kTable) Dec::fill(tab, p);
  __syncthreads();

  if (wg == 0) {
    // Producer: one thread streams A.
    ptx::setmaxnreg_dec<S::kProducerRegs>();
    if (threadIdx.x == 0) {
      for (int s = 0; s < stages; ++s) {
        const int slot = s % S::kStages;
        ptx::mbarrier_try_wait_parity(&empty[slot], ((s / S::kStages) & 1) ^ 1);
        ptx::mbarrier_arrive_expect_tx(&full[slot], S::kABytes);
#pragma unroll
        for (int box = 0; box < S::kBoxes; ++box) {
          ptx::cp_async_bulk_tensor_2d(smem + slot * S::kABytes + box * S::kBoxBytes, &tmap, kb + s * S::kKS + 64 * box,
                                       static_cast<int>(m0), &full[slot]);
        }
      }
    }
    return;
  }

  ptx::setmaxnreg_inc<S::kConsumerRegs>();
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int64_t row_tiles = (p.N + core::kTileRows - 1) / core::kTileRows;
  const int64_t nt_own = n_block * (S::kBlockN / core::kTileRows) + (wg - 1) * 4 + warp;
  const int64_t nt = nt_own < row_tiles ? nt_own : row_tiles - 1;  // past N: loads stay in bounds, no stores
  const uint8_t* wsrc = p.qweight + nt * p.k_tiles * core::kTileBytes + lane * 16;
  const int sb = scale_bytes(p.scale_kind);
  const uint8_t* ssrc = static_cast<const uint8_t*>(p.tscale) + (nt * core::kTileRows + g) * sb;
  const uint8_t* zsrc = p.zcodes + nt * core::kTileRows + g;
  const int shift = tile_group_shift(p, S::kKT);

  // The weight ring: a stage's tiles, their rows' scales (raw bits) and zero
  // codes. fetch(d, s) is called for s = 0, 1, ... in order: the next stage's
  // first tile is a running pointer, and a stage whose tiles are all inside
  // [kb, ke) loads without checks.
  uint4 wring[S::kDepth][S::kTiles];
  uint32_t sring[S::kDepth][S::kTiles][2];
  uint32_t zring[S::kDepth][S::kTiles][2];
  const int whole = (ke - kb) / S::kKS;  // stages with every tile live
  const int64_t sstride = p.np * sb;     // bytes a group's row of scales
  int kt_next = kb / S::kKT;
  const uint8_t* w_next = wsrc + static_cast<int64_t>(kt_next) * core::kTileBytes;
  auto fetch = [&](int d, int s) {
    const bool all = s < whole;
#pragma unroll
    for (int u = 0; u < S::kTiles; ++u) {
      const int kt = kt_next + u;
      const bool live = all || (s < stages && kt * S::kKT < ke);
      wring[d][u] =
          live ? __ldg(reinterpret_cast<const uint4*>(w_next + u * core::kTileBytes)) : make_uint4(0, 0, 0, 0);
      const int64_t grp = live ? kt >> shift : 0;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        sring[d][u][r] = 0x3f800000u;  // 1.0f
        zring[d][u][r] = 0;
        if (live && p.tscale) sring[d][u][r] = load_scale_bits(ssrc + grp * sstride + 8 * r * sb, sb);
        if (live && p.zcodes) zring[d][u][r] = __ldg(zsrc + grp * p.np + 8 * r);
      }
    }
    kt_next += S::kTiles;
    w_next += S::kTiles * core::kTileBytes;
  };

  float acc[BM / 2];
#pragma unroll
  for (int i = 0; i < BM / 2; ++i) acc[i] = 0.0f;
  uint32_t af[S::kSteps][4];
  const RowCtx plain = Dec::ctx(p, 1.0f, 0.0f);

#pragma unroll
  for (int d = 0; d < S::kDepth; ++d) fetch(d, d);

  // Per k16 step: wait until the step's fragment registers are free (the
  // same step of the previous stage has completed; every later group stays
  // in flight), decode the step into them, issue its wgmma. The decode of
  // step j thus runs under the MMA of the steps before it, and no wgmma input
  // is redefined while a wgmma reading it is in flight (ptxas would
  // serialize every wgmma, C7513). The groups left in flight are fewer than
  // a tile's steps: with more, ptxas serializes them too, for reasons it
  // does not say.
  constexpr int kInFlight = S::kKT / 16 - 1;
  for (int s0 = 0; s0 < stages; s0 += S::kDepth) {
#pragma unroll
    for (int d = 0; d < S::kDepth; ++d) {
      const int s = s0 + d;
      if (s >= stages) break;
      const int slot = s % S::kStages;
      ptx::mbarrier_try_wait_parity(&full[slot], (s / S::kStages) & 1);
      const uint64_t base = ptx::wgmma_desc_k128(smem + slot * S::kABytes);
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
          const int step = u * (S::kKT / 16) + j;
          ptx::wgmma_wait_group<kInFlight>();
          // At step kInFlight the pending groups are all this stage's: the previous stage's slot is free.
          if (step == kInFlight && s > 0 && lane == 0) ptx::mbarrier_arrive(&empty[(s - 1) % S::kStages]);
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const uint32_t v = Dec::pair(w, 4 * j + r, ctx[r & 1], p, tab, lane);
            af[step][r] = fma2<T>(v, s2[r & 1], 0x80008000u);  // v · s (+ -0)
          }
          // +kBoxBytes a box of 64 columns, +32 bytes a k16 step (descriptor units of 16 bytes).
          const uint64_t desc = base + (step / 4) * (S::kBoxBytes >> 4) + 2 * (step % 4);
          ptx::wgmma_fence();
          // The wgmma's N is the block's BM rows of M (the product is computed transposed).
          if constexpr (std::is_same_v<T, BF16>) {
            ptx::wgmma_mma_async_rs_bf16<BM>(acc, af[step], desc);
          } else {
            ptx::wgmma_mma_async_rs_f16<BM>(acc, af[step], desc);
          }
          ptx::wgmma_commit_group();
        }
      }
      fetch(d, s + S::kDepth);
    }
  }
  ptx::wgmma_wait_group<0>();
  // Both consumers' MMAs have read their last slot: the slots hold the results.
  ptx::bar_sync(1, S::kConsumers);
  wgmma_epilogue<BM, S::kBlockN, S::kConsumers>(p, smem, acc, n_block * S::kBlockN, m0, (wg - 1) * 4 + warp,
                                                threadIdx.x - 128);
#endif
}

}  // namespace lowbit::cuda::gemm
