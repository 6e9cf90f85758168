// The CPU features lowbit's own kernel dispatch reads, capped by the
// LOWBIT_CPU_ISA environment variable so that one machine runs (and tests)
// every path below its best (oneDNN's dispatch is capped alike: gemm/onednn.cpp):
// "native" (the default) or "avx512" takes what
// the CPU has, "avx2" drops the AVX-512 features, "baseline" also AVX, AVX2,
// FMA, F16C and BMI2. The loops built by GCC's target_clones (simd_clones.h) are
// picked at load time by the CPU alone; they give the same bits in every
// variant (-ffp-contract=off).
#pragma once

#include <string_view>

namespace lowbit::core::cpu {

enum class Feature { avx, f16c, avx2, fma, bmi2, avx512f, avx512bw, avx512dq, avx512vl, avx512bf16, avx512vnni };

// Whether the CPU has `f` and LOWBIT_CPU_ISA allows it (read once). Never throws.
bool supports(Feature f);
// The cap in use: "native", "avx2" or "baseline"; an unknown LOWBIT_CPU_ISA
// value throws invalid_argument naming it (the CPU backend asks before it
// registers, so every op call reports it).
std::string_view isa_cap();

}  // namespace lowbit::core::cpu
