// The block-scaled FP8 GEMM kernel (docs/fp8_gemm.md, "Backends"): one CTA of
// 8 warps computes a 64 x 128 tile of out over 128-wide K blocks, the K block
// being the scale block, so each block's fp32 partial sums are scaled by
// a_s[m, kb] * b_s[n / 128, kb] and added to the running sums before the next.
//
//   - a [64 x 128 bytes] and b [128 x 128 bytes] tiles pass through 3 shared
//     memory stages (cp.async, or plain loads when a or b is not 16-byte
//     aligned), rows swizzled (swizzle128) so ldmatrix reads them conflict-free;
//   - kFp8Mma on sm_89+: mma.sync m16n8k32 on the e4m3 bytes; otherwise (and
//     always in sm_80 code) the bytes decoded to f16 (exact: every e4m3 value
//     is an f16 value) for two m16n8k16 steps, whose sums are fp32 (the FP8
//     instruction's accumulator keeps fewer bits);
//   - every row of the tile carries a code: the expert whose b it is
//     multiplied by, or zeros, NaN, or nothing (past the rows). The CTA runs
//     one pass per distinct expert among its rows (one pass when the router
//     padded each expert's run to 64 rows), reading m_indices and masked_m on
//     the device only.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "core/hd.h"
#include "cuda/common/convert.cuh"
#include "cuda/gemm/byte_tiles.cuh"
#include "cuda/common/ptx/copy.cuh"
#include "cuda/common/ptx/mma.cuh"

namespace lowbit::cuda::fp8g {

constexpr int kBM = 64;   // rows of a (and out) per CTA
constexpr int kBN = 128;  // rows of b (columns of out) per CTA: one b_s row
constexpr int kBK = 128;  // K per stage: one scale block
constexpr int kStages = 3;
constexpr int kWarpsM = 2, kWarpsN = 4;
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kWarpM = kBM / kWarpsM;  // 32 rows: 2 m16 tiles
constexpr int kWarpN = kBN / kWarpsN;  // 32 columns: 4 n8 tiles
constexpr int kTilesM = kWarpM / 16;
constexpr int kTilesN = kWarpN / 8;
constexpr int kChunks = kBK / 16;  // 16-byte chunks of a tile row
constexpr int kTileA = kBM * kBK;  // bytes
constexpr int kTileB = kBN * kBK;
constexpr size_t kSmem = kStages * (kTileA + kTileB) + kBM * sizeof(int);

// Row codes besides an expert id (>= 0).
constexpr int kZero = -1;  // padding (-1) or past masked_m: zeros
constexpr int kSkip = -2;  // past a's rows, or already written
constexpr int kNaN = -3;   // an m_indices entry outside [-1, E): NaN

struct Params {
  const uint8_t* a;          // [z][rows, K]
  const float* a_s;          // [z][rows, kb]
  const uint8_t* b;          // [E][N, K]
  const float* b_s;          // [E][ceil(N / 128), kb]
  const float* bias;         // [N] or null
  void* out;                 // [z][rows, N]
  const int32_t* m_indices;  // [rows]: the contiguous layout, else null
  const int32_t* masked_m;   // [E]: the masked layout (z = expert), else null
  int64_t rows, N, K;
  int kb;       // K blocks
  int experts;  // E
};

// Whether every row's code is 0 (or kSkip past a's rows): one b, no row codes to read.
__device__ __forceinline__ bool is_plain(const Params& p) { return p.m_indices == nullptr && p.masked_m == nullptr; }

// The code of row m of slice z (see kZero..kNaN).
__device__ __forceinline__ int row_code(const Params& p, int64_t z, int64_t m) {
  if (m >= p.rows) return kSkip;
  if (p.masked_m != nullptr) {
    const int64_t valid = min(max(static_cast<int64_t>(p.masked_m[z]), int64_t{0}), p.rows);
    return m < valid ? static_cast<int>(z) : kZero;
  }
  if (p.m_indices != nullptr) {
    const int id = p.m_indices[m];
    if (id == -1) return kZero;
    return id >= 0 && id < p.experts ? id : kNaN;
  }
  return 0;
}

template <class Out>
__device__ __forceinline__ void store(Out* out, float v) {
  const float in[1] = {v};
  Out y[1];
  from_floats(in, y);
  *out = y[0];
}

// Rows coded kZero or kNaN: their columns of this CTA's N tile.
template <class Out>
__device__ void fill_special_rows(const Params& p, Out* out, const int* codes, int64_t m0, int64_t n0) {
  for (int i = threadIdx.x; i < kBM * kBN; i += kThreads) {
    const int r = i / kBN, c = i % kBN;
    const int code = codes[r];
    if ((code != kZero && code != kNaN) || n0 + c >= p.N) continue;
    store(out + (m0 + r) * p.N + n0 + c, code == kZero ? 0.0f : __int_as_float(0x7fc00000));
  }
}

// K block j of a (rows of expert e) and b (the CTA's N tile) into one
// stage: each thread copies chunk tid % 8 of rows tid / 8 + 32 i.
template <bool kAsync>
__device__ __forceinline__ void load_stage(const Params& p, const uint8_t* a, const uint8_t* b, const int* codes, int e,
                                           int64_t m0, int64_t n0, int j, uint8_t* sa, uint8_t* sb) {
  constexpr int kRowStep = kThreads / kChunks;
  const int c = threadIdx.x % kChunks, r0 = threadIdx.x / kChunks;
  const int64_t k = static_cast<int64_t>(j) * kBK + c * 16;
  const bool in_k = k < p.K;  // K % 16 == 0: a chunk is all in or all out
#pragma unroll
  for (int r = r0; r < kBM; r += kRowStep) {
    const bool valid = in_k && codes[r] == e;
    copy_chunk<kAsync>(tile_at(sa, r, c), valid ? a + (m0 + r) * p.K + k : a, valid ? 16 : 0);
  }
#pragma unroll
  for (int r = r0; r < kBN; r += kRowStep) {
    const bool valid = in_k && n0 + r < p.N;
    copy_chunk<kAsync>(tile_at(sb, r, c), valid ? b + (n0 + r) * p.K + k : b, valid ? 16 : 0);
  }
}

// Two e4m3 codes of w (bytes picked by byte_perm selector sel: 0x1404 for
// bytes 0, 1; 0x3424 for bytes 2, 3) as f16x2, exactly: the 7 magnitude bits
// become f16's exponent and top mantissa bits, times 2^8 for the bias
// difference (f16 subnormals included); code 0x7f / 0xff becomes NaN.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t w, uint32_t sel) {
  const uint32_t x = __byte_perm(w, 0, sel);  // each code in the high byte of its half
  const uint32_t h = ((x & 0x7f007f00u) >> 1) | (x & 0x80008000u);
  __half2 v;
  memcpy(&v, &h, 4);
  v = __hmul2(v, __float2half2_rn(256.0f));
  uint32_t r;
  memcpy(&r, &v, 4);
  const uint32_t nan = __byte_perm(__vcmpeq4(w & 0x7f7f7f7fu, 0x7f7f7f7fu), 0, sel) & 0x7e007e00u;
  return r | nan;  // 480 (0x5f80) | 0x7e00: exponent all ones, mantissa non-zero
}

