// dequantize_4bit's fused block decoder in Highway (decode4_hwy.cpp): one
// source for SSE4, AVX2 and AVX-512 (256-bit vectors) on x86 and NEON on
// Arm, the target picked as cpu/hwy_targets.h says. spans.cpp takes it
// where its AVX-512 BF16 loop does not run.
#pragma once

#include <cstdint>

#include "core/float_convert.h"

namespace lowbit::core::cpu::hwy_decode4 {

// out[k] = table[code k] * scales[k / bs] for k < count (bitsandbytes' nibbles, the high one first; bs a
// multiple of 32), in fp32 or rounded to bf16 as f32_to_bf16 does.
void blocks(const uint8_t* packed, int64_t count, int64_t bs, const float* scales, const float* table, float* out);
void blocks(const uint8_t* packed, int64_t count, int64_t bs, const float* scales, const float* table, BFloat16* out);

}  // namespace lowbit::core::cpu::hwy_decode4
