// The blockwise quantization kernel behind quantize_blockwise (8-bit codes),
// quantize_4bit (nf4 / fp4, two codes a byte) and act_quant (fp8 e4m3 with
// DeepSeek scales): per block of B consecutive elements, a statistic of
// max|x| is stored, and every element is encoded with it.
//
// Work layout (the napkin math is in bench/notes/gpu-quantization.md):
//   - A CTA of kThreads threads takes tiles of kTile = kThreads * kItems
//     consecutive elements; the grid is one wave of CTAs striding over tiles,
//     so per-CTA setup (code midpoints and the CodeSearch table in shared
//     memory) is paid once per CTA, not per tile.
//   - Thread t owns the chunk [tile * kTile + t * kItems, + kItems), moved as
//     16-byte words. The next tile's chunk is loaded before the current one
//     is encoded, so loads stay in flight during the arithmetic.
//   - Blocks are powers of two >= kItems, so a chunk never straddles blocks;
//     a block is held by G = B / kItems consecutive threads (G = 2 for B = 32,
//     256 for B = 4096). G <= 32: max|x| is reduced with __shfl_xor_sync inside
//     the warp; G > 32: warps reduce, then combine through shared memory.
//   - 64-bit element indices (tensors over 2^31 elements); per-thread offsets
//     inside a tile are 32-bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/quant_math.h"
#include "core/tables.h"
#include "cuda/common/check.h"
#include "cuda/common/convert.cuh"
#include "cuda/common/dispatch.h"
#include "cuda/common/host_nan.cuh"
#include "cuda/common/launch.h"
#include "cuda/common/vec.cuh"
#include "cuda/quant/code_search.cuh"

namespace lowbit::cuda {

namespace blockq {
inline constexpr int kThreads = 256;             // threads of a CTA
inline constexpr int kItems = 16;                // elements a thread holds (2-4 loads of 16 bytes)
inline constexpr int kTile = kThreads * kItems;  // elements a CTA takes per step
inline constexpr int kMinBlock = kItems;         // smallest block the layout handles
inline constexpr int kMaxBlock = kTile;          // largest: one CTA holds a whole block
}  // namespace blockq

// ------------------------------------------------------------------ encoders
// An encoder says what a block stores (stat) and how an element is coded.
//   kCodeBits   8: one code a byte; 4: two a byte, the even element high
//   Params      passed by value to the kernel
//   Shared      its shared memory, filled by setup() (all threads; the kernel
//               synchronizes after)

// 8-bit code map (quantize_blockwise): stat = absmax; y = x * (1 / absmax);
// code = encode_by_midpoints<8>(y, midpoints of code), through CodeSearch.
struct Code8Encoder {
  static constexpr int kCodeBits = 8;
  struct Params {
    const float* code;  // [256] on the device
  };
  struct Shared {
    CodeSearch search;
  };
  __device__ static void setup(Shared& s, const Params& p) {
    s.search.build_mid(p.code);
    __syncthreads();
    s.search.build_entries();
  }
  __device__ static float stat(float amax, const Params&) { return amax; }
  template <int kN>
  __device__ static void encode(const float (&x)[kN], float stat, const Shared& s, const Params&,
                                uint32_t (&codes)[kN]) {
    const float r = core::absmax_reciprocal(stat);
    float y[kN];
#pragma unroll
    for (int i = 0; i < kN; ++i) y[i] = x[i] * r;
    s.search.encode_n(y, codes);
  }
};

// NF4 (quantize_4bit): code = encode_by_midpoints<4>(x * (1 / absmax), nf4
// midpoints). 15 midpoints in 15 banks: the search never conflicts.
struct Nf4Encoder {
  static constexpr int kCodeBits = 4;
  struct Params {
    Table16 table;  // core::kNf4Table
  };
  struct Shared {
    float mid[16];
  };
  __device__ static void setup(Shared& s, const Params& p) {
    if (threadIdx.x < 15) s.mid[threadIdx.x] = core::code_midpoint(p.table.v[threadIdx.x], p.table.v[threadIdx.x + 1]);
  }
  __device__ static float stat(float amax, const Params&) { return amax; }
  template <int kN>
  __device__ static void encode(const float (&x)[kN], float stat, const Shared& s, const Params&,
                                uint32_t (&codes)[kN]) {
    const float r = core::absmax_reciprocal(stat);
#pragma unroll
    for (int i = 0; i < kN; ++i) codes[i] = core::encode_by_midpoints<4>(x[i] * r, s.mid);
  }
};

// bitsandbytes FP4 (quantize_4bit): code = encode_fp4(x * (1 / absmax)).
struct Fp4Encoder {
  static constexpr int kCodeBits = 4;
  struct Params {};
  struct Shared {
    int unused;
  };
  __device__ static void setup(Shared&, const Params&) {}
  __device__ static float stat(float amax, const Params&) { return amax; }
  template <int kN>
  __device__ static void encode(const float (&x)[kN], float stat, const Shared&, const Params&, uint32_t (&codes)[kN]) {
    const float r = core::absmax_reciprocal(stat);
#pragma unroll
    for (int i = 0; i < kN; ++i) codes[i] = core::encode_fp4(x[i] * r);
  }
};

// FP8 e4m3 with a DeepSeek scale (act_quant): stat = s = fp8_block_scale(amax,
// ue8m0); code = fp8_block_encode(x, s) = e4m3_sat(x / s), the conversion
// through the proven hardware path of convert.cuh.
struct Fp8Encoder {
  static constexpr int kCodeBits = 8;
  struct Params {
    bool ue8m0;
  };
  struct Shared {
    int unused;
  };
  __device__ static void setup(Shared&, const Params&) {}
  __device__ static float stat(float amax, const Params& p) { return core::fp8_block_scale(amax, p.ue8m0); }
  template <int kN>
  __device__ static void encode(const float (&x)[kN], float s, const Shared&, const Params&, uint32_t (&codes)[kN]) {
    float y[kN];
    bool nan = false;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      y[i] = x[i] / s;  // the division of core::fp8_block_encode, correctly rounded
      nan |= y[i] != y[i];
    }
    if (nan) {  // NaN input, or Inf / Inf: the CPU's NaN, whose sign e4m3 keeps
#pragma unroll
      for (int i = 0; i < kN; ++i) y[i] = y[i] == y[i] ? y[i] : host_nan(x[i], s);
    }
    uint8_t q[kN];
    to_e4m3_sat(y, q);
#pragma unroll
    for (int i = 0; i < kN; ++i) codes[i] = q[i];
  }
};

