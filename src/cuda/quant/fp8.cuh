// FP8 e4m3 weight kernels with DeepSeek block×block scales (docs/formats.md, "FP8 block scaling"):
// weight_quant_tiles and weight_dequant_rows / weight_dequant_elems.
// act_quant is the blockwise kernel of quantize.cuh with Fp8Encoder.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/float_convert.h"
#include "core/quant_math.h"
#include "cuda/common/convert.cuh"
#include "cuda/common/host_nan.cuh"
#include "cuda/common/vec.cuh"

namespace lowbit::cuda {

namespace fp8w {
inline constexpr int kThreads = 256;
inline constexpr int kUnroll = 4;  // output words a thread has in flight (weight_dequant_rows)
}  // namespace fp8w

// One CTA per block×block tile of W[rows, cols] (grid-stride over tiles):
// pass 1 reduces max|w| over the tile, pass 2 encodes it (re-reading the tile,
// mostly from L2). The tile is walked as a [nr, B] grid of which columns
// >= nc (the ragged right edge) are skipped, so a warp reads along a row.
template <class T>
__global__ void __launch_bounds__(fp8w::kThreads)
    weight_quant_tiles(const T* in, int64_t rows, int64_t cols, int log2_block, int64_t scale_cols, uint8_t* out,
                       float* scale) {
  __shared__ float s_red[2][fp8w::kThreads / 32];
  const int B = 1 << log2_block;
  const int64_t tiles = ((rows + B - 1) >> log2_block) * scale_cols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int buf = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t bi = tile / scale_cols, bj = tile - bi * scale_cols;
    const int64_t r0 = bi << log2_block, c0 = bj << log2_block;
    const int nr = static_cast<int>(rows - r0 < B ? rows - r0 : B);
    const int nc = static_cast<int>(cols - c0 < B ? cols - c0 : B);
    const T* src = in + r0 * cols + c0;
    float amax = 0.0f;
    for (int idx = threadIdx.x; idx < (nr << log2_block); idx += fp8w::kThreads) {
      const int r = idx >> log2_block, c = idx & (B - 1);
      if (c < nc) amax = core::absmax_update(amax, core::to_f32(src[static_cast<int64_t>(r) * cols + c]));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = core::absmax_update(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (lane == 0) s_red[buf][warp] = amax;
    __syncthreads();
    amax = 0.0f;
#pragma unroll
    for (int w = 0; w < fp8w::kThreads / 32; ++w) amax = core::absmax_update(amax, s_red[buf][w]);
    buf ^= 1;
    const float s = core::fp8_block_scale(amax, false);
    if (threadIdx.x == 0) scale[tile] = s;
    uint8_t* dst = out + r0 * cols + c0;
    for (int idx = threadIdx.x; idx < (nr << log2_block); idx += fp8w::kThreads) {
      const int r = idx >> log2_block, c = idx & (B - 1);
      if (c < nc) {
        const int64_t off = static_cast<int64_t>(r) * cols + c;
        const float x = core::to_f32(src[off]);
        uint8_t q = core::fp8_block_encode(x, s);
        if ((q & 0x7fu) == 0x7fu) q = core::f32_to_e4m3(host_nan(x, s), true);  // the CPU's NaN sign
        dst[off] = q;
      }
    }
  }
}

// out[r, c] = e4m3_to_f32(q[r, c]) * scale[r / B, c / B], for cols % kOut ==
// 0, in kOut-byte and out 16-byte aligned. The unit is one 16-byte output
// word of kOut = 16 / sizeof(T) elements (kOut codes, one row, one column
// tile as B >= 16); consecutive threads take consecutive words, so each
// warp-wide load and store is one contiguous span (whole 32-byte sectors per
// instruction), and a thread has kUnroll words in flight.
template <class T>
__global__ void __launch_bounds__(fp8w::kThreads)
    weight_dequant_rows(const uint8_t* in, const float* scale, T* out, int64_t rows, int64_t cols, int log2_block,
                        int64_t scale_cols) {
  using namespace fp8w;
  constexpr int kOut = 16 / static_cast<int>(sizeof(T));
  const int64_t per_row = cols / kOut;
  const int64_t words = rows * per_row;
  const bool narrow = words <= 0xffffffffll;  // 32-bit division suffices
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t w0 = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; w0 < words; w0 += stride * kUnroll) {
    uint64_t codes[kUnroll];
    float s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t w = w0 + u * stride;
      codes[u] = 0;
      s[u] = 0.0f;
      if (w < words) {
        const int64_t r = narrow ? static_cast<uint32_t>(w) / static_cast<uint32_t>(per_row) : w / per_row;
        const int64_t col = (w - r * per_row) * kOut;
        if constexpr (kOut == 8) {
          const uint2 v = __ldg(reinterpret_cast<const uint2*>(in + w * kOut));
          codes[u] = v.x | (static_cast<uint64_t>(v.y) << 32);
        } else {
          codes[u] = __ldg(reinterpret_cast<const unsigned int*>(in + w * kOut));
        }
        s[u] = __ldg(scale + (r >> log2_block) * scale_cols + (col >> log2_block));
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t w = w0 + u * stride;
      if (w < words) {
        uint8_t q[kOut];
#pragma unroll
        for (int i = 0; i < kOut; ++i) q[i] = static_cast<uint8_t>(codes[u] >> (8 * i));
        float v[kOut], x[kOut];
        from_e4m3(q, v);
        bool nan = false;
#pragma unroll
        for (int i = 0; i < kOut; ++i) {
          x[i] = v[i] * s[u];
          nan |= x[i] != x[i];
        }
        if (nan) {  // NaN codes (or scales): the CPU's NaN bits
#pragma unroll
          for (int i = 0; i < kOut; ++i) x[i] = mul_host_nan(v[i], s[u]);
        }
        Chunk<T, kOut> o;
        from_floats(x, o.elem);
        store_chunk(out + w * kOut, o);
      }
    }
  }
}

// The same, element by element, for any cols and alignment.
template <class T>
__global__ void __launch_bounds__(fp8w::kThreads)
    weight_dequant_elems(const uint8_t* in, const float* scale, T* out, int64_t rows, int64_t cols, int log2_block,
                         int64_t scale_cols) {
  const int64_t n = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * fp8w::kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * fp8w::kThreads + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / cols, c = i - r * cols;
    const float s = scale[(r >> log2_block) * scale_cols + (c >> log2_block)];
    out[i] = core::from_f32<T>(mul_host_nan(core::e4m3_to_f32(in[i]), s));
  }
}

}  // namespace lowbit::cuda
