// The tensor-core attention kernel (docs/attention.md, "On CUDA"), fp16 and
// bf16, for all three forms of the op (params.h): FlashAttention-2's scheme
// on mma.sync m16n8k16 with fp32 sums.
//
// A CTA of 4 warps takes kM rows of one (sequence, kv head). Its rows are
// the query heads that share the kv head packed with the queries: packed
// row m is query i = m / group of head g * group + m % group, so K and V are
// read once per kv head (grouped-query decode fills the M tile with heads).
// The CTA walks its key range in tiles of 64 keys, double-buffered in
// shared memory by cp.async (tile t + 1 loads while tile t is used):
//   S = Q Kᵀ      [16, keys] per warp, Q's fragments in registers (kD <= 128)
//                 or read again from shared memory (kD = 256: they would spill)
//   online softmax in registers in the base-2 domain (scale * log2(e) folded
//                 into the scores, ex2.approx), -inf on the keys a row does not
//                 see, applied only on tiles that hold such keys
//   O += P V      P rounded to the dtype in registers (the S accumulators are
//                 the A fragments of the next product, no shared memory)
// Tiles are [rows, kD] of 16-bit elements, each 16-byte chunk at its
// 128-byte swizzle (swizzle.cuh): ldmatrix's eight rows of one chunk fall in
// eight distinct bank groups. Kᵀ (bdhs) and V are read with ldmatrix.trans.
// The epilogue puts each warp's O, row maximum and sum in shared memory,
// merges the warps that share rows, normalizes, and writes 16-byte chunks of
// the output (or the fp32 partial of a split key range) and the log-sum-exp.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda/attention/params.h"
#include "cuda/common/ptx/arith.cuh"
#include "cuda/common/ptx/copy.cuh"
#include "cuda/common/ptx/mma.cuh"
#include "cuda/common/swizzle.cuh"
#include "cuda/gemm/mma.cuh"

