// The rows-layout tensor-core matmul kernel (docs/gemm.md, "CUDA kernels").
//
// out[m, n] = Σ_k A[m, perm(k)] · w[n, k], W in the `rows` layout.
//
// The weight is the mma's A operand (16 rows of N per warp), the activations
// its B operand (8·MT columns of M per block), so a warp streams its 16
// weight rows straight from global memory into registers — one load of a
// span of E codes per row and thread, no shared-memory round trip — and M=1
// wastes only the unused B columns. Thread (g = lane / 4, q = lane % 4) loads
// rows n0 + g and n0 + g + 8, span q of each chunk of 4·E columns; its four
// k slots of each mma step are four elements of its spans. The activations
// of the block's M tile are staged in shared memory with the decoder's slot
// order applied (and act-order's perm gathered), padded so each B fragment
// load is free of bank conflicts:
//
//   smem row m:  | chunk 0: span0 (E+4) | span1 | span2 | span3 | chunk 1 ... | pad |
//   row stride ≡ 8 words (mod 32), span stride E/2 + 2 words: the 32 lanes'
//   8-byte fragment loads hit 32 distinct banks in each half-warp phase.
//
// Grid: x over N (16 rows per warp, blockDim.x / 32 warps), y over M tiles,
// z over K splits; with splits > 1 each writes fp32 partial sums and
// reduce_splits adds them in split order.
#pragma once

#include <cstdint>

#include "core/float_convert.h"
#include "cuda/common/convert.cuh"
#include "cuda/common/ptx/arith.cuh"
#include "cuda/gemm/decoders.cuh"
#include "cuda/gemm/mma.cuh"
#include "cuda/gemm/params.h"

namespace lowbit::cuda::gemm {

inline constexpr int kMaxThreads = 256;
// (A minimum of 3 blocks per SM for M tile 8 caps registers at 80 and
// spills, which is slower.)

// Chunks per pass (two passes are in registers at a time).
template <int MT>
inline constexpr int kUnroll = 2;

// Small M tiles read A straight from global memory (L1/L2-resident: every
// warp of the grid reads the same few rows), with no shared-memory staging
// and no barriers; larger tiles stage A in shared memory once per pass.
template <int MT>
inline constexpr bool kDirectA = MT <= 2;

// Shared memory layout of a kernel instance.
template <class Dec, int MT>
struct Smem {
  static constexpr int kE = Dec::kE;
  static constexpr int kCH = 4 * kE;
  static constexpr int kU = kUnroll<MT>;
  static constexpr int kSpan = kE + 4;  // halves
  static constexpr int kRawWords = kU * 4 * kSpan / 2;
  static constexpr int kRowWords = kRawWords + ((8 - kRawWords % 32) + 32) % 32;
  static constexpr int kBM = 8 * MT;
  static constexpr int kAWords = kDirectA<MT> ? 0 : kBM * kRowWords;
  static constexpr int kTabWords = Dec::kTable ? 256 * 32 : 16;
  static constexpr size_t kBytes = static_cast<size_t>(kAWords + kTabWords) * 4;
};

template <int kLB>
__device__ __forceinline__ void load_span(uint32_t (&w)[kLB / 4], const uint8_t* src) {
  if constexpr (kLB == 16) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else if constexpr (kLB == 8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(src));
    w[0] = v.x, w[1] = v.y;
  } else {
    w[0] = __ldg(reinterpret_cast<const unsigned int*>(src));
  }
}

