// The tiles-layout matmul on mma.sync (docs/gemm.md, "CUDA kernels"): the
// small-M path on every arch (it streams the weight at memory speed) and the
// large-M path where wgmma is not there.
//
// out[m, n] = Σ_k A[m, k] · w[n, k], W in the `tiles` layout
// (src/core/weight_format.h): a tile is 16 rows × kKT columns, 512 bytes,
// and lane l's 16 bytes of it are its A fragments of kKT / 16 mma steps.
//
// Block: kWarps warps; warp w owns RT row tiles (16 rows of N each) from
// (blockIdx.x · kWarps + w) · RT; the block owns the M tile [m0, m0 + 8·MT)
// (MT n8 tiles of the mma's B operand) and the K range of split blockIdx.z.
// A cp.async pipeline, kStages deep, one commit group per stage, carries per
// stage of kKS = TPS tiles' columns:
//
//   W   [kWarps][RT][TPS][512 B]  each warp's tiles: lane l copies and later
//                                 reads its own 16 bytes of each (no conflicts)
//   S   [kWarps][RT][TPS][64 B]   each tile's 16 scales (f32/f16/bf16)
//   Z   [kWarps][RT][TPS][16 B]   each tile's 16 zero codes (quantized zeros)
//   A   [8·MT][kKS] halves      the block's activations, 16-byte chunks
//                               swizzled (swizzle128) so an ldmatrix of 8
//                               rows hits 8 distinct groups of 4 banks;
//                               rows past M are zeroed once, never copied
//
// Per stage: cp.async.wait, one barrier (the slot refilled next was read by
// every warp before it), the next stage's copies, then TPS tile columns of
// mma steps, each on RT row tiles (one ldmatrix of A serves them all). The
// bookkeeping is paid per stage and per tile column, not per tile (paid per
// tile it outweighs the decode and mma, and the kernel becomes issue-bound).
// The integer and table decoders scale after the mma (fp32, once per group:
// a tile lies in one group).
#pragma once

#include <cstdint>

#include "core/weight_format.h"
#include "cuda/common/ptx/copy.cuh"
#include "cuda/common/ptx/mma.cuh"
#include "cuda/common/swizzle.cuh"
#include "cuda/gemm/decoders.cuh"
#include "cuda/gemm/kernel.cuh"
#include "cuda/gemm/mma.cuh"
#include "cuda/gemm/params.h"
#include "cuda/gemm/shapes.h"

namespace lowbit::cuda::gemm {

constexpr int cmin(int a, int b) { return a < b ? a : b; }

template <class Dec, int MT_, int RT_, int TPS, int kWarps_, int kStages_>
struct TilesMmaShape {
  static constexpr int MT = MT_, RT = RT_, kWarps = kWarps_, kStages = kStages_;
  static constexpr int kKT = core::tile_k(Dec::kBits);  // columns of a tile
  static constexpr int kTPS = TPS;
  static constexpr int kKS = kKT * kTPS;   // columns of a stage
  static constexpr int kSteps = kKT / 16;  // mma k16 steps of a tile
  static constexpr int kBM = 8 * MT;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kChunks = kKS / 8;            // 16-byte chunks of an A row in a stage
  static constexpr int kCells = kWarps * RT * kTPS;  // tiles of a stage
  static constexpr int kW = 0;
  static constexpr int kS = kW + kCells * core::kTileBytes;
  static constexpr int kZ = kS + kCells * 64;
  static constexpr int kA = kZ + kCells * 16;
  static constexpr int kRowBytes = kKS * 2;  // one row of A in a stage
  static constexpr int kStageBytes = kA + kBM * kRowBytes;
  static constexpr int kTabBytes = Dec::kTable ? 256 * 32 * 4 : 64;
  static constexpr size_t kBytes = static_cast<size_t>(kStages) * kStageBytes + kTabBytes;
  static_assert(kChunks >= 8, "the swizzle needs rows of at least 8 chunks");
  static_assert(kSteps % 2 == 0, "ldmatrix.x4 feeds two steps");
  // The cell of (warp, row tile, tile column): cells are laid out [warp][rt][u].
  static constexpr int cell(int warp, int rt, int u) { return (warp * RT + rt) * kTPS + u; }
};

// A scale of the tiles layout from its bits (a 16-bit kind in the low half;
// the bits above it are ignored), without a branch.
__device__ __forceinline__ float scale_value(uint32_t bits, ScaleKind kind) {
  const float h = __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
  const float f = __uint_as_float(kind == ScaleKind::bf16 ? bits << 16 : bits);
  return kind == ScaleKind::f16 ? h : f;
}

// The raw bits of the scale at p (global memory) of sb = scale_bytes(kind)
// bytes (a 16-bit kind in the low half), for scale_value.
__device__ __forceinline__ uint32_t load_scale_bits(const uint8_t* p, int sb) {
  return sb == 4 ? __ldg(reinterpret_cast<const unsigned int*>(p))
                 : static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(p)));
}

