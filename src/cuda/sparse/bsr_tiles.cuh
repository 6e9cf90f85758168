// The CUDA kernels of bsr_dense_addmm (docs/sparse.md): a CTA computes one
// block row of the BSR times a 128-column panel of dense. Its K loop runs
// over the row's stored blocks only, each block's BK in steps of KC.
//
// bsr_tiles (fp16/bf16, BM in {16, 32, 64, 128}, BK a multiple of 16,
// 16-byte aligned rows): cp.async stages of the block's [BM, KC] values and
// dense's [KC, 128] rows, read by ldmatrix (dense's transposed) into
// mma.sync m16n8k16 with fp32 sums. bsr_generic (any dtype and shape): a
// thread a column, 8 rows at a time, sums in fp32 (uint32 for int8: the
// int64 reference's sums modulo 2^32, exact after the wrap to int32).
//
// The index arrays live on the device and the host does not wait to read
// them: each CTA checks its row's (pointers within [0, nnz], columns in
// range and ascending) and a row that fails reads no block and writes NaN
// (INT32_MIN for int8) across its outputs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/float_convert.h"
#include "cuda/common/ptx/copy.cuh"
#include "cuda/common/ptx/mma.cuh"
#include "cuda/gemm/mma.cuh"
#include "cuda/sparse/bsr_params.h"