namespace lowbit::cuda::attention {

// kD: the instance's head dim (64, 128, 256): D and Dv are multiples of 8 up
//   to it; the chunks past them load as zeros and are not stored.
// kWarpsM: warps along the rows. 4: 64 rows a CTA, each warp 16 rows over
//   all 64 keys of a tile. 1: 16 rows, each warp 16 of the 64 keys of every
//   tile with its own maximum and sum, merged in the epilogue (decode: a kv
//   head with at most 16 rows would leave three warps idle).
// kKT: k is [B, D, Hkv, Skv] (bdhs): its tile is staged as Kᵀ [kD, 64] and
//   read like V.
template <int kD, int kWarpsM, bool kKT>
struct FlashShape {
  static_assert(kD == 64 || kD == 128 || kD == 256, "head dim instance");
  static constexpr int kThreads = 128;
  static constexpr int kWarps = 4;
  static constexpr int kWarpsN = kWarps / kWarpsM;  // warps sharing a row
  static constexpr int kM = 16 * kWarpsM;           // packed rows of a CTA
  static constexpr int kN = 64;                     // keys of a tile
  static constexpr int kNW = kN / kWarpsN;          // keys of a tile one warp takes
  static constexpr int kChunks = kD / 8;            // 16-byte chunks of a row
  static constexpr bool kQInRegs = kD <= 128;
  // Rows a thread's tile loader issues back to back: all of them below 256, where 16 rows' addresses beside
  // the 128 accumulator registers would spill.
  static constexpr int kLoadUnroll = kD <= 128 ? kD / 16 : 4;
  static constexpr int kTile = kN * kD;     // elements of a K (or Kᵀ) or V tile
  static constexpr int kStage = 2 * kTile;  // K, then V
  // Q: in stage 1's K when its fragments go to registers (read before stage 1 loads), else after the stages.
  static constexpr int kQOffset = kQInRegs ? kStage : 2 * kStage;
  static constexpr size_t kLoopBytes = sizeof(uint16_t) * (2 * kStage + (kQInRegs ? 0 : kM * kD));
  // The epilogue's fp32 O per warp [16, kD + 8] (the pad spreads a float2 store's 8 rows over all 32 banks),
  // then (max, sum) per warp row; it reuses the stages.
  static constexpr int kOPitch = kD + 8;
  static constexpr size_t kEpilogueBytes = sizeof(float) * (kWarps * 16 * kOPitch + kWarps * 16 * 2);
  static constexpr size_t kSmemBytes = kLoopBytes > kEpilogueBytes ? kLoopBytes : kEpilogueBytes;
};

// One CTA's share of the work.
struct CtaWork {
  int b, g, split;
  int64_t token0;      // q's token of the sequence's query 0
  int Sq, Skv;         // the sequence's queries and keys
  int64_t key_row0;    // key 0's row of k and v (dense, varlen, contiguous cache)
  int64_t rows;        // packed rows of the (sequence, kv head): Sq * group
  int64_t m0;          // the CTA's first packed row
  int t_begin, t_end;  // its key tiles
  bool bad;            // the sequence's length or key offsets are out of range: NaN outputs
};

// The CTA's work from its grid position; false for a CTA with nothing to do (varlen's spare columns).
template <int kM>
__device__ __forceinline__ bool cta_work(const FlashParams& p, CtaWork& w) {
  constexpr int kN = 64;
  w.g = static_cast<int>(blockIdx.y);
  w.bad = false;
  int64_t mt = 0;
  if (p.form == Form::varlen) {
    // Sequence b's M tiles are the columns start(b) .. start(b) + tiles(b) - 1 with
    // start(b) = floor(cu_q[b] * group / kM) + b: start(b + 1) - start(b) >= floor(len_b * group / kM) + 1
    // >= tiles(b), so no two ranges overlap and all end by floor(total_q * group / kM) + B, the grid the host
    // sizes from total_q and B alone. The column's sequence: the last b with start(b) <= column.
    const int64_t col = blockIdx.x;
    const auto start = [&](int b) { return int64_t{p.cu_q[b]} * p.group / kM + b; };
    int lo = 0, hi = p.B - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (start(mid) <= col) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const int64_t q0 = p.cu_q[lo], q1 = p.cu_q[lo + 1];
    if (q0 < 0 || q1 < q0 || q1 > p.total_q) return false;  // rows that cannot be told: nothing written
    const int64_t tiles = ((q1 - q0) * p.group + kM - 1) / kM, k = col - start(lo);
    if (k < 0 || k >= tiles) return false;
    const int64_t k0 = p.cu_k[lo], k1 = p.cu_k[lo + 1];
    w.bad = k0 < 0 || k1 < k0 || k1 > p.total_k;
    w.b = lo;
    w.split = 0;
    w.token0 = q0;
    w.Sq = static_cast<int>(q1 - q0);
    w.Skv = w.bad ? 0 : static_cast<int>(k1 - k0);
    w.key_row0 = w.bad ? 0 : k0;
    mt = tiles - 1 - k;  // a sequence's longest causal rows first
  } else {
    w.b = static_cast<int>(blockIdx.z);
    w.split = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.splits));
    mt = p.m_tiles - 1 - static_cast<int64_t>(blockIdx.x / static_cast<unsigned>(p.splits));
    w.token0 = int64_t{w.b} * p.Sq;
    w.Sq = p.Sq;
    if (p.form == Form::dense) {
      w.Skv = p.Skv;
      w.key_row0 = int64_t{w.b} * p.Skv;
    } else {
      const int n = p.seqlens[w.b];
      w.bad = n < 0 || n > p.capacity;
      w.Skv = w.bad ? 0 : n;
      w.key_row0 = p.table != nullptr ? 0 : int64_t{w.b} * p.Skv;
    }
  }
  w.rows = int64_t{w.Sq} * p.group;
  w.m0 = mt * kM;
  int64_t n_end = w.Skv;  // keys the CTA's last row sees
  if (p.causal) {
    const int64_t last_i = (min(w.m0 + kM, w.rows) - 1) / p.group;
    n_end = max(int64_t{0}, min(n_end, last_i + w.Skv - w.Sq + 1));
  }
  const int tiles = static_cast<int>((n_end + kN - 1) / kN);
  w.t_begin = min(tiles, w.split * p.split_tiles);
  w.t_end = tiles - w.t_begin <= p.split_tiles ? tiles : w.t_begin + p.split_tiles;
  return true;
}