// Scale `row` of a slab of 16 (shared memory).
__device__ __forceinline__ float tile_scale(const uint8_t* slab, int row, ScaleKind kind) {
  return scale_value(kind == ScaleKind::f32 ? reinterpret_cast<const uint32_t*>(slab)[row]
                                            : reinterpret_cast<const uint16_t*>(slab)[row],
                     kind);
}

// log2 of the tiles of a group (core::tiles_supported: a power of two; 30
// for one group over K): tile kt is in group kt >> shift.
__device__ __forceinline__ int tile_group_shift(const Params& p, int kkt) {
  return p.G == 1 ? 30 : p.gs_shift - (31 - __clz(kkt));
}

// What a thread copies each stage, set up once so a stage's copies cost a
// few instructions a tile (redone each stage, the divisions and 64-bit index
// arithmetic cost more than the math).
template <class S>
struct TilesCopy {
  static constexpr int kAIters = (S::kBM * S::kChunks + S::kThreads - 1) / S::kThreads;
  // Sources advance as stages are issued (in order): the next stage's.
  const uint8_t* w[S::RT];     // this lane's 16 bytes of the next stage's first tile, per row tile
  const uint8_t* s[S::RT];     // its 16 bytes of group 0's scale slab, per row tile
  const uint8_t* z[S::RT];     // group 0's zero slab, per row tile
  int64_t s_stride, z_stride;  // from one group's slab to the next
  int w_dst, s_dst, z_dst;     // in its warp's cell 0 of a slot
  bool copy_s, copy_z;         // this lane copies scale / zero slabs
  int shift;                   // tile_group_shift
  int kt;                      // the next stage's first tile column
  const uint16_t* a[kAIters];  // its chunks of A at the next stage (null: none)
  int a_dst[kAIters];
  int a_col[kAIters];  // 8·chunk: the chunk is live while k0 + a_col < K
};

template <class S>
__device__ __forceinline__ TilesCopy<S> tiles_copy(const Params& p, const int64_t (&nt)[S::RT], int64_t m0,
                                                   int rows_live, int kt_begin) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  TilesCopy<S> cp;
  const int sb = scale_bytes(p.scale_kind);  // a slab of 16 scales: sb chunks of 16 bytes
  cp.s_stride = p.np * sb;
  cp.z_stride = p.np;
  cp.copy_s = p.tscale != nullptr && lane < sb;
  cp.copy_z = p.zcodes != nullptr && lane == 31;
