// The blockwise dequantization kernel behind dequantize_blockwise (8-bit
// codes into a 256-entry map) and dequantize_4bit (nf4 / fp4, two codes a
// byte): out[i] = table[q[i]] * absmax[i / B], converted to the out dtype.
// CTAs of kThreads stride over tiles in one wave, loading the next tile's
// codes (and absmax) before converting the current one; the table sits in
// shared memory (1 KB / 64 bytes). The layout is described at the kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/quant_math.h"
#include "cuda/common/check.h"
#include "cuda/common/convert.cuh"
#include "cuda/common/dispatch.h"
#include "cuda/common/host_nan.cuh"
#include "cuda/common/launch.h"
#include "cuda/common/vec.cuh"

namespace lowbit::cuda {

namespace blockdq {
inline constexpr int kThreads = 256;
inline constexpr int kRows = 4;  // output words a thread writes per tile (their code loads are in flight together)
}  // namespace blockdq

// absmax[b], plain (f32) or double-quantized (u8 codes + nested state).
struct AbsmaxSource {
  const float* plain;    // f32 [nblocks], or null when nested
  const uint8_t* q;      // u8 [nblocks] (nested)
  const float* code2;    // [256] (nested)
  const float* absmax2;  // [ceil(nblocks / B2)] (nested)
  const float* offset;   // [1] (nested)
  int log2_block2;       // log2(B2) (nested)

  __device__ __forceinline__ float operator()(int64_t b) const {
    if (plain) return __ldg(plain + b);
    return core::nested_absmax_decode(__ldg(code2 + __ldg(q + b)), __ldg(absmax2 + (b >> log2_block2)), __ldg(offset));
  }

