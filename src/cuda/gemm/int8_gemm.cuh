// The int8 GEMMs of every GPU (docs/int8.md, "Backends"): the parameters and
// epilogue both kernels share, and the mma.sync kernel (sm_80+).
//
// The mma.sync kernel: one CTA of 8 warps computes a 128 x 128 tile of
// a[M, K] · b[N, K]^T over K blocks of 128 bytes, each warp 64 x 32 of it.
//   - a [128 x 128 bytes] and b [128 x 128 bytes] tiles pass through 3
//     shared-memory stages (cp.async when a and b start 16-byte aligned and
//     K % 16 == 0, else byte loads), rows swizzled so ldmatrix reads them
//     conflict-free; bytes past K are zeros, so every K is exact;
//   - mma.sync m16n8k32 on the s8 bytes into s32 accumulators (exact for
//     K <= kInt8GemmMaxK);
//   - the epilogue writes the int32 sums, or their dequantization
//     (int8_mm_dequant's value, + bias) in out's dtype.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/float_convert.h"
#include "core/hd.h"
#include "core/quant_math.h"
#include "cuda/common/convert.cuh"
#include "cuda/common/ptx/copy.cuh"
#include "cuda/common/ptx/mma.cuh"
#include "cuda/gemm/byte_tiles.cuh"
#include "lowbit/tensor.h"

