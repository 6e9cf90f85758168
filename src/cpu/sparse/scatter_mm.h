// scatter_mm's CPU reference and fast path (src/cpu/sparse/scatter_mm.cpp), registered
// with the other sparse ops.
#pragma once

#include "lowbit/ops/sparse.h"

namespace lowbit::core::cpu {

void scatter_mm_reference(const ScatterMmArgs& a, void* workspace, Stream stream);
// fp32 sums, vectorized.
void scatter_mm_fast(const ScatterMmArgs& a, void* workspace, Stream stream);

}  // namespace lowbit::core::cpu