  // The same in two steps, for kernels that load ahead: fetch issues only
  // loads that need no other load's value; finish, at the value's use, looks
  // the nested code up (the one dependent load) and decodes.
  struct Fetched {
    float a = 0.0f;  // the absmax (plain) or the absmax2 of its group (nested)
    int q = -1;      // the nested code; -1: `a` is the value
  };
  __device__ __forceinline__ Fetched fetch(int64_t b) const {
    if (plain) return {__ldg(plain + b), -1};
    return {__ldg(absmax2 + (b >> log2_block2)), static_cast<int>(__ldg(q + b))};
  }
  __device__ __forceinline__ float finish(Fetched f) const {
    return f.q < 0 ? f.a : core::nested_absmax_decode(__ldg(code2 + f.q), f.a, __ldg(offset));
  }
};

template <class T>
struct BlockDequantParams {
  const uint8_t* in;   // codes
  int64_t n;           // elements
  const float* table;  // [256] map on the device (8-bit); unused for 4-bit
  Table16 table16;     // the 4-bit table (4-bit)
  AbsmaxSource absmax;
  T* out;
  int log2_block;
  bool vec_in;   // in is 16-byte aligned
  bool vec_out;  // out is 16-byte aligned
};

// kCodeBits: 8 (one code a byte) or 4 (two a byte, the even element high).
//
// Layout: the unit is one 16-byte output word, kOut = 16 / sizeof(T)
// elements, whose codes are kIn = kOut * kCodeBits / 8 bytes (2 to 8). In a
// tile, word (r, t) of row r and thread t covers elements
// (r * kThreads + t) * kOut: each warp-wide load and store covers one
// contiguous span, so every 32-byte sector is written whole by one
// instruction. (A thread owning 64 contiguous output bytes instead writes
// half sectors per instruction; measured on an H200, that ran at 0.24-0.44 of
// copy bandwidth for f32 outputs.) B >= 32 >= kOut, so a word has one absmax.
template <class T, int kCodeBits>
__global__ void __launch_bounds__(blockdq::kThreads) dequantize_blocks(BlockDequantParams<T> p) {
  using namespace blockdq;
  constexpr int kTable = 1 << kCodeBits;
  constexpr int kOut = 16 / static_cast<int>(sizeof(T));
  constexpr int kIn = kOut * kCodeBits / 8;
  constexpr int kTileElems = kRows * kThreads * kOut;
  static_assert(kIn == 2 || kIn == 4 || kIn == 8, "code bytes per output word");
  __shared__ float s_table[kTable];
  if (threadIdx.x < kTable) {
    if constexpr (kCodeBits == 8) {
      s_table[threadIdx.x] = p.table[threadIdx.x];
    } else {
      s_table[threadIdx.x] = p.table16.v[threadIdx.x];
    }
  }
  __syncthreads();

  const int64_t tiles = (p.n + kTileElems - 1) / kTileElems;
  // Codes (little-endian in `codes`) and absmax of word r of this thread in `tile`; returns its element count.
  auto load = [&](int64_t tile, int r, uint64_t& codes, float& absmax) -> int {
    const int64_t base = tile * kTileElems + (static_cast<int64_t>(r) * kThreads + threadIdx.x) * kOut;
    const int64_t rem = p.n - base;
    const int valid = rem >= kOut ? kOut : (rem > 0 ? static_cast<int>(rem) : 0);
    const uint8_t* src = p.in + base * kCodeBits / 8;
    if (valid == kOut && p.vec_in) {
      if constexpr (kIn == 8) {
        const uint2 w = __ldg(reinterpret_cast<const uint2*>(src));
        codes = w.x | (static_cast<uint64_t>(w.y) << 32);
      } else if constexpr (kIn == 4) {
        codes = __ldg(reinterpret_cast<const unsigned int*>(src));
      } else {
        codes = __ldg(reinterpret_cast<const unsigned short*>(src));
      }
    } else {
      codes = 0;
      for (int b = 0; b < (valid * kCodeBits + 7) / 8; ++b) codes |= static_cast<uint64_t>(src[b]) << (8 * b);
    }
    absmax = valid > 0 ? p.absmax(base >> p.log2_block) : 0.0f;
    return valid;
  };

  uint64_t cur_codes[kRows], next_codes[kRows];
  float cur_absmax[kRows], next_absmax[kRows];
  int cur_valid[kRows], next_valid[kRows];
  int64_t tile = blockIdx.x;
#pragma unroll
  for (int r = 0; r < kRows; ++r) cur_valid[r] = tile < tiles ? load(tile, r, cur_codes[r], cur_absmax[r]) : 0;
  for (; tile < tiles; tile += gridDim.x) {
    const bool more = tile + gridDim.x < tiles;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      next_codes[r] = 0;
      next_absmax[r] = 0.0f;
      next_valid[r] = more ? load(tile + gridDim.x, r, next_codes[r], next_absmax[r]) : 0;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float v[kOut], t[kOut];
      bool nan = false;
#pragma unroll
      for (int i = 0; i < kOut; ++i) {
        uint32_t q;
        if constexpr (kCodeBits == 8) {
          q = static_cast<uint32_t>(cur_codes[r] >> (8 * i)) & 0xffu;
        } else {
          const uint32_t byte = static_cast<uint32_t>(cur_codes[r] >> (8 * (i / 2))) & 0xffu;
          q = (i % 2 == 0) ? (byte >> 4) : (byte & 0xfu);
        }
        t[i] = s_table[q];
        v[i] = t[i] * cur_absmax[r];
        nan |= v[i] != v[i];
      }
      if (nan) {  // an Inf or NaN absmax: the CPU's NaN bits
#pragma unroll
        for (int i = 0; i < kOut; ++i) v[i] = mul_host_nan(t[i], cur_absmax[r]);
      }
      Chunk<T, kOut> o;
      from_floats(v, o.elem);
      T* dst = p.out + tile * kTileElems + (static_cast<int64_t>(r) * kThreads + threadIdx.x) * kOut;
      if (cur_valid[r] == kOut && p.vec_out) {
        store_chunk(dst, o);
      } else {
        store_chunk_partial(dst, o, cur_valid[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      cur_codes[r] = next_codes[r];
      cur_absmax[r] = next_absmax[r];
      cur_valid[r] = next_valid[r];
    }
  }
}

template <class T, int kCodeBits>
void launch_dequantize_blocks(const char* op, const BlockDequantParams<T>& p, cudaStream_t stream) {
  if (p.n == 0) return;
  constexpr int64_t kTileElems = blockdq::kRows * blockdq::kThreads * (16 / static_cast<int>(sizeof(T)));
  auto* kernel = &dequantize_blocks<T, kCodeBits>;
  const int grid = persistent_grid(kernel, blockdq::kThreads, 0, ceil_div(p.n, kTileElems), op);
  kernel<<<grid, blockdq::kThreads, 0, stream>>>(p);
  check_launch(op, "dequantize_blocks");
}

// The AbsmaxSource of an op's absmax argument and nested state.
template <class Args>
AbsmaxSource absmax_source(const Args& a) {
  AbsmaxSource s{};
  if (!a.nested.present()) {
    s.plain = a.absmax.template ptr<const float>();
    return s;
  }
  s.q = a.absmax.template ptr<const uint8_t>();
  s.code2 = a.nested.code.template ptr<const float>();
  s.absmax2 = a.nested.absmax.template ptr<const float>();
  s.offset = a.nested.offset.template ptr<const float>();
  s.log2_block2 = log2_exact(a.nested.blocksize);
  return s;
}

}  // namespace lowbit::cuda