namespace lowbit::cuda::i8g {

constexpr int kBK = 128;  // K bytes per stage (both kernels)

// bias's element type.
enum class BiasType : int { none, f32, f16, bf16 };

inline BiasType bias_type_of(const TensorRef& bias) {
  if (!bias.present()) return BiasType::none;
  switch (bias.dtype) {
    case DType::f16: return BiasType::f16;
    case DType::bf16: return BiasType::bf16;
    default: return BiasType::f32;  // the front ends admit float dtypes only
  }
}

struct Params {
  const int8_t* a;         // [rows, K]
  const int8_t* b;         // [N, K]
  void* out;               // [rows, N]: int32, or the dequantized dtype
  const float* row_stats;  // [rows] (dequantized outputs only)
  const float* col_stats;  // [N]
  const void* bias;        // [N] or null
  BiasType bias_type;
  bool stat_pairs;  // col_stats and bias read in aligned pairs (8 and 2 * element bytes)
  int64_t rows, N, K;
  int kb;          // K blocks
  int a_box_rows;  // sm_90a: the rows of a's TMA box (the tile's, or a's rows rounded up to 8 when fewer)
};

// bias[n] as a float (0 without a bias).
__device__ __forceinline__ float bias_value(const void* bias, BiasType type, int64_t n) {
  switch (type) {
    case BiasType::f32: return __ldg(static_cast<const float*>(bias) + n);
    case BiasType::f16: return core::to_f32(static_cast<const core::Half*>(bias)[n]);
    case BiasType::bf16: return core::to_f32(static_cast<const core::BFloat16*>(bias)[n]);
    default: return 0.0f;
  }
}
__device__ __forceinline__ float bias_at(const Params& p, int64_t n) { return bias_value(p.bias, p.bias_type, n); }

// Columns n and n + 1 (when inside N) of row m: the sums c0, c1 as int32, or
// their dequantization with the row's statistic rs (+ bias) in Out. pair_ok:
// out's rows hold whole aligned pairs (N even, out aligned to a pair).
template <class Out>
__device__ __forceinline__ void store_pair(const Params& p, int64_t m, int64_t n, float rs, int32_t c0, int32_t c1,
                                           bool pair_ok) {
  if (n >= p.N) return;
  const bool second = n + 1 < p.N;
  Out* dst = static_cast<Out*>(p.out) + m * p.N + n;
  if constexpr (std::is_same_v<Out, int32_t>) {
    if (pair_ok && second) {
      *reinterpret_cast<int2*>(dst) = make_int2(c0, c1);
    } else {
      dst[0] = c0;
      if (second) dst[1] = c1;
    }
  } else {
    float v[2] = {core::int8_mm_dequant_value(c0, rs, __ldg(p.col_stats + n)),
                  second ? core::int8_mm_dequant_value(c1, rs, __ldg(p.col_stats + n + 1)) : 0.0f};
    if (p.bias != nullptr) {
      v[0] = core::add_rn(v[0], bias_at(p, n));
      if (second) v[1] = core::add_rn(v[1], bias_at(p, n + 1));
    }
    Out y[2];
    from_floats(v, y);
    if (pair_ok && second) {
      if constexpr (sizeof(Out) == 4) {
        *reinterpret_cast<float2*>(dst) = make_float2(y[0], y[1]);
      } else {
        *reinterpret_cast<uint32_t*>(dst) = uint32_t{y[0].bits} | (uint32_t{y[1].bits} << 16);
      }
    } else {
      dst[0] = y[0];
      if (second) dst[1] = y[1];
    }
  }
}

// bias at this thread's columns of a row (n_lane, n_lane + 1 of each
// 8-column group: the wgmma and mma.sync accumulator layouts), as floats.
template <int kGroups>
__device__ __forceinline__ void bias_columns(const Params& p, int64_t n_lane, float (&bv)[2 * kGroups]) {
  switch (p.bias_type) {
    case BiasType::f32:
#pragma unroll
      for (int q = 0; q < kGroups; ++q) {
        const float2 b = __ldg(reinterpret_cast<const float2*>(static_cast<const float*>(p.bias) + n_lane + 8 * q));
        bv[2 * q] = b.x;
        bv[2 * q + 1] = b.y;
      }
      return;
    case BiasType::f16:
    case BiasType::bf16: {
      const auto* b16 = static_cast<const uint16_t*>(p.bias) + n_lane;
#pragma unroll
      for (int q = 0; q < kGroups; ++q) {
        const uint32_t w = __ldg(reinterpret_cast<const unsigned int*>(b16 + 8 * q));
        const uint16_t lo = static_cast<uint16_t>(w & 0xffffu), hi = static_cast<uint16_t>(w >> 16);
        if (p.bias_type == BiasType::f16) {
          bv[2 * q] = f16_to_f32_hw(lo);
          bv[2 * q + 1] = f16_to_f32_hw(hi);
          if (bv[2 * q] != bv[2 * q] || bv[2 * q + 1] != bv[2 * q + 1]) {  // NaN payloads as the CPU keeps them
            core::Half h0, h1;
            h0.bits = lo;
            h1.bits = hi;
            bv[2 * q] = core::to_f32(h0);
            bv[2 * q + 1] = core::to_f32(h1);
          }
        } else {
          bv[2 * q] = __uint_as_float(uint32_t{lo} << 16);
          bv[2 * q + 1] = __uint_as_float(uint32_t{hi} << 16);
        }
      }
      return;
    }
    default: return;
  }
}

// One row's dequantized outputs at this thread's 2 * kGroups columns (pairs
// n_lane + 8 q, + 1, all inside N, out's rows pair-aligned): c the int32 sums,
// cs the columns' col_stats, rs the row's statistic. One conversion (and one
// NaN check) for the whole row segment, one 4- or 8-byte store a pair.
template <class Out, int kGroups>
__device__ __forceinline__ void dequant_row_pairs(const Params& p, int64_t m, int64_t n_lane, float rs,
                                                  const int32_t (&c)[2 * kGroups], const float (&cs)[2 * kGroups]) {
  float v[2 * kGroups];
#pragma unroll
  for (int i = 0; i < 2 * kGroups; ++i) v[i] = core::int8_mm_dequant_value(c[i], rs, cs[i]);
  if (p.bias != nullptr) {
    float bv[2 * kGroups];
    bias_columns<kGroups>(p, n_lane, bv);
#pragma unroll
    for (int i = 0; i < 2 * kGroups; ++i) v[i] = core::add_rn(v[i], bv[i]);
  }
  Out y[2 * kGroups];
  from_floats(v, y);
  Out* row = static_cast<Out*>(p.out) + m * p.N + n_lane;
#pragma unroll
  for (int q = 0; q < kGroups; ++q) {
    if constexpr (sizeof(Out) == 4) {
      *reinterpret_cast<float2*>(row + 8 * q) = make_float2(y[2 * q], y[2 * q + 1]);
    } else {
      *reinterpret_cast<uint32_t*>(row + 8 * q) = uint32_t{y[2 * q].bits} | (uint32_t{y[2 * q + 1].bits} << 16);
    }
  }
}

// The row statistic of row m for Out (unused for int32 sums).
template <class Out>
__device__ __forceinline__ float row_stat(const Params& p, int64_t m) {
  if constexpr (std::is_same_v<Out, int32_t>) {
    return 0.0f;
  } else {
    return __ldg(p.row_stats + m);
  }
}

// ---------------------------------------------------------------- mma.sync
namespace tiles {

constexpr int kBM = 128, kBN = 128, kStages = 3;
constexpr int kWarpsM = 2, kWarpsN = 4;
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kWarpM = kBM / kWarpsM;  // 64 rows: 4 m16 tiles
constexpr int kWarpN = kBN / kWarpsN;  // 32 columns: 4 n8 tiles
constexpr int kTilesM = kWarpM / 16;
constexpr int kTilesN = kWarpN / 8;
constexpr int kTileA = kBM * kBK;  // bytes
constexpr int kTileB = kBN * kBK;
constexpr size_t kSmem = kStages * (kTileA + kTileB);

// K block j of a (the CTA's rows) and b (its columns) into one stage: each
// thread copies chunk tid % 8 of rows tid / 8 + 32 i.
template <bool kAsync>
__device__ __forceinline__ void load_stage(const Params& p, int64_t m0, int64_t n0, int j, uint8_t* sa, uint8_t* sb) {
  constexpr int kChunks = kBK / 16, kRowStep = kThreads / kChunks;
  const int c = threadIdx.x % kChunks, r0 = threadIdx.x / kChunks;
  const int64_t k = static_cast<int64_t>(j) * kBK + c * 16;
  const int bytes = static_cast<int>(max(int64_t{0}, min(p.K - k, int64_t{16})));
  const auto* a = reinterpret_cast<const uint8_t*>(p.a);
  const auto* b = reinterpret_cast<const uint8_t*>(p.b);
#pragma unroll
  for (int r = r0; r < kBM; r += kRowStep) {
    const bool in = m0 + r < p.rows && bytes > 0;
    copy_chunk<kAsync>(tile_at(sa, r, c), in ? a + (m0 + r) * p.K + k : a, in ? bytes : 0);
  }
#pragma unroll
  for (int r = r0; r < kBN; r += kRowStep) {
    const bool in = n0 + r < p.N && bytes > 0;
    copy_chunk<kAsync>(tile_at(sb, r, c), in ? b + (n0 + r) * p.K + k : b, in ? bytes : 0);
  }
}

// acc += this warp's 64 x 32 products of one K block (stage sa, sb).
__device__ __forceinline__ void block_products(const uint8_t* sa, const uint8_t* sb, int wm, int wn, int lane,
                                               int32_t (&acc)[kTilesM][kTilesN][4]) {
#pragma unroll
  for (int ks = 0; ks < kBK / 32; ++ks) {
    uint32_t af[kTilesM][4];
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) ldmatrix_a_k32(sa, wm * kWarpM + i * 16, ks, lane, af[i]);
    uint32_t bf[kTilesN][2];
#pragma unroll
    for (int jp = 0; jp < kTilesN / 2; ++jp) {
      ldmatrix_b_k32(sb, wn * kWarpN + jp * 16, ks, lane, bf[2 * jp], bf[2 * jp + 1]);
    }
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) {
#pragma unroll
      for (int jn = 0; jn < kTilesN; ++jn)
        ptx::mma_m16n8k32_s8(acc[i][jn], af[i][0], af[i][1], af[i][2], af[i][3], bf[jn][0], bf[jn][1]);
    }
  }
}