// c += a[16 x 32] · b[32 x 8] on e4m3 fragments (ptx::mma_m16n8k32_e4m3's layout).
template <bool kFp8Mma>
__device__ __forceinline__ void mma_k32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (kFp8Mma) {
    ptx::mma_m16n8k32_e4m3(c, a[0], a[1], a[2], a[3], b0, b1);
    return;
  }
#endif
  // Register w's K 4t..4t+3 become m16n8k16's K 2t, 2t+1 (low pair) and
  // 2t+8, 2t+9 (high pair), the same permutation for a and b: the dot
  // products are unchanged.
  constexpr uint32_t kLo = 0x1404, kHi = 0x3424;
  ptx::mma_m16n8k16_f16(c, e4m3x2_to_f16x2(a[0], kLo), e4m3x2_to_f16x2(a[1], kLo), e4m3x2_to_f16x2(a[0], kHi),
                        e4m3x2_to_f16x2(a[1], kHi), e4m3x2_to_f16x2(b0, kLo), e4m3x2_to_f16x2(b0, kHi));
  ptx::mma_m16n8k16_f16(c, e4m3x2_to_f16x2(a[2], kLo), e4m3x2_to_f16x2(a[3], kLo), e4m3x2_to_f16x2(a[2], kHi),
                        e4m3x2_to_f16x2(a[3], kHi), e4m3x2_to_f16x2(b1, kLo), e4m3x2_to_f16x2(b1, kHi));
}

// part = this warp's 32 x 32 products of one K block (stage sa, sb), in fp32.
template <bool kFp8Mma>
__device__ __forceinline__ void block_products(const uint8_t* sa, const uint8_t* sb, int wm, int wn, int lane,
                                               float (&part)[kTilesM][kTilesN][4]) {
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
      for (int jn = 0; jn < kTilesN; ++jn) mma_k32<kFp8Mma>(part[i][jn], af[i], bf[jn][0], bf[jn][1]);
    }
  }
}