namespace lowbit::cuda::sparse {

__device__ __forceinline__ int64_t index_at(const BsrParams& p, const void* a, int64_t i) {
  return p.index64 ? static_cast<const int64_t*>(a)[i] : static_cast<int64_t>(static_cast<const int32_t*>(a)[i]);
}

// The stored blocks [*start, *end) of block row `row` (at offsets `off`), checked by the whole CTA: true
// when every thread saw a valid row.
__device__ __forceinline__ bool row_blocks(const BsrParams& p, const BatchOffsets& off, int64_t row, int64_t* start,
                                           int64_t* end) {
  const int64_t crow0 = off.bsr * (p.rows + 1) + row;
  const int64_t s = index_at(p, p.crow, crow0), e = index_at(p, p.crow, crow0 + 1);
  bool bad = s < 0 || s > e || e > p.nnz;
  if (!bad) {
    const int64_t base = off.bsr * p.nnz;
    for (int64_t j = s + threadIdx.x; j < e; j += blockDim.x) {
      const int64_t c = index_at(p, p.col, base + j);
      bad |= c < 0 || c >= p.kcols || (j > s && index_at(p, p.col, base + j - 1) >= c);
    }
  }
  *start = s;
  *end = e;
  return !__syncthreads_or(bad);
}

// Outputs (m, n) and (m, n + 1) of out batch ob from the sums s0, s1 (n even; N even, so n + 1 is in when n
// is): alpha and beta * input applied in fp32, one rounding to the dtype, NaN for a row that failed its check.
template <class Tag, class St>
__device__ __forceinline__ void store_pair(const BsrParams& p, const BatchOffsets& off, int64_t ob, int64_t m,
                                           int64_t n, float s0, float s1, bool ok) {
  if (n >= p.N) return;
  float v0 = p.alpha * s0, v1 = p.alpha * s1;
  if (p.input != nullptr) {
    const St* in = static_cast<const St*>(p.input) + off.input + m * p.input_sm + n * p.input_sn;
    v0 += p.beta * core::to_f32(in[0]);
    v1 += p.beta * core::to_f32(in[p.input_sn]);
  }
  if (!ok) v0 = v1 = __int_as_float(0x7fc00000);
  St* out = static_cast<St*>(p.out) + (ob * p.M + m) * p.N + n;
  *reinterpret_cast<uint32_t*>(out) = gemm::pack2<Tag>(v0, v1);
}

// The tensor-core kernel's shape for blocks of BM rows, K steps of KC.
template <int BM, int KC>
struct BsrTileShape {
  static constexpr int kTN = 128;                  // dense columns a CTA
  static constexpr int kWM = BM < 64 ? BM : 64;    // rows a warp
  static constexpr int kWN = 32;                   // columns a warp
  static constexpr int kWarpsM = BM / kWM, kWarpsN = kTN / kWN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  // CTAs an SM should hold at once (registers capped to fit them): 12 warps or more, 64x32 warp tiles keeping
  // their 64 sums and the addresses without spills.
  static constexpr int kMinBlocks = kThreads == 256 ? 2 : BM == 64 ? 3 : 4;
  // Rows padded by 16 bytes: ldmatrix's 8 row addresses fall in 8 different bank quads.
  static constexpr int kAStride = KC + 8, kBStride = kTN + 8;  // 16-bit elements
  static constexpr int kStageElems = BM * kAStride + KC * kBStride;
  static constexpr int kStages = KC == 16 ? 6 : 4;
  static constexpr size_t kSmem = static_cast<size_t>(kStages) * kStageElems * 2;
};

// Tag: gemm::F16 or gemm::BF16; St its storage type (core::Half or core::BFloat16).
template <class Tag, class St, int BM, int KC>
__global__ void __launch_bounds__(BsrTileShape<BM, KC>::kThreads, BsrTileShape<BM, KC>::kMinBlocks)
    bsr_tiles(BsrParams p, int64_t n_tiles) {
  using S = BsrTileShape<BM, KC>;
  extern __shared__ __align__(16) uint16_t smem[];
  const int64_t tile = blockIdx.x;
  const int64_t nt = tile % n_tiles, rest = tile / n_tiles;
  const int64_t row = rest % p.rows, ob = rest / p.rows;
  const int64_t n0 = nt * S::kTN;
  const BatchOffsets off = batch_offsets(p, ob);
  int64_t start, end;
  const bool ok = row_blocks(p, off, row, &start, &end);
  const int64_t steps = ok ? (end - start) * (p.BK / KC) : 0;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / S::kWarpsN, wn = warp % S::kWarpsN;
  const St* values = static_cast<const St*>(p.values) + off.bsr * p.nnz * BM * p.BK;
  const St* dense = static_cast<const St*>(p.dense) + off.dense * p.K * p.N + n0;
  const int64_t col_base = off.bsr * p.nnz;

  // Each thread's 16-byte pieces of a step, the same every step: a's rows of the block, dense's rows of the panel.
  constexpr int kAChunks = KC / 8, kBChunks = S::kTN / 8;
  constexpr int kAPieces = BM * kAChunks, kBPieces = KC * kBChunks;
  constexpr int kAIters = (kAPieces + S::kThreads - 1) / S::kThreads, kBIters = kBPieces / S::kThreads;
  static_assert(kBPieces % S::kThreads == 0, "whole rounds of dense pieces");
  int a_src[kAIters], a_dst[kAIters];
  int64_t b_src[kBIters];
  int b_dst[kBIters];
  bool b_in[kBIters];
#pragma unroll
  for (int u = 0; u < kAIters; ++u) {
    const int i = tid + u * S::kThreads, r = i / kAChunks, c = i % kAChunks;
    a_src[u] = r * p.BK + c * 8;
    a_dst[u] = r * S::kAStride + c * 8;
  }
#pragma unroll
  for (int u = 0; u < kBIters; ++u) {
    const int i = tid + u * S::kThreads, k = i / kBChunks, c = i % kBChunks;
    b_src[u] = k * p.N + c * 8;
    b_dst[u] = k * S::kBStride + c * 8;
    b_in[u] = n0 + c * 8 < p.N;  // N is a multiple of 8: a piece is all in or all out
  }

  // The next step to load: K columns ld_kc .. ld_kc + KC - 1 of block ld_blk, whose values start at a_blk and whose
  // dense rows at d_blk; the next block's column is read a block ahead.
  int64_t ld_blk = start;
  int ld_kc = 0;
  const St* a_blk = values + start * BM * p.BK;
  const St* d_blk = dense;
  int64_t next_col = 0;
  if (steps > 0) {
    d_blk = dense + index_at(p, p.col, col_base + start) * p.BK * p.N;
    if (start + 1 < end) next_col = index_at(p, p.col, col_base + start + 1);
  }
  const auto load = [&](int stage) {
    uint16_t* as = smem + stage * S::kStageElems;
    uint16_t* bs = as + BM * S::kAStride;
#pragma unroll
    for (int u = 0; u < kAIters; ++u) {
      if (kAPieces % S::kThreads == 0 || tid + u * S::kThreads < kAPieces) {
        ptx::cp_async16(as + a_dst[u], a_blk + ld_kc + a_src[u]);
      }
    }
    const St* d = d_blk + static_cast<int64_t>(ld_kc) * p.N;
#pragma unroll
    for (int u = 0; u < kBIters; ++u) {
      ptx::cp_async16(bs + b_dst[u], b_in[u] ? d + b_src[u] : d_blk, b_in[u] ? 16 : 0);
    }
    ld_kc += KC;
    if (ld_kc == p.BK) {
      ld_kc = 0;
      ++ld_blk;
      a_blk += BM * p.BK;
      if (ld_blk < end) {
        d_blk = dense + next_col * p.BK * p.N;
        if (ld_blk + 1 < end) next_col = index_at(p, p.col, col_base + ld_blk + 1);
      }
    }
  };

  constexpr int kMI = S::kWM / 16, kNI = S::kWN / 8;
  float acc[kMI][kNI][4] = {};
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < steps) load(s);
    ptx::cp_async_commit_group();
  }
  for (int64_t step = 0; step < steps; ++step) {
    ptx::cp_async_wait_group<S::kStages - 2>();
    __syncthreads();  // the step's data is in, and every warp is done with the stage refilled next
    if (step + S::kStages - 1 < steps) load(static_cast<int>((step + S::kStages - 1) % S::kStages));
    ptx::cp_async_commit_group();
    const uint16_t* as = smem + static_cast<int>(step % S::kStages) * S::kStageElems;
    const uint16_t* bs = as + BM * S::kAStride;
#pragma unroll
    for (int kk = 0; kk < KC; kk += 16) {
      uint32_t af[kMI][4], bf[kNI / 2][4];
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) {
        ptx::ldmatrix_x4(af[mi], as + (wm * S::kWM + mi * 16 + lane % 16) * S::kAStride + kk + lane / 16 * 8);
      }
#pragma unroll
      for (int nj = 0; nj < kNI / 2; ++nj) {
        ptx::ldmatrix_x4_trans(bf[nj],
                               ptx::smem_addr(bs + (kk + lane % 16) * S::kBStride + wn * S::kWN + nj * 16 + lane / 16 * 8));
      }
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
        for (int ni = 0; ni < kNI; ++ni) {
          gemm::mma_m16n8k16<Tag>(acc[mi][ni], af[mi][0], af[mi][1], af[mi][2], af[mi][3], bf[ni / 2][ni % 2 * 2],
                                  bf[ni / 2][ni % 2 * 2 + 1]);
        }
      }
    }
  }
  ptx::cp_async_wait_all();

  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = row * BM + wm * S::kWM + mi * 16 + g + 8 * h;
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) {
        store_pair<Tag, St>(p, off, ob, m, n0 + wn * S::kWN + ni * 8 + 2 * t, acc[mi][ni][2 * h],
                            acc[mi][ni][2 * h + 1], ok);
      }
    }
  }
}

