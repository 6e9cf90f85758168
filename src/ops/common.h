// Helpers shared by the op front ends (src/ops/quant, src/ops/gemm,
// src/ops/optim): scratch for a run, the 8-bit code maps that blockwise
// quantization and the 8-bit optimizer states take, and the blockwise absmax
// argument that the dequantize ops and matmul_4bit both take.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/hd.h"
#include "lowbit/ops/quant.h"

namespace lowbit::ops {

using core::ceil_div;

// Scratch for an op run on `stream`: a byte tensor on `device` (empty when
// bytes == 0), stream-ordered, given back when the caller drops it, so a
// captured CUDA graph owns its own scratch.
Tensor workspace_on(size_t bytes, Device device, Stream stream);

// Checks an 8-bit code map argument: f32 [256], contiguous, sorted ascending
// (checked where the values are readable: on the host).
void check_code_map(const char* op, const char* name, const TensorRef& code);

// Checks an absmax argument of `nblocks` blocks: f32, or u8 with the nested
// (double-quantized) tensors.
void check_absmax_arg(const char* op, const TensorRef& absmax, const NestedAbsmax& nested, int64_t nblocks);

// Checks a present, contiguous tensor of one of `dtypes` and exactly `shape`
// (the message prints both shapes).
void require_shaped(const char* op, const char* name, const TensorRef& t, std::initializer_list<DType> dtypes,
                    const std::vector<int64_t>& shape);

// t's shape with its last dimension replaced by `last` (the output of a GEMM over t's rows).
std::vector<int64_t> with_last(const TensorRef& t, int64_t last);

// The NestedAbsmax view of a state (absent when not nested).
NestedAbsmax nested_of(const QuantState& state);

}  // namespace lowbit::ops