// Grid: (M tiles, N tiles).
template <class Out, bool kAsync>
__global__ void __launch_bounds__(kThreads) int8_gemm_tiles(const Params p, bool pair_ok) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBN;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  auto stage_a = [&](int s) { return smem + s * (kTileA + kTileB); };
  auto stage_b = [&](int s) { return smem + s * (kTileA + kTileB) + kTileA; };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < p.kb) load_stage<kAsync>(p, m0, n0, s, stage_a(s), stage_b(s));
    ptx::cp_async_commit_group();  // empty groups too: the wait count stays uniform
  }
  int32_t acc[kTilesM][kTilesN][4] = {};
  for (int j = 0; j < p.kb; ++j) {
    ptx::cp_async_wait_group<kStages - 2>();
    __syncthreads();  // block j visible; every warp done with block j - 1's stage
    const int next = j + kStages - 1;
    if (next < p.kb) load_stage<kAsync>(p, m0, n0, next, stage_a(next % kStages), stage_b(next % kStages));
    ptx::cp_async_commit_group();
    block_products(stage_a(j % kStages), stage_b(j % kStages), wm, wn, lane, acc);
  }
  ptx::cp_async_wait_group<0>();

  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < kTilesM; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = m0 + wm * kWarpM + i * 16 + g + h * 8;
      if (m >= p.rows) continue;
      const float rs = row_stat<Out>(p, m);
#pragma unroll
      for (int jn = 0; jn < kTilesN; ++jn) {
        const int64_t n = n0 + wn * kWarpN + jn * 8 + 2 * t;
        store_pair<Out>(p, m, n, rs, acc[i][jn][2 * h], acc[i][jn][2 * h + 1], pair_ok);
      }
    }
  }
}

}  // namespace tiles

}  // namespace lowbit::cuda::i8g