// -------------------------------------------------------------------- kernel
template <class T>
struct BlockQuantParams {
  const T* in;
  int64_t n;
  uint8_t* out;    // codes: n bytes (8-bit) or (n + 1) / 2 bytes (4-bit)
  float* stat;     // [ceil(n / block)]
  int log2_block;  // log2(B), B in [kMinBlock, kMaxBlock]
  bool vec_in;     // in is 16-byte aligned
  bool vec_out;    // out is aligned for a whole chunk's codes (16 or 8 bytes)
};

// Loads the chunk of this thread in `tile`; returns how many elements are real.
template <class T>
__device__ __forceinline__ int load_tile_chunk(const BlockQuantParams<T>& p, int64_t tile,
                                               Chunk<T, blockq::kItems>& c) {
  const int64_t base = tile * blockq::kTile + static_cast<int64_t>(threadIdx.x) * blockq::kItems;
  const int64_t rem = p.n - base;
  const int valid = rem >= blockq::kItems ? blockq::kItems : (rem > 0 ? static_cast<int>(rem) : 0);
  if (valid == blockq::kItems && p.vec_in) {
    load_chunk(c, p.in + base);
  } else {
    load_chunk_partial(c, p.in + base, valid);
  }
  return valid;
}

// Writes the codes of `valid` elements at element offset `base`.
template <int kCodeBits>
__device__ __forceinline__ void store_codes(uint8_t* out, int64_t base, const uint32_t (&codes)[blockq::kItems],
                                            int valid, bool vec_out) {
  constexpr int kN = blockq::kItems;
  if constexpr (kCodeBits == 8) {
    Chunk<uint8_t, kN> o;
#pragma unroll
    for (int i = 0; i < kN; ++i) o.elem[i] = static_cast<uint8_t>(codes[i]);
    if (valid == kN && vec_out) {
      store_chunk(out + base, o);
    } else {
      store_chunk_partial(out + base, o, valid);
    }
  } else {
    // byte j = code(2j) << 4 | code(2j + 1); an odd tail leaves the low nibble 0
    uint8_t* dst = out + base / 2;
    if (valid == kN && vec_out) {
      uint32_t w[2] = {0, 0};
#pragma unroll
      for (int j = 0; j < kN / 2; ++j) w[j / 4] |= ((codes[2 * j] << 4) | codes[2 * j + 1]) << (8 * (j % 4));
      *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
    } else {
#pragma unroll
      for (int j = 0; j < kN / 2; ++j) {
        if (2 * j < valid) {
          dst[j] = static_cast<uint8_t>((codes[2 * j] << 4) | (2 * j + 1 < valid ? codes[2 * j + 1] : 0u));
        }
      }
    }
  }
}

