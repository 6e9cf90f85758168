// Encoding into a sorted 256-entry code map at memory speed. The code of y is
// the number of midpoints mid[i] = code_midpoint(code[i], code[i + 1]) below
// y (encode_by_midpoints<8> in src/core/tables.h; NaN counts as 0).
//
// encode_by_midpoints<8> is a binary search: 8 dependent shared-memory reads
// per value, and the first levels of its tree all sit in one bank (mid[127],
// mid[63], mid[191], mid[31 + 64k] ...), so a warp serializes on bank
// conflicts: about 38 shared wavefronts per 32 values, where a quantize at
// 85% of an H100's 3 TB/s can afford about 9.
//
// CodeSearch splits y's range into buckets: sign, exponent and the top
// kMantBits mantissa bits of |y| for 2^-24 <= |y| < 2, plus one bucket per sign
// below and one above (Inf included). Per bucket [ymin, ymax] it stores
//   base = encode_by_midpoints<8>(ymin)            midpoints below every y
//   k    = encode_by_midpoints<8>(ymax) - base     midpoints inside the bucket
// and a value's code is base plus the number of those k midpoints below it.
// The map is sorted (the op's contract), so the midpoints below y are a
// prefix and this is exactly the count. With 64 buckets per octave, the
// signed dynamic map has k <= 1 in every bucket: one table read and one
// midpoint read per value, no divergence (the unsigned one has k = 2 in
// eight buckets). Larger k (other maps) take a short binary search. Checked against encode_by_midpoints<8> over all 2^32 inputs by the
// selftest.
#pragma once

#include <cstdint>

#include "core/hd.h"
#include "core/tables.h"

namespace lowbit::cuda {

// The buckets of y: sign, exponent and the top kMantBits mantissa bits of
// |y| for 2^-24 <= |y| < 2, one bucket per sign below and one above.
template <int kMantBits>
struct CodeBuckets {
  static constexpr uint32_t kShift = 23 - kMantBits;  // |y| bits >> kShift = exponent:mantissa bucket
  static constexpr uint32_t kLo = 103u << kMantBits;  // 2^-24: smaller |y| share bucket 0
  static constexpr uint32_t kHi = 128u << kMantBits;  // 2^1: larger |y| (and Inf) share the last bucket
  static constexpr int kPerSign = static_cast<int>(kHi - kLo) + 2;
  static constexpr int kEntries = 2 * kPerSign;

  __device__ __forceinline__ static uint32_t bucket(float y) {
    const uint32_t b = core::float_bits(y);
    const uint32_t k = (b & 0x7fffffffu) >> kShift;
    const uint32_t j = k < kLo ? 0u : (k >= kHi ? kHi - kLo + 1u : k - kLo + 1u);
    return (b >> 31) * static_cast<uint32_t>(kPerSign) + j;
  }

  // The values bucket e holds: every y with bucket(y) == e lies in [ymin, ymax].
  __device__ static void range(uint32_t e, float& ymin, float& ymax) {
    const uint32_t sign = e >= static_cast<uint32_t>(kPerSign) ? 0x80000000u : 0u;
    const uint32_t j = sign ? e - static_cast<uint32_t>(kPerSign) : e;
    uint32_t lo_bits, hi_bits;  // |y| range of the bucket, as fp32 bits
    if (j == 0) {
      lo_bits = 0;
      hi_bits = (kLo << kShift) - 1u;
    } else if (j == static_cast<uint32_t>(kPerSign - 1)) {
      lo_bits = kHi << kShift;
      hi_bits = 0x7f800000u;  // +Inf; NaN never reaches the table
    } else {
      lo_bits = (kLo + j - 1u) << kShift;
      hi_bits = lo_bits + (1u << kShift) - 1u;
    }
    ymin = core::bits_float(sign ? (hi_bits | sign) : lo_bits);
    ymax = core::bits_float(sign ? (lo_bits | sign) : hi_bits);
  }
};

struct CodeSearch : CodeBuckets<6> {  // 64 buckets per octave: 3204 entries, 6.4 KB
  float mid[256];            // mid[i] = code_midpoint(code[i], code[i + 1]), i < 255; mid[255] = +Inf
  uint16_t entry[kEntries];  // base | k << 8

  // Fills mid and entry; all threads of the CTA take part, and the caller
  // synchronizes (__syncthreads) between build_mid and build_entries and after.
  __device__ void build_mid(const float* code) {
    for (int i = threadIdx.x; i < 255; i += blockDim.x) mid[i] = core::code_midpoint(code[i], code[i + 1]);
    if (threadIdx.x == 0) mid[255] = __int_as_float(0x7f800000);  // +Inf: read by finish() for base 255, never below y
  }
  __device__ void build_entries() {
    for (int e = threadIdx.x; e < kEntries; e += blockDim.x) {
      float ymin, ymax;
      range(static_cast<uint32_t>(e), ymin, ymax);
      const uint32_t base = core::encode_by_midpoints<8>(ymin, mid);
      const uint32_t top = core::encode_by_midpoints<8>(ymax, mid);
      entry[e] = static_cast<uint16_t>(base | ((top - base) << 8));
    }
  }

  // Number of mid[base .. base + k) below y for k <= 1: y > mid[base]. With
  // k = 0, mid[base] is not below ymax >= y (sorted; mid[255] = +Inf), so the
  // comparison is false.
  __device__ __forceinline__ uint32_t finish_short(float y, uint32_t e) const {
    const uint32_t base = e & 0xffu;
    return base + ((y > mid[base]) ? 1u : 0u);
  }
  // Any k: the lower bound of y in mid[base .. base + k).
  __device__ uint32_t finish_long(float y, uint32_t e) const {
    uint32_t c = e & 0xffu;
    for (uint32_t n = e >> 8; n > 0;) {
      const uint32_t h = n >> 1;
      if (y > mid[c + h]) {
        c += h + 1;
        n -= h + 1;
      } else {
        n = h;
      }
    }
    return c;
  }

  // The code of y: encode_by_midpoints<8>(y, mid).
  __device__ __forceinline__ uint32_t encode(float y) const {
    if (!(y == y)) y = 0.0f;  // encode_by_midpoints' NaN rule
    const uint32_t e = entry[bucket(y)];
    return (e >> 9) != 0u ? finish_long(y, e) : finish_short(y, e);
  }

  // codes[i] = encode(y[i]); the table reads of all values are issued before
  // the first dependent midpoint read, so they overlap.
  template <int kN>
  __device__ __forceinline__ void encode_n(const float (&y)[kN], uint32_t (&codes)[kN]) const {
    float v[kN];
    uint32_t e[kN], wide = 0;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      v[i] = (y[i] == y[i]) ? y[i] : 0.0f;  // encode_by_midpoints' NaN rule
      e[i] = entry[bucket(v[i])];
      wide |= e[i] >> 9;  // some bucket holds k > 1 midpoints
    }
    if (wide == 0u) {  // one branch for the chunk (always taken for the dynamic map)
#pragma unroll
      for (int i = 0; i < kN; ++i) codes[i] = finish_short(v[i], e[i]);
    } else {
#pragma unroll
      for (int i = 0; i < kN; ++i) codes[i] = finish_long(v[i], e[i]);
    }
  }
};

}  // namespace lowbit::cuda