template <class Tag, int kD, int kWarpsM, bool kKT>
__global__ void __launch_bounds__(128) flash_mma(const __grid_constant__ FlashParams p) {
  using S = FlashShape<kD, kWarpsM, kKT>;
  constexpr int kN = S::kN, kNW = S::kNW, kChunks = S::kChunks, kLoadUnroll = S::kLoadUnroll;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  uint16_t* const smem = reinterpret_cast<uint16_t*>(smem_bytes);

  CtaWork w;
  if (!cta_work<S::kM>(p, w)) return;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int wm = warp / S::kWarpsN, wn = warp % S::kWarpsN;
  const int gq = lane / 4, tq = lane % 4;  // the fragments' row group and column pair
  const auto* q = static_cast<const uint16_t*>(p.q);
  const auto* k = static_cast<const uint16_t*>(p.k);
  const auto* v = static_cast<const uint16_t*>(p.v);
  bool bad_page = false;

  // Q [kM, kD]: rows past the sequence's and chunks past D zeros.
#pragma unroll
  for (int it = 0; it < S::kM * kChunks / S::kThreads; ++it) {
    const int idx = tid + it * S::kThreads, r = idx / kChunks, c = idx % kChunks;
    const int64_t m = w.m0 + r;
    const bool ok = m < w.rows && c * 8 < p.D;
    const uint16_t* src = q;
    if (ok) {
      const int64_t i = m / p.group;
      const int64_t h = int64_t{w.g} * p.group + (m - i * p.group);
      src = q + ((w.token0 + i) * p.H + h) * p.D + c * 8;
    }
    ptx::cp_async16(smem + S::kQOffset + r * kD + swizzle128(r, c) * 8, src, ok ? 16 : 0);
  }

  // Key tile `tile` into stage `stage`: K [64, kD] (or Kᵀ [kD, 64]) and V [64, kD]; keys past the sequence's,
  // and chunks past D and Dv, zeros (V's must be: P's zeros times garbage could be NaN). A thread copies one
  // chunk column of every kPass-th row, its source pointers stepped from row to row (an address computed
  // afresh for each row would keep one 64-bit pointer a row alive across the whole loop).
  const auto load_tile = [&](int stage, int tile) {
    const int n0 = tile * kN;
    uint16_t* const ks = smem + stage * S::kStage;
    uint16_t* const vs = ks + S::kTile;
    if constexpr (kKT) {
      // Row d of Kᵀ, chunk c: keys n0 + 8c .. n0 + 8c + 7, contiguous in k (Skv a multiple of 8: whole chunks).
      constexpr int kPass = S::kThreads / 8;
      const int d0 = tid / 8, c = tid % 8, j = n0 + 8 * c;
      const uint16_t* src = k + ((int64_t{w.b} * p.D + d0) * p.Hkv + w.g) * p.Skv + j;
      const int64_t step = int64_t{kPass} * p.Hkv * p.Skv;
#pragma unroll(kLoadUnroll)
      for (int it = 0; it < kD / kPass; ++it, src += step) {
        const int d = d0 + it * kPass;
        const bool ok = d < p.D && j < w.Skv;
        ptx::cp_async16(ks + d * kN + swizzle128(d, c) * 8, ok ? src : k, ok ? 16 : 0);
      }
    }
    constexpr int kPass = S::kThreads / kChunks;
    const int r0 = tid / kChunks, c = tid % kChunks;
    const bool k_in = c * 8 < p.D, v_in = c * 8 < p.Dv;
    const int64_t step_k = int64_t{kPass} * p.Hkv * p.D, step_v = int64_t{kPass} * p.Hkv * p.Dv;
    const int64_t row0 = w.key_row0 + n0 + r0;
    const uint16_t* kp = k + (row0 * p.Hkv + w.g) * p.D + c * 8;
    const uint16_t* vp = v + (row0 * p.Hkv + w.g) * p.Dv + c * 8;
#pragma unroll(kLoadUnroll)
    for (int it = 0; it < kN / kPass; ++it, kp += step_k, vp += step_v) {
      const int r = r0 + it * kPass, j = n0 + r;
      bool ok = j < w.Skv;
      const uint16_t* kr = kp;
      const uint16_t* vr = vp;
      if (ok && p.table != nullptr) {  // paged: row j % P of page table[b, j / P]
        const int page = __ldg(p.table + int64_t{w.b} * p.max_pages + j / p.Skv);
        ok = page >= 0 && page < p.pages;
        bad_page |= !ok;
        const int64_t row = int64_t{page} * p.Skv + j % p.Skv;
        kr = k + (row * p.Hkv + w.g) * p.D + c * 8;
        vr = v + (row * p.Hkv + w.g) * p.Dv + c * 8;
      }
      const int off = r * kD + swizzle128(r, c) * 8;
      if constexpr (!kKT) ptx::cp_async16(ks + off, ok && k_in ? kr : k, ok && k_in ? 16 : 0);
      ptx::cp_async16(vs + off, ok && v_in ? vr : v, ok && v_in ? 16 : 0);
    }
  };

  // ldmatrix addresses. Lanes 8i .. 8i + 7 give rows 0-7 of matrix i. Pattern "a" (Q's A fragments; Kᵀ's and
  // V's B fragments through .trans): matrices (rows 0-7, chunk 0), (rows 8-15, chunk 0), (0-7, 1), (8-15, 1).
  // Pattern "b" (K's B fragments of two 8-key tiles): (0-7, 0), (0-7, 1), (8-15, 0), (8-15, 1). Every
  // caller's rows start at a multiple of 8, so a row's swizzle is lane % 8, and chunk 2J + bit of a row lies
  // at byte (J / 4) * 128 + sw[J % 4]: four registers a pattern, where the XOR, which does not distribute
  // over the unrolled loops' offsets, would otherwise hold one address per offset.
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_bit = lane >> 4;
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_bit = (lane >> 3) & 1;
  uint32_t sw_a[4], sw_b[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    sw_a[j] = static_cast<uint32_t>(((2 * j + a_bit) ^ (lane & 7)) * 16);
    sw_b[j] = static_cast<uint32_t>(((2 * j + b_bit) ^ (lane & 7)) * 16);
  }
  const int nw = wn * kNW;  // the warp's first key in a tile
  const uint32_t smem_addr = ptx::smem_addr(smem);
  const uint32_t q_addr = smem_addr + 2u * static_cast<uint32_t>(S::kQOffset + (wm * 16 + a_row) * kD);
  const uint32_t k_addr = smem_addr + 2u * static_cast<uint32_t>(kKT ? a_row * kN : (nw + b_row) * kD);
  const uint32_t v_addr = smem_addr + 2u * static_cast<uint32_t>(S::kTile + (nw + a_row) * kD);
  // Kᵀ's keys nw + 16np.. are chunks nw / 8 + 2np + bit of its 128-byte rows.
  uint32_t sw_kt[kNW / 16];
#pragma unroll
  for (int np = 0; np < kNW / 16; ++np)
    sw_kt[np] = static_cast<uint32_t>(((nw / 8 + 2 * np + a_bit) ^ (lane & 7)) * 16);

  // The last key each of the thread's two rows (gq, gq + 8 of its warp's 16) sees.
  int last_key[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = (w.m0 + wm * 16 + gq + 8 * r) / p.group;
    last_key[r] = p.causal ? static_cast<int>(min(i + w.Skv - w.Sq, int64_t{w.Skv} - 1)) : w.Skv - 1;
  }
  const int64_t first_i = w.m0 / p.group;  // the CTA's first row's query: the one seeing the fewest keys

  float o[kD / 8][4];  // [16, kD] per warp: 8-column tiles, the accumulator layout
#pragma unroll
  for (int t = 0; t < kD / 8; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  uint32_t qf[S::kQInRegs ? kD / 16 : 1][4];

  const int tiles = w.t_end - w.t_begin;
  if (tiles > 0) load_tile(0, w.t_begin);
  ptx::cp_async_commit_group();
  if constexpr (S::kQInRegs) {
    ptx::cp_async_wait_group<0>();
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) ptx::ldmatrix_x4(qf[ks], q_addr + (ks / 4) * 128 + sw_a[ks % 4]);
    __syncthreads();  // Q's space is stage 1's
  }

  const float sl = p.scale_log2;
  for (int it = 0; it < tiles; ++it) {
    const int stage = it & 1;
    if (it + 1 < tiles) {
      load_tile(stage ^ 1, w.t_begin + it + 1);
      ptx::cp_async_commit_group();
      ptx::cp_async_wait_group<1>();
    } else {
      ptx::cp_async_wait_group<0>();
    }
    __syncthreads();
    const uint32_t stage_bytes = static_cast<uint32_t>(stage) * (2u * S::kStage);

    // S = Q Kᵀ: [16, kNW] per warp.
    float s[kNW / 8][4];
#pragma unroll
    for (int t = 0; t < kNW / 8; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      if (ks * 16 >= p.D) break;  // zeros past D
      uint32_t a[4];
      if constexpr (S::kQInRegs) {
#pragma unroll
        for (int x = 0; x < 4; ++x) a[x] = qf[ks][x];
      } else {
        ptx::ldmatrix_x4(a, q_addr + (ks / 4) * 128 + sw_a[ks % 4]);
      }
#pragma unroll
      for (int np = 0; np < kNW / 16; ++np) {
        uint32_t b[4];
        if constexpr (kKT) {
          ptx::ldmatrix_x4_trans(b, k_addr + stage_bytes + ks * 16 * kN * 2 + sw_kt[np]);
        } else {
          ptx::ldmatrix_x4(b, k_addr + stage_bytes + np * 16 * kD * 2 + (ks / 4) * 128 + sw_b[ks % 4]);
        }
        gemm::mma_m16n8k16<Tag>(s[2 * np], a[0], a[1], a[2], a[3], b[0], b[1]);
        gemm::mma_m16n8k16<Tag>(s[2 * np + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
      }
    }

    // Scores in the base-2 domain; -inf on keys a row does not see (past the sequence, or causal).
    const int n0 = (w.t_begin + it) * kN;
    const bool whole = n0 + kN <= w.Skv && (!p.causal || n0 + kN - 1 <= first_i + w.Skv - w.Sq);
#pragma unroll
    for (int t = 0; t < kNW / 8; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[t][e] * sl;
        if (!whole && n0 + nw + t * 8 + 2 * tq + (e & 1) > last_key[e >> 1]) x = -INFINITY;
        s[t][e] = x;
      }
    }

    // Online softmax: the new row maxima (over the 4 threads of a row), the old sums and O rescaled.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max[r];
#pragma unroll
      for (int t = 0; t < kNW / 8; ++t) mx = fmaxf(mx, fmaxf(s[t][2 * r], s[t][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base = mx == -INFINITY ? 0.0f : mx;  // a row that sees no key yet: every p is 0, not NaN
      const float alpha = ptx::ex2_approx(row_max[r] - base);
      row_max[r] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int t = 0; t < kNW / 8; ++t) {
        s[t][2 * r] = ptx::ex2_approx(s[t][2 * r] - base);
        s[t][2 * r + 1] = ptx::ex2_approx(s[t][2 * r + 1] - base);
        sum += s[t][2 * r] + s[t][2 * r + 1];
      }
      row_sum[r] = row_sum[r] * alpha + sum;
#pragma unroll
      for (int t = 0; t < kD / 8; ++t) {
        o[t][2 * r] *= alpha;
        o[t][2 * r + 1] *= alpha;
      }
    }

    // O += P V: the accumulators of two 8-key tiles are the A fragment of a 16-key step.
#pragma unroll
    for (int kk = 0; kk < kNW / 16; ++kk) {
      const uint32_t a0 = gemm::pack2<Tag>(s[2 * kk][0], s[2 * kk][1]);
      const uint32_t a1 = gemm::pack2<Tag>(s[2 * kk][2], s[2 * kk][3]);
      const uint32_t a2 = gemm::pack2<Tag>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      const uint32_t a3 = gemm::pack2<Tag>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < kD / 16; ++dp) {
        if (dp * 16 >= p.Dv) break;  // zeros past Dv
        uint32_t b[4];
        ptx::ldmatrix_x4_trans(b, v_addr + stage_bytes + kk * 16 * kD * 2 + (dp / 4) * 128 + sw_a[dp % 4]);
        gemm::mma_m16n8k16<Tag>(o[2 * dp], a0, a1, a2, a3, b[0], b[1]);
        gemm::mma_m16n8k16<Tag>(o[2 * dp + 1], a0, a1, a2, a3, b[2], b[3]);
      }
    }
    __syncthreads();  // the stage is free for the load two tiles on
  }

  // Epilogue: each warp's O, maximum and sum to shared memory (over the stages).
  ptx::cp_async_wait_group<0>();  // Q's copy when there was no tile
  const bool bad = __syncthreads_or(w.bad || bad_page) != 0;
  float* const so = reinterpret_cast<float*>(smem_bytes);  // [kWarps][16][kOPitch]
  float* const sml = so + S::kWarps * 16 * S::kOPitch;     // [kWarps][16][max, sum]
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    float* const orow = so + (warp * 16 + gq + 8 * r) * S::kOPitch + 2 * tq;
#pragma unroll
    for (int t = 0; t < kD / 8; ++t)
      *reinterpret_cast<float2*>(orow + t * 8) = make_float2(o[t][2 * r], o[t][2 * r + 1]);
    if (tq == 0) {
      sml[(warp * 16 + gq + 8 * r) * 2] = row_max[r];
      sml[(warp * 16 + gq + 8 * r) * 2 + 1] = row_sum[r];
    }
  }
  __syncthreads();

  // Each row's warps merged (their maxima to the largest), normalized, stored 8 columns at a time.
  constexpr float kLn2 = 0.6931471805599453f;
  for (int idx = tid; idx < S::kM * kChunks; idx += S::kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const int64_t m = w.m0 + r;
    if (m >= w.rows || c * 8 >= p.Dv) continue;
    const int w0 = (r / 16) * S::kWarpsN, rr = r % 16;
    float mx = -INFINITY;
#pragma unroll
    for (int x = 0; x < S::kWarpsN; ++x) mx = fmaxf(mx, sml[((w0 + x) * 16 + rr) * 2]);
    const float base = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f, val[8] = {};
#pragma unroll
    for (int x = 0; x < S::kWarpsN; ++x) {
      const float f = ptx::ex2_approx(sml[((w0 + x) * 16 + rr) * 2] - base);
      sum += f * sml[((w0 + x) * 16 + rr) * 2 + 1];
      const float* src = so + ((w0 + x) * 16 + rr) * S::kOPitch + c * 8;
      const float4 lo = *reinterpret_cast<const float4*>(src), hi = *reinterpret_cast<const float4*>(src + 4);
      val[0] += f * lo.x, val[1] += f * lo.y, val[2] += f * lo.z, val[3] += f * lo.w;
      val[4] += f * hi.x, val[5] += f * hi.y, val[6] += f * hi.z, val[7] += f * hi.w;
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // no key: zeros
#pragma unroll
    for (int e = 0; e < 8; ++e) val[e] = bad ? NAN : val[e] * inv;
    const int64_t i = m / p.group;
    const int h = w.g * p.group + static_cast<int>(m - i * p.group);
    const int64_t token = w.token0 + i, row = token * p.H + h;
    const float lse = bad ? NAN : sum > 0.0f ? (mx + log2f(sum)) * kLn2 : -INFINITY;
    if (p.splits == 1) {
      uint4 packed;
      packed.x = gemm::pack2<Tag>(val[0], val[1]);
      packed.y = gemm::pack2<Tag>(val[2], val[3]);
      packed.z = gemm::pack2<Tag>(val[4], val[5]);
      packed.w = gemm::pack2<Tag>(val[6], val[7]);
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.out) + row * p.Dv + c * 8) = packed;
      if (c == 0 && p.lse != nullptr) p.lse[lse_index(p, w.b, h, i, token)] = lse;
    } else {
      const int64_t prow = int64_t{w.split} * p.total_q * p.H + row;
      float* const dst = p.part_o + prow * p.Dv + c * 8;
      *reinterpret_cast<float4*>(dst) = make_float4(val[0], val[1], val[2], val[3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(val[4], val[5], val[6], val[7]);
      if (c == 0) p.part_lse[prow] = lse;
    }
  }
}

}  // namespace lowbit::cuda::attention
