// Quantization code maps (docs/formats.md, "Code maps"), reproducing bitsandbytes' values bit for
// bit (its float32 arithmetic emulated). They come sorted ascending — except
// where bitsandbytes' own construction is not: create_linear_map with fewer
// than 8 bits (unsigned: zeros padded into the middle; signed 4-bit: the
// middle linspace value is -3·2^-26, just after the inserted 0). Quantizing
// needs a sorted map (quantize_blockwise checks it). The 4-bit tables are
// indexed by code instead. One definition: src/core.
#pragma once

#include <array>
#include <string_view>
#include <vector>

namespace lowbit {

std::vector<float> create_dynamic_map(bool is_signed = true, int max_exponent_bits = 7, int total_bits = 8);
std::vector<float> create_linear_map(bool is_signed = true, int total_bits = 8, bool add_zero = true);
std::vector<float> create_normal_map(double offset = 0.9677083, bool use_extra_value = true);
std::vector<float> create_fp8_map(bool is_signed = true, int exponent_bits = 5, int precision_bits = 2,
                                  int total_bits = 8);
// From quantiles already estimated (see estimate_quantiles in ops/quant.h):
// the values plus 0, padded with 0 to 256, sorted, divided by max |value|.
std::vector<float> quantile_map_from_quantiles(const std::vector<float>& quantiles);

// 16-entry tables, index = 4-bit code: "nf4", "fp4", "int4", "af4"
// (blocksize 64 only), "fp4_e2m1". Throws lowbit::Error for other names.
std::array<float, 16> get_4bit_type(std::string_view name, int blocksize = 64);

// Inverse of the standard normal CDF, accurate to ~1e-15 relative on (0, 1).
double normal_ppf(double p);

}  // namespace lowbit