// a_s of tile row r at K block j; 0 for rows this pass does not compute.
__device__ __forceinline__ float row_scale(const Params& p, const float* a_s, const int* codes, int e, int64_t m0,
                                           int r, int j) {
  return codes[r] == e ? __ldg(a_s + (m0 + r) * p.kb + j) : 0.0f;
}

// The tile's rows of expert e: every K block through the stages, each
// block's fp32 sums scaled into acc, then out (+ bias) for those rows.
template <class Out, bool kAsync, bool kFp8Mma>
__device__ void gemm_pass(const Params& p, const uint8_t* a, const float* a_s, Out* out, const int* codes, int e,
                          int64_t m0, int64_t n0, uint8_t* smem) {
  const uint8_t* b = p.b + static_cast<int64_t>(e) * p.N * p.K;
  const float* b_s = p.b_s + (static_cast<int64_t>(e) * core::ceil_div(p.N, kBN) + n0 / kBN) * p.kb;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int g = lane / 4, t = lane % 4;
  auto stage_a = [&](int s) { return smem + s * (kTileA + kTileB); };
  auto stage_b = [&](int s) { return smem + s * (kTileA + kTileB) + kTileA; };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < p.kb) load_stage<kAsync>(p, a, b, codes, e, m0, n0, s, stage_a(s), stage_b(s));
    ptx::cp_async_commit_group();  // empty groups too: the wait count stays uniform
  }
  float acc[kTilesM][kTilesN][4] = {};
  for (int j = 0; j < p.kb; ++j) {
    ptx::cp_async_wait_group<kStages - 2>();
    __syncthreads();  // block j visible; every warp done with block j - 1's stage
    const int next = j + kStages - 1;
    if (next < p.kb)
      load_stage<kAsync>(p, a, b, codes, e, m0, n0, next, stage_a(next % kStages), stage_b(next % kStages));
    ptx::cp_async_commit_group();

    const float sb = __ldg(b_s + j);
    float sa[kTilesM][2];
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) {
      const int r = wm * kWarpM + i * 16 + g;
      sa[i][0] = row_scale(p, a_s, codes, e, m0, r, j) * sb;
      sa[i][1] = row_scale(p, a_s, codes, e, m0, r + 8, j) * sb;
    }
    float part[kTilesM][kTilesN][4] = {};
    block_products<kFp8Mma>(stage_a(j % kStages), stage_b(j % kStages), wm, wn, lane, part);
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) {
#pragma unroll
      for (int jn = 0; jn < kTilesN; ++jn) {
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[i][jn][q] += part[i][jn][q] * sa[i][q / 2];
      }
    }
  }
  ptx::cp_async_wait_group<0>();

#pragma unroll
  for (int i = 0; i < kTilesM; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm * kWarpM + i * 16 + g + h * 8;
      if (codes[r] != e) continue;
#pragma unroll
      for (int jn = 0; jn < kTilesN; ++jn) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int64_t n = n0 + wn * kWarpN + jn * 8 + 2 * t + q;
          if (n >= p.N) continue;
          const float v = acc[i][jn][2 * h + q] + (p.bias != nullptr ? __ldg(p.bias + n) : 0.0f);
          store(out + (m0 + r) * p.N + n, v);
        }
      }
    }
  }
}

// Grid: (M tiles, N tiles, z), z the expert in the masked layout, else 1.
template <class Out, bool kAsync, bool kFp8Mma>
__global__ void __launch_bounds__(kThreads) fp8_gemm_tiles(Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  int* codes = reinterpret_cast<int*>(smem + kStages * (kTileA + kTileB));
  const int64_t z = blockIdx.z;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBN;
  const uint8_t* a = p.a + z * p.rows * p.K;
  const float* a_s = p.a_s + z * p.rows * p.kb;
  Out* out = static_cast<Out*>(p.out) + z * p.rows * p.N;

  if (threadIdx.x < kBM) codes[threadIdx.x] = row_code(p, z, m0 + threadIdx.x);
  __syncthreads();
  fill_special_rows(p, out, codes, m0, n0);
  for (;;) {
    __syncthreads();  // codes settled; the previous pass done with shared memory
    int e = -1;
    for (int r = 0; r < kBM && e < 0; ++r) e = codes[r] >= 0 ? codes[r] : -1;
    if (e < 0) return;
    gemm_pass<Out, kAsync, kFp8Mma>(p, a, a_s, out, codes, e, m0, n0, smem);
    __syncthreads();  // every thread has read the codes of this pass
    if (threadIdx.x < kBM && codes[threadIdx.x] == e) codes[threadIdx.x] = kSkip;
  }
}

}  // namespace lowbit::cuda::fp8g