#pragma unroll
  for (int rt = 0; rt < S::RT; ++rt) {
    cp.w[rt] = p.qweight + (nt[rt] * p.k_tiles + kt_begin) * core::kTileBytes + lane * 16;
    cp.s[rt] = cp.copy_s ? static_cast<const uint8_t*>(p.tscale) + nt[rt] * core::kTileRows * sb + lane * 16 : nullptr;
    cp.z[rt] = cp.copy_z ? p.zcodes + nt[rt] * core::kTileRows : nullptr;
  }
  const int cell = S::cell(warp, 0, 0);
  cp.w_dst = S::kW + cell * core::kTileBytes + lane * 16;
  cp.s_dst = S::kS + cell * 64 + lane * 16;
  cp.z_dst = S::kZ + cell * 16;
  cp.shift = tile_group_shift(p, S::kKT);
  cp.kt = kt_begin;
  const int k_begin = kt_begin * S::kKT;
#pragma unroll
  for (int it = 0; it < TilesCopy<S>::kAIters; ++it) {
    const int i = threadIdx.x + it * S::kThreads;
    const int r = i / S::kChunks, c = i % S::kChunks;
    cp.a[it] = r < rows_live ? p.A + (m0 + r) * p.lda + k_begin + c * 8 : nullptr;
    cp.a_dst[it] = S::kA + r * S::kRowBytes + swizzle128(r, c) * 16;
    cp.a_col[it] = c * 8;
  }
  return cp;
}

// Copies stage `s` of the block's K range into `slot` (nothing past the
// range); always commits a group, so the wait counts stay uniform. Stages
// are issued in order: the sources advance with them. Every tile brings its
// group's scale and zero slabs (a few lanes, L2 hits): no walk state.
template <class S, bool kFull>
__device__ __forceinline__ void tiles_issue_stage(uint8_t* slot, const Params& p, TilesCopy<S>& cp, int k0, int ke) {
#pragma unroll
  for (int u = 0; u < S::kTPS; ++u) {
    if constexpr (!kFull) {
      if (k0 + u * S::kKT >= ke) break;
    }
    const int grp = (cp.kt + u) >> cp.shift;
#pragma unroll
    for (int rt = 0; rt < S::RT; ++rt) {
      const int c = rt * S::kTPS + u;  // cell offset from the warp's cell 0
      ptx::cp_async16(slot + cp.w_dst + c * core::kTileBytes, cp.w[rt] + u * core::kTileBytes);
      if (cp.copy_s) ptx::cp_async16(slot + cp.s_dst + c * 64, cp.s[rt] + grp * cp.s_stride);
      if (cp.copy_z) ptx::cp_async16(slot + cp.z_dst + c * 16, cp.z[rt] + grp * cp.z_stride);
    }
  }
#pragma unroll
  for (int rt = 0; rt < S::RT; ++rt) cp.w[rt] += S::kTPS * core::kTileBytes;
  cp.kt += S::kTPS;
  // A [m0 .. m0 + rows_live, k0 .. k0 + kKS): zeros past K (whole chunks:
  // the host gathers A when K % 8 != 0).
#pragma unroll
  for (int it = 0; it < TilesCopy<S>::kAIters; ++it) {
    if (cp.a[it] == nullptr) continue;
    const bool live = kFull || k0 + cp.a_col[it] < p.K;
    ptx::cp_async16(slot + cp.a_dst[it], live ? cp.a[it] : p.A, live ? 16 : 0);
    cp.a[it] += S::kKS;
  }
}

template <class S>
__device__ __forceinline__ void tiles_issue(uint8_t* slot, const Params& p, TilesCopy<S>& cp, int s, int kb, int ke) {
  const int k0 = kb + s * S::kKS;
  if (k0 + S::kKS <= ke) {
    tiles_issue_stage<S, true>(slot, p, cp, k0, ke);
  } else if (k0 < ke) {
    tiles_issue_stage<S, false>(slot, p, cp, k0, ke);
  }
  ptx::cp_async_commit_group();
}

