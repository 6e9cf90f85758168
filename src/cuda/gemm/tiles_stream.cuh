// The tiles-layout matmul for small M (docs/gemm.md, "CUDA kernels"): the
// weight streamed from global memory straight into registers, kDepth tiles
// ahead, with no shared-memory round trip and no barrier in the main loop.
//
// out[m, n] = Σ_k A[m, k] · w[n, k], W in the `tiles` layout
// (src/core/weight_format.h): a tile is 16 rows × kKT columns, 512 bytes,
// and lane l's 16 bytes of it are its A fragments of kKT / 16 mma steps, so
// one 16-byte load a lane brings a warp a whole tile.
//
// Block: kWarps warps; warp w owns RT row tiles from (blockIdx.x · kWarps +
// w) · RT; the block owns the M tile [m0, m0 + 8·MT) and the K range
// [kb, ke) of split blockIdx.z (the host keeps the range small enough for
// its activations to fit in shared memory). The block's activations are
// staged once, at the start, issued just before the first kDepth tiles of
// every warp:
//
//   shared: lookup table (4-bit tables: [256][32] pairs, else unused)
//           A [rows of M present][krow] halves, krow = k_split rounded up to
//             64; chunks of 8 halves swizzled (swizzle128), so an
//             ldmatrix of 8 rows hits 8 distinct groups of 4 banks. Rows
//             past M are not stored: their lanes read the last present row
//             (its products land in output columns that are never written).
//
// Per tile, per row tile: one 16-byte load (issued kDepth tiles ahead into a
// ring of registers), the decode of 16 pairs, kKT / 16 mma steps per n8 tile
// of M; one ldmatrix.x4 of A serves two steps of all RT row tiles. Each
// group's sums are scaled once, in fp32, at the group's last tile; its scales
// (and zero codes) are loaded with the tile's weights, kDepth tiles ahead.
// It runs fewer instructions a tile than the cp.async kernel of
// tiles_mma.cuh and is limited by the latency of each warp's chain
// (long-scoreboard and fixed-latency stalls), not by DRAM; more warps an
// SM, a deeper prefetch or a shared-memory ring were no faster. With K split,
// the warp lets the reduction kernel launch (programmatic dependent launch)
// before writing its partial sums.
#pragma once

#include <cstdint>

#include "core/weight_format.h"
#include "cuda/common/ptx/copy.cuh"
#include "cuda/common/ptx/mma.cuh"
#include "cuda/common/ptx/sync.cuh"
#include "cuda/common/swizzle.cuh"
#include "cuda/gemm/decoders.cuh"
#include "cuda/gemm/kernel.cuh"
#include "cuda/gemm/mma.cuh"
#include "cuda/gemm/params.h"
#include "cuda/gemm/shapes.h"
#include "cuda/gemm/tiles_mma.cuh"

namespace lowbit::cuda::gemm {

template <class Dec, int MT_, int RT_, int kWarps_, int kDepth_>
struct TilesStreamShape {
  static constexpr int MT = MT_, RT = RT_, kWarps = kWarps_, kDepth = kDepth_;
  static constexpr int kKT = core::tile_k(Dec::kBits);  // columns of a tile
  static constexpr int kSteps = kKT / 16;               // mma k16 steps of a tile
  static constexpr int kBM = 8 * MT;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kTabBytes = Dec::kTable ? 256 * 32 * 4 : 0;
  // A's row in shared memory: whole groups of 8 chunks (the swizzle).
  static constexpr int kRowAlign = 64;
  static_assert(kDepth * kKT % 64 == 0, "a ring pass spans whole swizzle groups of A");
  static_assert(kSteps % 2 == 0, "ldmatrix.x4 feeds two steps");
};

// Stages the block's activations A[m0 .. m0 + rows, kb .. ke) into `sa`
// (rows of krow halves, chunks swizzled; zeros past ke) and commits them as
// one cp.async group.
template <int kThreads>
__device__ __forceinline__ void stream_stage_a(uint8_t* sa, const Params& p, int64_t m0, int rows, int kb, int ke,
                                               int krow) {
  const int chunks_row = krow / 8;
  const int total = rows * chunks_row;
  for (int i = threadIdx.x; i < total; i += kThreads) {
    const int r = i / chunks_row, c = i - r * chunks_row;
    const int k = kb + c * 8;
    const bool live = k < ke;
    ptx::cp_async16(sa + (r * krow + (swizzle128(r, c) << 3)) * 2, live ? p.A + (m0 + r) * p.lda + k : p.A,
                    live ? 16 : 0);
  }
  ptx::cp_async_commit_group();
}

// This lane's ldmatrix addresses of the staged A: per n8 tile of M, its row
// (rows past M read the last present row: their products land in output
// columns never written) at the two swizzled chunk offsets it needs, chunk
// 8·u + (4·h + lane / 8) of row r being at 8·u + swizzle128(r, 4·h + lane / 8).
template <int MT>
__device__ __forceinline__ void stream_a_lanes(uint32_t (&pa)[MT][2], const uint8_t* sa, int rows_live, int krow) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int r0 = 8 * mt + (lane & 7);
    const int r = r0 < rows_live ? r0 : rows_live - 1;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      pa[mt][h] = ptx::smem_addr(sa) + r * krow * 2 + (swizzle128(r, 4 * h + (lane >> 3)) << 4);
  }
}

