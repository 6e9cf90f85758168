// Vectorizable span kernels of the CPU fast path. Each is compiled for
// several instruction sets (target_clones: AVX-512, AVX2, baseline) and the
// loader picks one at run time, so the library stays portable while the hot
// loops use the widest vectors the machine has. Results never depend on the
// choice: the loops do the same fp32 operations in the same order per element
// (no FMA contraction: the library builds with -ffp-contract=off).
#pragma once

#include <cstdint>

#include "core/float_convert.h"

namespace lowbit::core::cpu {

// fp32 copies of fp16 / bf16 / fp32 data.
void to_f32_span(const float* x, int64_t n, float* out);
void to_f32_span(const Half* x, int64_t n, float* out);
void to_f32_span(const BFloat16* x, int64_t n, float* out);

// out = the float dtype's rounding of x (from_f32 of float_convert.h).
void from_f32_span(const float* x, int64_t n, float* out);
void from_f32_span(const float* x, int64_t n, Half* out);
void from_f32_span(const float* x, int64_t n, BFloat16* out);

// max |x| (absmax_update of src/core/quant_math.h).
float absmax_span(const float* x, int64_t n);

// codes[i] = number of mid[0..14] strictly below y = x[i] * r (NaN as 0):
// encode_by_midpoints<4> written as a sum.
void encode_nf4_span(const float* x, float r, int64_t n, const float* mid, uint8_t* codes);
// codes[i] = number of mid[0..254] strictly below y = x[i] * r (NaN as 0),
// through the bucket table of CodeEncoder: start at base[bucket(y)], then
// `steps` branch-free compare-and-advance rounds (steps = the most midpoints
// any bucket holds). mid[255] must be +Inf.
void encode_code8_span(const float* x, float r, int64_t n, const int32_t* base, const float* mid, int steps,
                       uint8_t* codes);
// out[i] = table[code_i] * m for `count` 4-bit codes packed two a byte (the
// even element in the high nibble), and out[i] = code[q[i]] * m for bytes:
// the dequantization loops, with AVX-512 table permutes / gathers.
void decode4_span(const uint8_t* packed, int64_t count, const float* table16, float m, float* out);
// The same over whole blocks of bs elements from a block start (the last may
// be ragged), block b scaled by scales[b], written straight as float or bf16
// (from_f32's rounding); false, nothing written, where the fused loop does
// not fit (a CPU without AVX-512 BW, DQ and BF16, bs not a multiple of 32).
bool decode4_blocks_span(const uint8_t* packed, int64_t count, int64_t bs, const float* scales, const float* table16,
                         float* out);
bool decode4_blocks_span(const uint8_t* packed, int64_t count, int64_t bs, const float* scales, const float* table16,
                         BFloat16* out);
void decode8_span(const uint8_t* q, int64_t n, const float* code256, float m, float* out);

// codes[i] = encode_fp4(x[i] * r).
void encode_fp4_span(const float* x, float r, int64_t n, uint8_t* codes);
// out[j] = codes[2j] << 4 | codes[2j + 1] for j < n / 2 (n even).
void pack_nibbles(const uint8_t* codes, int64_t n, uint8_t* out);

}  // namespace lowbit::core::cpu
