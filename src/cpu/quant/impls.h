// The CPU quantization implementations, registered by register_quant_ops().
#pragma once

#include "lowbit/ops/quant.h"

namespace lowbit::core::cpu {

void register_quant_reference();  // "cpu-reference", priority 0
void register_quant_fast();       // "cpu", priority 10 (OpenMP, vectorized)

// The "cpu" int8_vectorwise_quant, also a step of the cpu int8_linear.
void int8_vectorwise_quant_fast(const Int8VectorwiseQuantArgs& a, void* workspace, Stream stream);

}  // namespace lowbit::core::cpu
