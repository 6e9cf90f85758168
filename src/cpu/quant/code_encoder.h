// Fast exact encoding into a sorted 256-entry code map on the CPU.
//
// The code of y is the number of midpoints strictly below it
// (encode_by_midpoints in src/core/tables.h). A binary search costs 8
// dependent, unpredictable compares; instead, bucket y by the top 16 bits of
// its total-order key (sign, exponent, 7 mantissa bits): base[b] is the code
// of the bucket's lowest value, and a bucket holds at most `steps` midpoints
// (1 or 2 for the usual maps), so that many branch-free compare-and-advance
// rounds finish — and vectorize (gathers). Same count by construction; tested
// bit-exact against the reference.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/quant_math.h"
#include "core/tables.h"

namespace lowbit::core::cpu {

class CodeEncoder {
 public:
  explicit CodeEncoder(const float* code) : base_(kBuckets) {
    table_midpoints(code, 256, mid_);
    mid_[255] = __builtin_inff();  // never below y: a full bucket stops advancing
    for (uint32_t b = 0; b < kBuckets; ++b) {
      const float lo = float_from_order_key(b << 16);
      const float hi = float_from_order_key((b << 16) | 0xffffu);
      const int c_lo = (lo == lo) ? static_cast<int>(encode_by_midpoints<8>(lo, mid_)) : 0;
      const int c_hi = (hi == hi) ? static_cast<int>(encode_by_midpoints<8>(hi, mid_)) : 0;
      base_[b] = c_lo;
      if (c_hi - c_lo > steps_) steps_ = c_hi - c_lo;
    }
  }

  const int32_t* base() const { return base_.data(); }
  const float* midpoints() const { return mid_; }
  int steps() const { return steps_; }

 private:
  static constexpr uint32_t kBuckets = 1u << 16;
  float mid_[256];
  std::vector<int32_t> base_;
  int steps_ = 0;
};

// Below this many elements, building a bucket table (~1 ms) costs more than
// it saves: encode by binary search instead.
constexpr int64_t kEncoderTableMin = int64_t{1} << 16;
// The same for a map that comes back call after call with as many elements
// (an optimizer's states, every step): the kept table pays within a few calls.
constexpr int64_t kEncoderTableMinRepeated = int64_t{1} << 12;

// The bucket table of the map `code` for `n` elements to encode: the kept one
// whatever n, else one built (and kept) from `build_from` elements, else null.
// Tables are kept per map (compared by value), since a quantizer or an
// optimizer passes the same map call after call.
std::shared_ptr<const CodeEncoder> code_encoder_for(const float* code, int64_t n,
                                                    int64_t build_from = kEncoderTableMin);

}  // namespace lowbit::core::cpu