// The math of one stage: per tile column, one ldmatrix of A per two k16
// steps serves the warp's RT row tiles; a group's sums are flushed at its
// last tile (and at the range's end) with the scales of that tile's slab.
template <class Dec, class T, class S, bool kFull>
__device__ __forceinline__ void tiles_compute_stage(const uint8_t* slot, const Params& p, const uint32_t* tab,
                                                    int k_stage, int kb, int ke, int group_mask, bool zeros,
                                                    RowCtx (&ctx)[S::RT][2], float (&acc)[S::RT][S::MT][4],
                                                    float (&part)[S::RT][S::MT][4]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2;
#pragma unroll
  for (int u = 0; u < S::kTPS; ++u) {
    const int k0 = k_stage + u * S::kKT;
    if constexpr (!kFull) {
      if (k0 >= ke) break;
    }
    const int kt = k0 / S::kKT;  // (k0 >= 0: a shift)
    if (zeros && ((kt & group_mask) == 0 || k0 == kb)) {
#pragma unroll
      for (int rt = 0; rt < S::RT; ++rt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          ctx[rt][r] = Dec::ctx(p, 1.0f, int_code_value(slot[S::kZ + S::cell(warp, rt, u) * 16 + g + 8 * r], p));
        }
      }
    }
    uint32_t w[S::RT][4];
#pragma unroll
    for (int rt = 0; rt < S::RT; ++rt) {
      const uint4 v = ptx::ld_shared_v4(slot + S::kW + S::cell(warp, rt, u) * core::kTileBytes + lane * 16);
      w[rt][0] = v.x, w[rt][1] = v.y, w[rt][2] = v.z, w[rt][3] = v.w;
    }
#pragma unroll
    for (int j = 0; j < S::kSteps; j += 2) {
      uint32_t b[S::MT][4];
#pragma unroll
      for (int t = 0; t < S::MT; ++t) {
        const int r = 8 * t + (lane & 7);
        const int c = (u * S::kKT + 16 * j) / 8 + (lane >> 3);
        ptx::ldmatrix_x4(b[t], slot + S::kA + r * S::kRowBytes + swizzle128(r, c) * 16);
      }
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        const int rho = 4 * (j + jj);
#pragma unroll
        for (int rt = 0; rt < S::RT; ++rt) {
          const uint32_t a0 = Dec::pair(w[rt], rho, ctx[rt][0], p, tab, lane);
          const uint32_t a1 = Dec::pair(w[rt], rho + 1, ctx[rt][1], p, tab, lane);
          const uint32_t a2 = Dec::pair(w[rt], rho + 2, ctx[rt][0], p, tab, lane);
          const uint32_t a3 = Dec::pair(w[rt], rho + 3, ctx[rt][1], p, tab, lane);
#pragma unroll
          for (int t = 0; t < S::MT; ++t) {
            mma_m16n8k16<T>(part[rt][t], a0, a1, a2, a3, b[t][2 * jj], b[t][2 * jj + 1]);
          }
        }
      }
    }
    if (((kt + 1) & group_mask) == 0 || (!kFull && k0 + S::kKT >= ke) || (kFull && k0 + S::kKT == ke)) {
#pragma unroll
      for (int rt = 0; rt < S::RT; ++rt) {
        float sc[2] = {1.0f, 1.0f};
        if (p.tscale) {
#pragma unroll
          for (int r = 0; r < 2; ++r)
            sc[r] = tile_scale(slot + S::kS + S::cell(warp, rt, u) * 64, g + 8 * r, p.scale_kind);
        }
#pragma unroll
        for (int t = 0; t < S::MT; ++t) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            acc[rt][t][i] = __fadd_rn(acc[rt][t][i], __fmul_rn(sc[i / 2], part[rt][t][i]));
            part[rt][t][i] = 0.0f;
          }
        }
      }
    }
  }
}