// Stages A[m0 .. m0 + BM, k0 .. k0 + U·CH) into shared memory in slot order;
// zeros past M and past ke. Rows past M are written only on the first pass.
template <class Dec, int MT>
__device__ __forceinline__ void stage_a(uint32_t* sA, const Params& p, int64_t m0, int k0, int ke, bool first) {
  using S = Smem<Dec, MT>;
  constexpr int kUnit = Dec::kPermBlock > 8 ? Dec::kPermBlock : 8;
  constexpr int kUnits = S::kU * S::kCH / kUnit;
  for (int idx = threadIdx.x; idx < S::kBM * kUnits; idx += blockDim.x) {
    const int m = idx / kUnits;
    const int off = (idx % kUnits) * kUnit;
    const int64_t gm = m0 + m;
    if (gm >= p.M && !first) continue;
    const int k = k0 + off;
    uint16_t v[kUnit];
    if (gm < p.M && p.a_vec && k + kUnit <= ke) {
      const auto* src = reinterpret_cast<const uint4*>(p.A + gm * p.lda + k);
#pragma unroll
      for (int i = 0; i < kUnit / 8; ++i) {
        const uint4 x = __ldg(src + i);
        const uint32_t xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          v[8 * i + 2 * j] = static_cast<uint16_t>(xs[j]);
          v[8 * i + 2 * j + 1] = static_cast<uint16_t>(xs[j] >> 16);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kUnit; ++i) {
        const int kk = k + i;
        uint16_t x = 0;
        if (gm < p.M && kk < ke) x = p.A[gm * p.lda + (p.perm ? p.perm[kk] : kk)];
        v[i] = x;
      }
    }
    const int u = off / S::kCH;
    const int span = (off % S::kCH) / S::kE;
    const int o = off % S::kE;
    auto* dst = reinterpret_cast<uint2*>(reinterpret_cast<uint16_t*>(sA + m * S::kRowWords) + u * 4 * S::kSpan +
                                         span * S::kSpan + o);
#pragma unroll
    for (int i = 0; i < kUnit / 4; ++i) {
      uint32_t lo = 0, hi = 0;
      lo = v[Dec::phys(4 * i)] | (static_cast<uint32_t>(v[Dec::phys(4 * i + 1)]) << 16);
      hi = v[Dec::phys(4 * i + 2)] | (static_cast<uint32_t>(v[Dec::phys(4 * i + 3)]) << 16);
      dst[i] = make_uint2(lo, hi);
    }
  }
}

__device__ __forceinline__ void store_out(const Params& p, int64_t m, int64_t n, float v) {
  const int64_t i = m * p.N + n;
  switch (p.out_kind) {
    case OutKind::f32: static_cast<float*>(p.out)[i] = v; break;
    case OutKind::f16: static_cast<uint16_t*>(p.out)[i] = f32_to_f16_hw(v); break;
    case OutKind::bf16: static_cast<uint16_t*>(p.out)[i] = f32_to_bf16_hw(v); break;
  }
}

// A finished sum for out[m, n]: with split K the split's fp32 partial (the
// reduce kernel adds bias and rounds), else bias added and rounded to out.
__device__ __forceinline__ void write_result(const Params& p, int64_t m, int64_t n, float v) {
  if (p.splits > 1) {
    p.partial[(static_cast<int64_t>(blockIdx.z) * p.M + m) * p.N + n] = v;
  } else {
    store_out(p, m, n, p.bias ? __fadd_rn(v, p.bias[n]) : v);
  }
}

// An m16n8 accumulator fragment of the output's transpose (rows n0 .. n0 + 15
// of N, columns m0 .. m0 + 7 of M): c[0], c[1] at row g, columns 2q, 2q + 1;
// c[2], c[3] at row g + 8 — the mma.sync C fragment, and each n8 block of
// wgmma's D fragment. Elements past N or M are not written.
__device__ __forceinline__ void write_fragment(const Params& p, int64_t n0, int64_t m0, const float* c) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t n = n0 + g + 8 * (i / 2);
    const int64_t m = m0 + 2 * q + (i & 1);
    if (n < p.N && m < p.M) write_result(p, m, n, c[i]);
  }
}

// The group of column k (32-bit: K < 2^31 on cuda), without a division for
// one group per row or a power-of-two group size.
__device__ __forceinline__ int group_of(const Params& p, int k) {
  if (p.G == 1) return 0;
  return p.gs_shift >= 0 ? k >> p.gs_shift : k / static_cast<int>(p.gs);
}

