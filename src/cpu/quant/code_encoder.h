// Fast exact encoding into a sorted 256-entry code map on the CPU.
//
// The code of y is the number of midpoints strictly below it
// (encode_by_midpoints in src/core/tables.h). A binary search costs 8
// dependent compares; instead, bucket y by the top 16 bits of its total-order
// key (sign, exponent, 7 mantissa bits): base[b] is the code of the bucket's
// lowest value, and a bucket holds at most a few midpoints, so one compare
// (and rarely a short scan) finishes. Same result as the search, by
// construction; tested bit-exact against the reference.
#pragma once

#include <cstdint>
#include <vector>

#include "core/quant_math.h"
#include "core/tables.h"

namespace lowbit::core::cpu {

class CodeEncoder {
 public:
  explicit CodeEncoder(const float* code) {
    table_midpoints(code, 256, mid_);
    mid_[255] = __builtin_inff();  // so that mid_[base + 1 .. ] reads stay in bounds and false
    base_.resize(kBuckets);
    multi_.resize(kBuckets);
    for (uint32_t b = 0; b < kBuckets; ++b) {
      const float lo = from_order_key(b << 16);
      const float hi = from_order_key((b << 16) | 0xffffu);
      const uint32_t c_lo = (lo == lo) ? encode_by_midpoints<8>(lo, mid_) : 0;
      const uint32_t c_hi = (hi == hi) ? encode_by_midpoints<8>(hi, mid_) : 0;
      base_[b] = static_cast<uint8_t>(c_lo);
      multi_[b] = static_cast<uint8_t>(c_hi > c_lo + 1);
    }
  }

  uint32_t operator()(float y) const {
    if (!(y == y)) y = 0.0f;
    const uint32_t b = float_order_key(y) >> 16;
    uint32_t c = base_[b];
    c += (y > mid_[c]) ? 1u : 0u;
    if (__builtin_expect(multi_[b] != 0, 0)) {
      while (c < 255 && y > mid_[c]) ++c;
    }
    return c;
  }

 private:
  static constexpr uint32_t kBuckets = 1u << 16;
  static float from_order_key(uint32_t k) {
    return bits_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
  }
  float mid_[256];
  std::vector<uint8_t> base_;
  std::vector<uint8_t> multi_;
};

}  // namespace lowbit::core::cpu