// The mma steps of one tile column: the RT tiles' fragments w (16 bytes a
// lane each) against the A chunks from chunk cc0 past pa (a multiple of 4;
// a constant after unrolling) into part.
template <class Dec, class T, int MT, int RT>
__device__ __forceinline__ void stream_tile_mma(const uint32_t (&w)[RT][4], const uint32_t (&pa)[MT][2], int cc0,
                                                const RowCtx (&ctx)[RT][2], const Params& p, const uint32_t* tab,
                                                float (&part)[RT][MT][4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < core::tile_k(Dec::kBits) / 16; j += 2) {
    const int cc = cc0 + 2 * j;  // 4 chunks: two k16 steps
    uint32_t b[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ptx::ldmatrix_x4(b[mt], pa[mt][(cc >> 2) & 1] + (cc & ~7) * 16);
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int rho = 4 * (j + jj);
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) {
        const uint32_t a0 = Dec::pair(w[rt], rho, ctx[rt][0], p, tab, lane);
        const uint32_t a1 = Dec::pair(w[rt], rho + 1, ctx[rt][1], p, tab, lane);
        const uint32_t a2 = Dec::pair(w[rt], rho + 2, ctx[rt][0], p, tab, lane);
        const uint32_t a3 = Dec::pair(w[rt], rho + 3, ctx[rt][1], p, tab, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_m16n8k16<T>(part[rt][mt], a0, a1, a2, a3, b[mt][2 * jj], b[mt][2 * jj + 1]);
      }
    }
  }
}

// acc += s · part for row tile rt (s0 for rows g, s1 for g + 8); part = 0.
template <int MT, int RT>
__device__ __forceinline__ void stream_flush(float (&acc)[RT][MT][4], float (&part)[RT][MT][4], int rt, float s0,
                                             float s1) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      acc[rt][mt][e] = __fmaf_rn(e < 2 ? s0 : s1, part[rt][mt][e], acc[rt][mt][e]);
      part[rt][mt][e] = 0.0f;
    }
  }
}

// A group's decode constants with quantized zeros: the zero codes of rows g
// (low byte) and g + 8 (second byte).
template <class Dec>
__device__ __forceinline__ void stream_zero_ctx(RowCtx (&ctx)[2], uint32_t codes, const Params& p) {
#pragma unroll
  for (int r = 0; r < 2; ++r) ctx[r] = Dec::ctx(p, 1.0f, int_code_value((codes >> (8 * r)) & 0xffu, p));
}

// Writes the warp's sums (row tiles past N: none).
template <int MT, int RT>
__device__ __forceinline__ void stream_write(const Params& p, int64_t nt0, int64_t row_tiles, int64_t m0,
                                             const float (&acc)[RT][MT][4]) {
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) {
    if (nt0 + rt >= row_tiles) break;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) write_fragment(p, (nt0 + rt) * core::kTileRows, m0 + 8 * mt, acc[rt][mt]);
  }
}