// One pass's weight spans and, per span, the row's scale and zero as
// loaded (a zero code for quantized zeros): turned into the decoder's RowCtx
// only when the pass runs, so no load is waited for while issuing the next.
template <class Dec, int kU>
struct Pass {
  uint32_t raw[kU][2][Dec::kLB / 4];
  float s[kU][2];
  float z[kU][2];      // float zeros
  uint32_t zq[kU][2];  // quantized zero codes
};

template <class Dec, int kU>
__device__ __forceinline__ RowCtx row_ctx(const Pass<Dec, kU>& ps, int u, int r, const Params& p) {
  const float z = p.qzeros ? int_code_value(ps.zq[u][r], p) : ps.z[u][r];
  return Dec::ctx(p, ps.s[u][r], z);
}

// What a thread reads, computed once: its two weight rows (at its span of
// chunk 0), their scale / zero rows, the byte and shift of their zero codes,
// and its A rows (direct A). The main loop then adds 32-bit offsets only.
template <class Dec, int MT>
struct Rows {
  const uint8_t* w[2];
  const float* s[2];
  const float* z[2];
  const uint8_t* zq[2];
  int zshift[2];
  bool valid[2];
  const uint16_t* a[MT];
  bool a_valid[MT];
};

template <class Dec, int MT>
__device__ __forceinline__ Rows<Dec, MT> thread_rows(const Params& p, int64_t n0, int64_t m0, int g, int q) {
  Rows<Dec, MT> rw;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t n = n0 + g + 8 * r;
    rw.valid[r] = n < p.N;
    const int64_t row = rw.valid[r] ? n : 0;
    rw.w[r] = p.qweight + row * p.row_bytes + q * Dec::kLB;
    rw.s[r] = p.scale ? p.scale + row * p.G : nullptr;
    rw.z[r] = p.zeros ? p.zeros + row * p.G : nullptr;
    const int64_t bit = row * p.bits;
    rw.zq[r] = p.qzeros ? p.qzeros + (bit >> 3) : nullptr;
    rw.zshift[r] = static_cast<int>(bit & 7);
  }
#pragma unroll
  for (int t = 0; t < MT; ++t) {
    const int64_t m = m0 + 8 * t + g;
    rw.a_valid[t] = m < p.M;
    rw.a[t] = p.A + (rw.a_valid[t] ? m : 0) * p.lda + q * Dec::kE;
  }
  return rw;
}

template <class Dec, int kU, int MT>
__device__ __forceinline__ void load_pass(Pass<Dec, kU>& ps, const Params& p, int k0, int ke, int q,
                                          const Rows<Dec, MT>& rw) {
  constexpr int kE = Dec::kE, kCH = 4 * kE;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int kc = k0 + u * kCH;               // chunk start
    const int ks = kc + q * kE;                // this thread's span
    const int kg = Dec::kPostScale ? kc : ks;  // the column whose group applies
    const int grp = kg < ke ? group_of(p, kg) : 0;
    // Byte offset of the chunk in a row (16-bit codes: K < 2^30 keeps 2·kc an int).
    const int wbyte = Dec::kBits == 16 ? 2 * kc : kc / (8 / (Dec::kBits < 8 ? Dec::kBits : 8));
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int i = 0; i < Dec::kLB / 4; ++i) ps.raw[u][r][i] = 0;
      if (rw.valid[r] && ks < ke) load_span<Dec::kLB>(ps.raw[u][r], rw.w[r] + wbyte);
      ps.s[u][r] = 1.0f;
      ps.z[u][r] = 0.0f;
      ps.zq[u][r] = 0;
      if (rw.valid[r] && kg < ke) {
        if (p.scale) ps.s[u][r] = __ldg(rw.s[r] + grp);
        if (p.zeros) ps.z[u][r] = __ldg(rw.z[r] + grp);
        // The byte holding the zero code; the code is cut out in row_ctx.
        if (p.qzeros) ps.zq[u][r] = static_cast<uint32_t>(__ldg(rw.zq[r] + grp * p.qzeros_bytes)) >> rw.zshift[r];
      }
    }
  }
}

