// Helpers of the checkpoint importers (GPTQ, AWQ, bitsandbytes): host reads
// of packed int32 words, and the config an importer fills in.
#pragma once

#include <cstdint>

#include "lowbit/ops/gemm.h"

namespace lowbit::ops::gemm {

// Field `index` (0-based, LSB first) of `bits` bits in an int32 word.
inline uint32_t word_field(int32_t word, int index, int bits) {
  return (static_cast<uint32_t>(word) >> (index * bits)) & ((1u << bits) - 1u);
}

// A host copy of a 2-D [rows, cols] tensor transposed to [cols, rows], in
// its own dtype (a bit copy: no value changes).
Tensor transpose_host(const TensorRef& t);

// The config of an imported weight: A and out take the scales' dtype when it
// is fp16/bf16 (the checkpoint's compute dtype), else fp16.
MatmulConfig imported_config(WeightType type, int64_t N, int64_t K, int64_t group_size, DType scale_dtype);

// Checks a present, contiguous 2-D tensor of one of `dtypes`.
void require_matrix(const char* op, const char* name, const TensorRef& t, std::initializer_list<DType> dtypes);

}  // namespace lowbit::ops::gemm