template <class Dec, class T, int MT_, int RT_, int kWarps, int kDepth, int kBlocks>
__global__ void __launch_bounds__(32 * kWarps, kBlocks) tiles_stream_kernel(const Params p) {
  using S = TilesStreamShape<Dec, MT_, RT_, kWarps, kDepth>;
  constexpr int RT = S::RT, MT = S::MT, D = S::kDepth, KT = S::kKT;
  extern __shared__ uint4 smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem_raw);
  uint32_t* tab = reinterpret_cast<uint32_t*>(smem);
  uint8_t* sa = smem + S::kTabBytes;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  const int64_t row_tiles = (p.N + core::kTileRows - 1) / core::kTileRows;
  const int64_t nt0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * RT;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * S::kBM;
  const int rows_live = p.M - m0 < S::kBM ? static_cast<int>(p.M - m0) : S::kBM;
  const int kb = static_cast<int>(blockIdx.z) * static_cast<int>(p.k_split);
  const int ke = p.K - kb > p.k_split ? kb + static_cast<int>(p.k_split) : static_cast<int>(p.K);
  const int ntiles = (ke - kb + KT - 1) / KT;
  const int krow = static_cast<int>((p.k_split + S::kRowAlign - 1) / S::kRowAlign) * S::kRowAlign;
  const int kt0 = kb / KT;

  // Where each row tile's next tiles, scales and zero codes are read (row
  // tiles past N read the last one and store nothing).
  const uint8_t* wp[RT];
  uint32_t srow[RT];  // byte offset of row n0 + g's scale in a group's slab row
  uint32_t zrow[RT];
  const int sb = scale_bytes(p.scale_kind);
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) {
    const int64_t nt = nt0 + rt < row_tiles ? nt0 + rt : row_tiles - 1;
    wp[rt] = p.qweight + (nt * p.k_tiles + kt0) * core::kTileBytes + lane * 16;
    srow[rt] = static_cast<uint32_t>((nt * core::kTileRows + g) * sb);
    zrow[rt] = static_cast<uint32_t>(nt * core::kTileRows + g);
  }
  const auto* tscale = static_cast<const uint8_t*>(p.tscale);
  const uint32_t s_stride = static_cast<uint32_t>(p.np * sb);  // one group's scales (host-checked < 2^31)
  const uint32_t z_stride = static_cast<uint32_t>(p.np);
  const bool scaled = tscale != nullptr, zeros = p.zcodes != nullptr;
  const int shift = tile_group_shift(p, KT);
  const int gmask = (1 << shift) - 1;

  // The ring: tile t's weights in slot t % D, with the scales of its group
  // when t is the group's last tile here (flushed there), and the zero
  // codes when t is the group's first here.
  uint4 wr[D][RT];
  uint32_t sr[D][RT][2] = {};
  uint32_t zr[D][RT] = {};
  auto flushes = [&](int t) { return ((kt0 + t + 1) & gmask) == 0 || t == ntiles - 1; };
  auto opens = [&](int t) { return ((kt0 + t) & gmask) == 0 || t == 0; };
  // Issues tile t (< ntiles) into slot i (a constant after unrolling); w
  // points at tile t's weights less `off` bytes.
  auto issue = [&](int i, int t, const uint8_t* const(&w)[RT], int off) {
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) wr[i][rt] = ptx::ld_global_nc_na_v4(w[rt] + off);
    if (scaled && flushes(t)) {
      const uint8_t* s = tscale + static_cast<uint32_t>((kt0 + t) >> shift) * s_stride;
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) {
        sr[i][rt][0] = load_scale_bits(s + srow[rt], sb);
        sr[i][rt][1] = load_scale_bits(s + srow[rt] + 8 * sb, sb);
      }
    }
    if (zeros && opens(t)) {
      const uint8_t* z = p.zcodes + static_cast<uint32_t>((kt0 + t) >> shift) * z_stride;
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) {
        zr[i][rt] = __ldg(z + zrow[rt]) | (static_cast<uint32_t>(__ldg(z + zrow[rt] + 8)) << 8);
      }
    }
  };

  // The activations first, then the weights, all in flight together: A
  // queued behind the first tiles arrived last and held back the first mma.
  stream_stage_a<S::kThreads>(sa, p, m0, rows_live, kb, ke, krow);
#pragma unroll
  for (int i = 0; i < D; ++i) {
    if (i < ntiles) issue(i, i, wp, i * core::kTileBytes);
  }
  if constexpr (Dec::kTable) Dec::fill(tab, p);

  uint32_t pa[MT][2];  // shared addresses
  stream_a_lanes<MT>(pa, sa, rows_live, krow);

  float acc[RT][MT][4] = {};
  float part[RT][MT][4] = {};
  RowCtx ctx[RT][2];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) ctx[rt][0] = ctx[rt][1] = Dec::ctx(p, 1.0f, 0.0f);

  ptx::cp_async_wait_group<0>();
  __syncthreads();

  const uint8_t* wnext[RT];  // tile tb + D of each row tile
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) wnext[rt] = wp[rt] + D * core::kTileBytes;
  for (int tb = 0; tb < ntiles; tb += D) {
#pragma unroll
    for (int i = 0; i < D; ++i) {
      const int t = tb + i;
      if (t >= ntiles) break;
      uint32_t w[RT][4];
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) {
        w[rt][0] = wr[i][rt].x, w[rt][1] = wr[i][rt].y, w[rt][2] = wr[i][rt].z, w[rt][3] = wr[i][rt].w;
      }
      if (zeros && opens(t)) {
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) stream_zero_ctx<Dec>(ctx[rt], zr[i][rt], p);
      }
      stream_tile_mma<Dec, T, MT, RT>(w, pa, i * KT / 8, ctx, p, tab, part);
      if (flushes(t)) {
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
          const float s0 = scaled ? scale_value(sr[i][rt][0], p.scale_kind) : 1.0f;
          const float s1 = scaled ? scale_value(sr[i][rt][1], p.scale_kind) : 1.0f;
          stream_flush<MT, RT>(acc, part, rt, s0, s1);
        }
      }
      // Slot i is free: tile t + D into it. (Issuing it before tile t's
      // math, or in bursts of several slots, was no faster.)
      if (t + D < ntiles) issue(i, t + D, wnext, i * core::kTileBytes);
    }
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) wnext[rt] += D * core::kTileBytes;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      pa[mt][0] += D * KT * 2;
      pa[mt][1] += D * KT * 2;
    }
  }

  // The split-K reduction (a programmatic dependent) may launch now; it waits for this grid.
  ptx::griddepcontrol_launch_dependents();
  stream_write<MT, RT>(p, nt0, row_tiles, m0, acc);
}

}  // namespace lowbit::cuda::gemm