// Direct A: the B fragments of one span's steps from its A halves, loaded
// from global memory a block of kABlock elements at a time (the decoder's
// permutation block, or 8). aw[i] holds elements 2i, 2i + 1 of the block.
template <class Dec>
inline constexpr int kABlock = Dec::kPermBlock > 8 ? Dec::kPermBlock : 8;

template <class Dec>
__device__ __forceinline__ void a_block(uint32_t (&aw)[kABlock<Dec> / 2], const uint16_t* src, bool live) {
#pragma unroll
  for (int i = 0; i < kABlock<Dec> / 8; ++i) {
    uint4 v = make_uint4(0, 0, 0, 0);
    if (live) v = __ldg(reinterpret_cast<const uint4*>(src) + i);
    aw[4 * i] = v.x, aw[4 * i + 1] = v.y, aw[4 * i + 2] = v.z, aw[4 * i + 3] = v.w;
  }
}

// Step t of a block (kABlock / 4 steps): slots 4t .. 4t + 3 hold elements
// phys(4t .. 4t + 3). Magic decoders pair element i with i + W/2 of a word
// of W codes: low halves of two words, then the high halves (prmt).
template <class Dec>
__device__ __forceinline__ void a_frag(const uint32_t (&aw)[kABlock<Dec> / 2], int t, uint32_t& b0, uint32_t& b1) {
  if constexpr (Dec::kPermBlock == 1) {
    b0 = aw[2 * t];
    b1 = aw[2 * t + 1];
  } else {
    constexpr int kQuarter = Dec::kPermBlock / 4;  // words between paired elements
    b0 = ptx::prmt(aw[t], aw[t + kQuarter], 0x5410u);
    b1 = ptx::prmt(aw[t], aw[t + kQuarter], 0x7632u);
  }
}

// Stages A for the pass at k0 and runs its mma steps on the pass's weights.
template <class Dec, class T, int MT>
__device__ __forceinline__ void run_pass(const Pass<Dec, kUnroll<MT>>& ps, const Rows<Dec, MT>& rw, uint32_t* sA,
                                         const uint32_t* tab, const Params& p, int64_t m0, int k0, int kb, int ke,
                                         float (&acc)[MT][4], float (&part)[MT][4]) {
  using S = Smem<Dec, MT>;
  constexpr int kCH = S::kCH, kU = S::kU, kSteps = S::kE / 4;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  if constexpr (!kDirectA<MT>) {
    __syncthreads();  // the previous pass's fragment reads are done
    stage_a<Dec, MT>(sA, p, m0, k0, ke, k0 == kb);
    __syncthreads();
  }
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int kc = k0 + u * kCH;
    if (kc >= ke) break;  // uniform over the block
    const RowCtx ctx[2] = {row_ctx(ps, u, 0, p), row_ctx(ps, u, 1, p)};
    auto weights = [&](int j, uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
      a0 = Dec::pair(ps.raw[u][0], 2 * j, ctx[0], p, tab, lane);
      a2 = Dec::pair(ps.raw[u][0], 2 * j + 1, ctx[0], p, tab, lane);
      a1 = Dec::pair(ps.raw[u][1], 2 * j, ctx[1], p, tab, lane);
      a3 = Dec::pair(ps.raw[u][1], 2 * j + 1, ctx[1], p, tab, lane);
    };
    if constexpr (kDirectA<MT>) {
      // Row m0 + 8t + g of A, this thread's span, block by block.
      constexpr int kBlock = kABlock<Dec>;
#pragma unroll
      for (int blk = 0; blk < S::kE / kBlock; ++blk) {
        uint32_t aw[MT][kBlock / 2];
#pragma unroll
        for (int t = 0; t < MT; ++t) a_block<Dec>(aw[t], rw.a[t] + kc + blk * kBlock, rw.a_valid[t]);
#pragma unroll
        for (int st = 0; st < kBlock / 4; ++st) {
          uint32_t a0, a1, a2, a3;
          weights(blk * (kBlock / 4) + st, a0, a1, a2, a3);
#pragma unroll
          for (int t = 0; t < MT; ++t) {
            uint32_t b0, b1;
            a_frag<Dec>(aw[t], st, b0, b1);
            mma_m16n8k16<T>(Dec::kPostScale ? part[t] : acc[t], a0, a1, a2, a3, b0, b1);
          }
        }
      }
    } else {
      const uint32_t* frag = sA + (u * 4 * S::kSpan + q * S::kSpan) / 2;
#pragma unroll
      for (int j = 0; j < kSteps; ++j) {
        uint32_t a0, a1, a2, a3;
        weights(j, a0, a1, a2, a3);
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          const uint2 b = *reinterpret_cast<const uint2*>(frag + (t * 8 + g) * S::kRowWords + 2 * j);
          mma_m16n8k16<T>(Dec::kPostScale ? part[t] : acc[t], a0, a1, a2, a3, b.x, b.y);
        }
      }
    }
    if constexpr (Dec::kPostScale) {
      // A chunk lies in one group (the host picks spans so); flush the
      // group's sums at its end and at the end of the range.
      const int after = kc + kCH;
      if (after >= ke || group_of(p, after) != group_of(p, kc)) {
#pragma unroll
        for (int t = 0; t < MT; ++t) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            acc[t][i] = __fadd_rn(acc[t][i], __fmul_rn(ctx[i / 2].s, part[t][i]));
            part[t][i] = 0.0f;
          }
        }
      }
    }
  }
}