template <class T, class Enc>
__global__ void __launch_bounds__(blockq::kThreads) quantize_blocks(BlockQuantParams<T> p, typename Enc::Params ep) {
  using namespace blockq;
  __shared__ typename Enc::Shared s;
  __shared__ float s_red[2][kThreads / 32];  // double-buffered so one barrier per tile suffices
  Enc::setup(s, ep);
  __syncthreads();

  const int log2_g = p.log2_block - 4;  // threads per block, log2 (kItems = 16)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tiles = (p.n + kTile - 1) / kTile;
  int buf = 0;

  int64_t tile = blockIdx.x;
  Chunk<T, kItems> cur;
  int cur_valid = tile < tiles ? load_tile_chunk(p, tile, cur) : 0;
  for (; tile < tiles; tile += gridDim.x) {
    Chunk<T, kItems> next;
    int next_valid = 0;
    if (tile + gridDim.x < tiles) next_valid = load_tile_chunk(p, tile + gridDim.x, next);

    float x[kItems];
    to_floats(cur.elem, x);
    float amax = 0.0f;  // padding elements are 0 and change nothing
#pragma unroll
    for (int i = 0; i < kItems; ++i) amax = core::absmax_update(amax, x[i]);
    // max is exact and order-free on these non-negative, NaN-free partials
    if (log2_g <= 5) {
      for (int off = (1 << log2_g) >> 1; off > 0; off >>= 1) {
        amax = core::absmax_update(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      }
    } else {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) amax = core::absmax_update(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      if (lane == 0) s_red[buf][warp] = amax;
      __syncthreads();
      const int warps = 1 << (log2_g - 5);
      const int w0 = warp & ~(warps - 1);
      amax = 0.0f;
      for (int w = 0; w < warps; ++w) amax = core::absmax_update(amax, s_red[buf][w0 + w]);
      buf ^= 1;
    }

    const float st = Enc::stat(amax, ep);
    const int64_t base = tile * kTile + static_cast<int64_t>(threadIdx.x) * kItems;
    if ((threadIdx.x & ((1 << log2_g) - 1)) == 0 && cur_valid > 0) p.stat[base >> p.log2_block] = st;
    uint32_t codes[kItems];
    Enc::encode(x, st, s, ep, codes);
    store_codes<Enc::kCodeBits>(p.out, base, codes, cur_valid, p.vec_out);

    cur = next;
    cur_valid = next_valid;
  }
}

// Enqueues quantize_blocks on `stream`; nothing for n == 0.
template <class T, class Enc>
void launch_quantize_blocks(const char* op, const T* in, int64_t n, uint8_t* out, float* stat, int64_t block,
                            const typename Enc::Params& ep, cudaStream_t stream) {
  if (n == 0) return;
  const BlockQuantParams<T> p{
      in, n, out, stat, log2_exact(block), aligned16(in), Enc::kCodeBits == 8 ? aligned16(out) : aligned8(out)};
  auto* kernel = &quantize_blocks<T, Enc>;
  const int grid = persistent_grid(kernel, blockq::kThreads, 0, ceil_div(n, blockq::kTile), op);
  kernel<<<grid, blockq::kThreads, 0, stream>>>(p, ep);
  check_launch(op, "quantize_blocks");
}

}  // namespace lowbit::cuda
