// The byte tables a 16-entry lookup by vpshufb / tbl reads (the Highway
// kernels' TableLookupBytes): byte b of each value's bits at position i of
// table b, for fp32 values and for values rounded to bf16 (f32_to_bf16).
#pragma once

#include <cstdint>

#include "core/float_convert.h"

namespace lowbit::core::cpu {

inline void f32_byte_tables(const float* values16, uint8_t (&bytes)[4][16]) {
  for (int i = 0; i < 16; ++i) {
    const uint32_t u = float_bits(values16[i]);
    for (int b = 0; b < 4; ++b) bytes[b][i] = static_cast<uint8_t>(u >> (8 * b));
  }
}

inline void bf16_byte_tables(const float* values16, uint8_t (&bytes)[2][16]) {
  for (int i = 0; i < 16; ++i) {
    const uint16_t h = f32_to_bf16(values16[i]);
    bytes[0][i] = static_cast<uint8_t>(h & 0xff);
    bytes[1][i] = static_cast<uint8_t>(h >> 8);
  }
}

}  // namespace lowbit::core::cpu
