// The codes of new 8-bit optimizer states on CUDA: core::optim::state_code of
// encode_by_midpoints<8>, the nearest code with bitsandbytes' tie and sign
// rules, in one table read and one midpoint read per value.
//
// The table has CodeSearch's buckets at 128 per octave
// (src/cuda/quant/code_search.cuh: sign, exponent and top mantissa bits of
// y), fine enough for both dynamic maps. Per bucket [ymin, ymax] it stores
//   base      the midpoints below ymin (encode_by_midpoints<8>(ymin)),
//   kTie      base is odd and below 255 (where state_code's tie rule acts),
//   kNeg      the sign bits of code[base] and code[base + 1],
// valid where at most one midpoint lies in [ymin, ymax] (every bucket of
// bitsandbytes' signed and unsigned dynamic maps). Then for y in the bucket the midpoints below y are
// base + (y > mid[base]); mid[base + 1] > ymax, so a tie (y == mid[c], c odd)
// can only be with mid[base], and the code's sign bit is kNeg's. A map with a
// fuller bucket finishes every value by the binary search (`wide`).
#pragma once

#include <cstdint>

#include "core/float_convert.h"
#include "core/optim_blockwise.h"
#include "core/tables.h"
#include "cuda/quant/code_search.cuh"

namespace lowbit::cuda::optim {

struct StateCodes {
  using Buckets = CodeBuckets<7>;
  static constexpr int kEntries = Buckets::kEntries;  // 6404, 12.8 KB
  static constexpr uint32_t kTie = 1u << 8;
  static constexpr int kNegShift = 9;  // bit 9: code[base] negative; bit 10: code[base + 1]

  float code[256];
  float mid[256];  // mid[i] = code_midpoint(code[i], code[i + 1]), i < 255; mid[255] = +Inf
  uint16_t entry[kEntries];
  int wide;  // some bucket holds two midpoints or more

  // All threads of the CTA take part; ends synchronized.
  __device__ void build(const float* qmap) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
      code[i] = qmap[i];
      mid[i] = i < 255 ? core::code_midpoint(qmap[i], qmap[i + 1]) : __int_as_float(0x7f800000);
    }
    __syncthreads();
    int full = 0;
    for (int e = threadIdx.x; e < kEntries; e += blockDim.x) {
      float ymin, ymax;
      Buckets::range(static_cast<uint32_t>(e), ymin, ymax);
      const uint32_t base = core::encode_by_midpoints<8>(ymin, mid);
      uint32_t top = 0;  // midpoints not above ymax
#pragma unroll
      for (uint32_t step = 128; step > 0; step >>= 1) top += (ymax >= mid[top + step - 1]) ? step : 0u;
      full |= top - base > 1u ? 1 : 0;
      const uint32_t neg = (core::float_bits(code[base]) >> 31) | (core::float_bits(code[base < 255u ? base + 1u : base]) >> 31) << 1;
      entry[e] = static_cast<uint16_t>(base | ((base & 1u) != 0u && base < 255u ? kTie : 0u) | neg << kNegShift);
    }
    const int any = __syncthreads_or(full);
    if (threadIdx.x == 0) wide = any;
    __syncthreads();
  }

  // codes[i]: state_code of s[i] on this map, r = absmax_reciprocal of the
  // block's absmax; keep_sign for a signed map (state_code's sign rule).
  template <int kN>
  __device__ __forceinline__ void encode(const float (&s)[kN], float r, bool keep_sign, uint32_t (&codes)[kN]) const {
    if (wide == 0) {
#pragma unroll
      for (int i = 0; i < kN; ++i) {
        const float y = s[i] * r;
        const float v = (y == y) ? y : 0.0f;  // encode_by_midpoints' NaN rule
        const uint32_t e = entry[Buckets::bucket(v)];
        const uint32_t base = e & 0xffu;
        const float m = mid[base];
        const uint32_t up = (v > m || ((e & kTie) != 0u && y == m)) ? 1u : 0u;
        uint32_t c = base + up;
        if (keep_sign && ((e >> (kNegShift + up)) & 1u) != (core::float_bits(s[i]) >> 31)) {
          c = (s[i] > 0.0f ? c + 1u : c - 1u) & 0xffu;
        }
        codes[i] = c;
      }
    } else {
#pragma unroll
      for (int i = 0; i < kN; ++i) {
        const float y = s[i] * r;
        codes[i] = core::optim::state_code(s[i], y, core::encode_by_midpoints<8>(y, mid), code, mid, keep_sign);
      }
    }
  }
};

}  // namespace lowbit::cuda::optim
