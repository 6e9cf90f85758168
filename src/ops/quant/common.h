// Helpers of the quantization front ends (those shared with other op
// families are in ops/common.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "lowbit/ops/quant.h"

namespace lowbit::ops {

// A code map as an f32 tensor on `device`, uploaded once per device
// (Tensor::constant) and shared by every state made there, as bitsandbytes
// caches its maps: "dynamic" (the signed dynamic map, bitsandbytes' default
// code, [256]) or a get_4bit_type name ("nf4", "fp4", ...: [16]).
const Tensor& code_map_on(std::string_view name, Device device);
// A host table as a fresh f32 tensor on `device`, ordered on `stream`.
Tensor table_on(const float* values, int64_t n, Device device, Stream stream);

// Double quantization of an f32 absmax (offset = mean, absmax -= offset, then
// 8-bit blockwise with the dynamic map): fills state.absmax (u8), offset and
// state2. `absmax` is centered in place.
void compress_absmax(const Tensor& absmax, int64_t nested_blocksize, QuantState& state, Stream stream);

}  // namespace lowbit::ops
