// The few-rows kernels of 8-bit weights (int8, uint8, fp8 E4M3) on bf16 A
// (gemv8_hwy.cpp): one Highway source for SSE4, AVX2 and AVX-512 on x86 and
// NEON on Arm, the target picked as cpu/hwy_targets.h says. gemv_bnb4.cpp
// serves them through gemv4_rows_bf16 (bits 8). A is fp32 in order; a step
// is four vectors of fp32 lanes of K.
#pragma once

#include <cstdint>

#include "core/weight_format.h"
#include "cpu/gemm/kernels.h"

namespace lowbit::core::cpu::gemm::hwy_gemv8 {

struct Kernels {
  int64_t step;  // elements of K a step: 16 (128-bit vectors), 32 (256-bit), 64 (512-bit)
  // gemv4_rows_bf16 for codes of `kind` (sint: int8, uint: uint8, fp8: E4M3FN): acc16 gets the kernel's lane
  // sums (zeros past them) a pair; zero points (w.zeros: codes) are vtab[code].
  void (*rows_bf16)(const Gemv4Rows& w, WeightKind kind, const float* vtab, int64_t K, int64_t blocksize,
                    const float* ap, int64_t ldap, int rows, float* acc16);
};

// The kernels of the best target this CPU and LOWBIT_CPU_ISA allow (read once).
const Kernels& kernels();

}  // namespace lowbit::core::cpu::gemm::hwy_gemv8
