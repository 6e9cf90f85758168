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
#include "cuda/gemm/decoders.cuh"
#include "cuda/gemm/mma.cuh"
#include "cuda/gemm/params.h"

namespace lowbit::cuda::gemm {

inline constexpr int kMaxThreads = 256;

// Chunks per main-loop iteration: more loads in flight for small M.
template <int MT>
inline constexpr int kUnroll = MT == 1 ? 4 : 2;

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
  static constexpr int kAWords = kBM * kRowWords;
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
__device__ __forceinline__ void stage_a(uint32_t* sA, const Params& p, int64_t m0, int64_t k0, int64_t ke,
                                        bool first) {
  using S = Smem<Dec, MT>;
  constexpr int kUnit = Dec::kPermBlock > 8 ? Dec::kPermBlock : 8;
  constexpr int kUnits = S::kU * S::kCH / kUnit;
  for (int idx = threadIdx.x; idx < S::kBM * kUnits; idx += blockDim.x) {
    const int m = idx / kUnits;
    const int off = (idx % kUnits) * kUnit;
    const int64_t gm = m0 + m;
    if (gm >= p.M && !first) continue;
    const int64_t k = k0 + off;
    uint16_t v[kUnit];
    if (gm < p.M && p.a_vec && k + kUnit <= ke) {
      const auto* src = reinterpret_cast<const uint4*>(p.A + gm * p.K + k);
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
        const int64_t kk = k + i;
        uint16_t x = 0;
        if (gm < p.M && kk < ke) x = p.A[gm * p.K + (p.perm ? static_cast<int64_t>(p.perm[kk]) : kk)];
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
    case OutKind::f16: static_cast<uint16_t*>(p.out)[i] = __half_as_ushort(__float2half_rn(v)); break;
    case OutKind::bf16: static_cast<uint16_t*>(p.out)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v)); break;
  }
}

template <class Dec, class T, int MT>
__global__ void __launch_bounds__(kMaxThreads) rows_mma_kernel(const Params p) {
  using S = Smem<Dec, MT>;
  constexpr int kE = S::kE, kCH = S::kCH, kU = S::kU, kNW = Dec::kLB / 4, kSteps = kE / 4;
  extern __shared__ uint4 smem_raw[];
  uint32_t* sA = reinterpret_cast<uint32_t*>(smem_raw);
  uint32_t* tab = sA + S::kAWords;

  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5)) * 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * S::kBM;
  const int64_t kb = static_cast<int64_t>(blockIdx.z) * p.k_split;
  const int64_t ke = kb + p.k_split < p.K ? kb + p.k_split : p.K;
  const int64_t rows[2] = {n0 + g, n0 + g + 8};
  const bool valid[2] = {rows[0] < p.N, rows[1] < p.N};

  if constexpr (Dec::kTable) {
    Dec::fill(tab, p);
  } else {
    if (threadIdx.x < 16) reinterpret_cast<float*>(tab)[threadIdx.x] = p.table[threadIdx.x];
  }

  float acc[MT][4] = {};
  float part[MT][4] = {};
  bool first = true;
  for (int64_t k0 = kb; k0 < ke; k0 += kCH * kU, first = false) {
    uint32_t raw[kU][2][kNW];
    RowCtx ctx[kU][2];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t kc = k0 + u * kCH;                          // chunk start
      const int64_t ks = kc + q * kE;                           // this thread's span
      const int64_t kg = Dec::kPostScale ? kc : ks;             // the column whose group applies
      const int64_t grp = kg < ke ? kg / p.gs : 0;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const bool live = valid[r] && ks < ke;
#pragma unroll
        for (int i = 0; i < kNW; ++i) raw[u][r][i] = 0;
        if (live) load_span<Dec::kLB>(raw[u][r], p.qweight + rows[r] * p.row_bytes + ks * Dec::kBits / 8);
        float s = 1.0f, z = 0.0f;
        if (valid[r] && kg < ke) {
          if (p.scale) s = __ldg(p.scale + rows[r] * p.G + grp);
          if (p.zeros) {
            z = __ldg(p.zeros + rows[r] * p.G + grp);
          } else if (p.qzeros) {
            const auto type = static_cast<WeightType>(p.wtype);
            z = static_cast<float>(core::weight_int_value(
                type, core::stream_read(p.qzeros + grp * p.qzeros_bytes, rows[r], p.bits)));
          }
        }
        ctx[u][r] = Dec::ctx(p, s, z);
      }
    }
    __syncthreads();  // the previous pass's fragment reads are done (and the table is filled)
    stage_a<Dec, MT>(sA, p, m0, k0, ke, first);
    __syncthreads();

#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t kc = k0 + u * kCH;
      if (kc >= ke) break;  // uniform over the block
      const uint32_t* frag = sA + (u * 4 * S::kSpan + q * S::kSpan) / 2;
#pragma unroll
      for (int j = 0; j < kSteps; ++j) {
        const uint32_t a0 = Dec::pair(raw[u][0], 2 * j, ctx[u][0], p, tab, lane);
        const uint32_t a2 = Dec::pair(raw[u][0], 2 * j + 1, ctx[u][0], p, tab, lane);
        const uint32_t a1 = Dec::pair(raw[u][1], 2 * j, ctx[u][1], p, tab, lane);
        const uint32_t a3 = Dec::pair(raw[u][1], 2 * j + 1, ctx[u][1], p, tab, lane);
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          const uint2 b = *reinterpret_cast<const uint2*>(frag + (t * 8 + g) * S::kRowWords + 2 * j);
          mma16816<T>(Dec::kPostScale ? part[t] : acc[t], a0, a1, a2, a3, b.x, b.y);
        }
      }
      if constexpr (Dec::kPostScale) {
        const int64_t next = kc + kCH;
        if (next >= ke || next % p.gs == 0) {
#pragma unroll
          for (int t = 0; t < MT; ++t) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              acc[t][i] = __fadd_rn(acc[t][i], __fmul_rn(ctx[u][i / 2].s, part[t][i]));
              part[t][i] = 0.0f;
            }
          }
        }
      }
    }
  }

  // c0, c1: row g, columns 2q, 2q + 1; c2, c3: row g + 8.
#pragma unroll
  for (int t = 0; t < MT; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t n = rows[i / 2];
      const int64_t m = m0 + t * 8 + 2 * q + (i & 1);
      if (n >= p.N || m >= p.M) continue;
      if (p.splits > 1) {
        p.partial[(static_cast<int64_t>(blockIdx.z) * p.M + m) * p.N + n] = acc[t][i];
      } else {
        store_out(p, m, n, p.bias ? __fadd_rn(acc[t][i], p.bias[n]) : acc[t][i]);
      }
    }
  }
}

}  // namespace lowbit::cuda::gemm