template <class Dec, class T, int MT>
__global__ void __launch_bounds__(kMaxThreads) rows_mma_kernel(const Params p) {
  using S = Smem<Dec, MT>;
  constexpr int kU = S::kU, kStep = S::kCH * S::kU;
  extern __shared__ uint4 smem_raw[];
  uint32_t* sA = reinterpret_cast<uint32_t*>(smem_raw);
  uint32_t* tab = sA + S::kAWords;

  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5)) * 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * S::kBM;
  const int K = static_cast<int>(p.K);
  const int kb = static_cast<int>(blockIdx.z) * static_cast<int>(p.k_split);
  const int ke = K - kb > static_cast<int>(p.k_split) ? kb + static_cast<int>(p.k_split) : K;
  const Rows<Dec, MT> rw = thread_rows<Dec, MT>(p, n0, m0, g, q);

  if constexpr (Dec::kTable) {
    Dec::fill(tab, p);
  } else {
    if (threadIdx.x < 16) reinterpret_cast<float*>(tab)[threadIdx.x] = p.table[threadIdx.x];
  }
  if constexpr (kDirectA<MT>) __syncthreads();  // the table is filled (staging passes sync themselves)

  float acc[MT][4] = {};
  float part[MT][4] = {};
  // Two passes in registers, ping-pong: the next pass's weight loads are in
  // flight while this one stages A and runs its mma steps (two copies of the
  // body rather than a copy of the registers, which would wait for them).
  Pass<Dec, kU> pa, pb;
  load_pass<Dec, kU, MT>(pa, p, kb, ke, q, rw);
  for (int k0 = kb;;) {
    if (k0 + kStep < ke) load_pass<Dec, kU, MT>(pb, p, k0 + kStep, ke, q, rw);
    run_pass<Dec, T, MT>(pa, rw, sA, tab, p, m0, k0, kb, ke, acc, part);
    k0 += kStep;
    if (k0 >= ke) break;
    if (k0 + kStep < ke) load_pass<Dec, kU, MT>(pa, p, k0 + kStep, ke, q, rw);
    run_pass<Dec, T, MT>(pb, rw, sA, tab, p, m0, k0, kb, ke, acc, part);
    k0 += kStep;
    if (k0 >= ke) break;
  }

#pragma unroll
  for (int t = 0; t < MT; ++t) write_fragment(p, n0, m0 + 8 * t, acc[t]);
}

}  // namespace lowbit::cuda::gemm