// Acc: float, or uint32_t for int8 values (Out int32).
template <class T, class Acc, class Out>
__global__ void __launch_bounds__(128) bsr_generic(BsrParams p, int64_t n_tiles) {
  constexpr int kCols = 128, kRows = 8;
  const int64_t tile = blockIdx.x;
  const int64_t nt = tile % n_tiles, rest = tile / n_tiles;
  const int64_t row = rest % p.rows, ob = rest / p.rows;
  const BatchOffsets off = batch_offsets(p, ob);
  int64_t start, end;
  const bool ok = row_blocks(p, off, row, &start, &end);
  const int64_t n = nt * kCols + threadIdx.x;
  if (n >= p.N) return;
  const T* values = static_cast<const T*>(p.values) + off.bsr * p.nnz * p.BM * p.BK;
  const T* dense = static_cast<const T*>(p.dense) + off.dense * p.K * p.N + n;
  const Out* input = static_cast<const Out*>(p.input);
  Out* out = static_cast<Out*>(p.out) + ob * p.M * p.N + n;
  const auto f = [](T v) -> Acc {
    if constexpr (std::is_same_v<Acc, uint32_t>) {
      return static_cast<uint32_t>(static_cast<int32_t>(v));
    } else {
      return core::to_f32(v);
    }
  };
  for (int r0 = 0; r0 < p.BM; r0 += kRows) {
    Acc acc[kRows] = {};
    if (ok) {
      for (int64_t j = start; j < end; ++j) {
        const T* blk = values + (j * p.BM + r0) * p.BK;
        const T* d = dense + index_at(p, p.col, off.bsr * p.nnz + j) * p.BK * p.N;
        for (int k = 0; k < p.BK; ++k) {
          const Acc x = f(d[k * p.N]);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            if (r0 + r < p.BM) acc[r] += f(blk[r * p.BK + k]) * x;
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r0 + r >= p.BM) break;
      const int64_t m = row * p.BM + r0 + r;
      if constexpr (std::is_same_v<Acc, uint32_t>) {
        uint32_t v = static_cast<uint32_t>(p.ialpha) * acc[r];
        if (input != nullptr) v += static_cast<uint32_t>(p.ibeta) * static_cast<uint32_t>(input[off.input + m * p.input_sm + n * p.input_sn]);
        out[m * p.N] = ok ? static_cast<int32_t>(v) : INT32_MIN;
      } else {
        float v = p.alpha * acc[r];
        if (input != nullptr) v += p.beta * core::to_f32(input[off.input + m * p.input_sm + n * p.input_sn]);
        out[m * p.N] = core::from_f32<Out>(ok ? v : __int_as_float(0x7fc00000));
      }
    }
  }
}

}  // namespace lowbit::cuda::sparse