// (The shape travels as ints: nvcc's host stubs cannot name a kernel with a
// class-type template argument.)
template <class Dec, class T, int MT_, int RT_, int TPS, int kWarps, int kStages_>
__global__ void __launch_bounds__(32 * kWarps) tiles_mma_kernel(const Params p) {
  using S = TilesMmaShape<Dec, MT_, RT_, TPS, kWarps, kStages_>;
  constexpr int RT = S::RT, MT = S::MT, kStages = S::kStages;
  extern __shared__ uint4 smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem_raw);
  uint32_t* tab = reinterpret_cast<uint32_t*>(smem + kStages * S::kStageBytes);

  const int warp = threadIdx.x >> 5;
  const int64_t row_tiles = (p.N + core::kTileRows - 1) / core::kTileRows;
  const int64_t nt0 = (static_cast<int64_t>(blockIdx.x) * S::kWarps + warp) * RT;
  int64_t nt[RT];  // past N: loads stay in bounds (the last row tile), no stores
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) nt[rt] = nt0 + rt < row_tiles ? nt0 + rt : row_tiles - 1;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * S::kBM;
  const int rows_live = p.M - m0 < S::kBM ? static_cast<int>(p.M - m0) : S::kBM;
  const int K = static_cast<int>(p.K);
  const int kb = static_cast<int>(blockIdx.z) * static_cast<int>(p.k_split);
  const int ke = K - kb > static_cast<int>(p.k_split) ? kb + static_cast<int>(p.k_split) : K;
  const int stages = (ke - kb + S::kKS - 1) / S::kKS;

  TilesCopy<S> cp = tiles_copy<S>(p, nt, m0, rows_live, kb / S::kKT);

  if constexpr (Dec::kTable) Dec::fill(tab, p);
  if (rows_live < S::kBM) {
    // Rows past M stay zero in every slot (their copies are never issued).
    const int dead = (S::kBM - rows_live) * S::kChunks;
    for (int i = threadIdx.x; i < kStages * dead; i += S::kThreads) {
      const int st = i / dead, rest = i % dead;
      const int r = rows_live + rest / S::kChunks, c = rest % S::kChunks;
      *reinterpret_cast<uint4*>(smem + st * S::kStageBytes + S::kA + r * S::kRowBytes + c * 16) =
          make_uint4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) tiles_issue<S>(smem + s * S::kStageBytes, p, cp, s, kb, ke);

  float acc[RT][MT][4] = {};
  float part[RT][MT][4] = {};
  // Decode constants: fixed without zeros, a group's with quantized zeros
  // (read at each group's first tile, and the block's first).
  RowCtx ctx[RT][2];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) ctx[rt][0] = ctx[rt][1] = Dec::ctx(p, 1.0f, 0.0f);
  const bool zeros = p.zcodes != nullptr;
  const int group_mask = (1 << tile_group_shift(p, S::kKT)) - 1;
  int read = 0, write = kStages - 1;  // slots of the stage computed and the stage copied next
  for (int s = 0; s < stages; ++s) {
    ptx::cp_async_wait_group<kStages - 2>();
    __syncthreads();
    tiles_issue<S>(smem + write * S::kStageBytes, p, cp, s + kStages - 1, kb, ke);
    write = write == kStages - 1 ? 0 : write + 1;
    const uint8_t* slot = smem + read * S::kStageBytes;
    read = read == kStages - 1 ? 0 : read + 1;
    const int k_stage = kb + s * S::kKS;
    if (k_stage + S::kKS <= ke) {
      tiles_compute_stage<Dec, T, S, true>(slot, p, tab, k_stage, kb, ke, group_mask, zeros, ctx, acc, part);
    } else {
      tiles_compute_stage<Dec, T, S, false>(slot, p, tab, k_stage, kb, ke, group_mask, zeros, ctx, acc, part);
    }
  }
  ptx::cp_async_wait_group<0>();  // nothing in flight at exit

#pragma unroll
  for (int rt = 0; rt < RT; ++rt) {
    if (nt0 + rt >= row_tiles) break;
#pragma unroll
    for (int t = 0; t < MT; ++t) write_fragment(p, (nt0 + rt) * core::kTileRows, m0 + 8 * t, acc[rt][t]);
  }
}

}  // namespace lowbit::cuda::gemm
