// The CPU quantization implementations, registered by register_quant_ops().
#pragma once

#include "lowbit/ops/quant.h"

namespace lowbit::core::cpu {

void register_quant_reference();  // "cpu-reference", priority 0
void register_quant_fast();       // "cpu", priority 10 (OpenMP, vectorized)

}  // namespace lowbit::core::cpu
