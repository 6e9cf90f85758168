// Helpers of the quantization front ends.
#pragma once

#include <cstdint>

#include "core/hd.h"

#include "lowbit/ops/quant.h"

namespace lowbit::ops {

using core::ceil_div;

// The signed dynamic map (bitsandbytes' default code) as an f32 [256] tensor
// on `device`, made once per device (Tensor::constant) and shared.
const Tensor& dynamic_code_on(Device device);
// A host table as a fresh f32 tensor on `device`, ordered on `stream`.
Tensor table_on(const float* values, int64_t n, Device device, Stream stream);

// Scratch for an op run on `stream`: a byte tensor on `device` (empty when
// bytes == 0), stream-ordered, given back when the caller drops it, so a
// captured CUDA graph owns its own scratch.
Tensor workspace_on(size_t bytes, Device device, Stream stream);

// Shared checks of the blockwise families.
void check_absmax_arg(const char* op, const TensorRef& absmax, const NestedAbsmax& nested, int64_t nblocks);

// Double quantization of an f32 absmax (offset = mean, absmax -= offset, then
// 8-bit blockwise with the dynamic map): fills state.absmax (u8), offset and
// state2. `absmax` is centered in place.
void compress_absmax(const Tensor& absmax, int64_t nested_blocksize, QuantState& state, Stream stream);
// The NestedAbsmax view of a state (absent when not nested).
NestedAbsmax nested_of(const QuantState& state);

}  // namespace lowbit::ops
