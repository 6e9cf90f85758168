// The Highway settings every lowbit source that includes Highway uses (one set, so that Highway's inline
// functions are the same in each), and the x86 target each CPU gets (lowbit picks it from its own features under
// LOWBIT_CPU_ISA, src/cpu/isa.h, rather than Highway's dispatch: its cap must hold for Highway's code too).
// Include before any Highway header.
#pragma once

// SSE4 without AES and CLMUL (none of lowbit's kernels use them): the build's x86-64-v2 baseline.
#ifndef HWY_DISABLE_PCLMUL_AES
#define HWY_DISABLE_PCLMUL_AES
#endif
// Only the targets hwy_target() picks: SSE4, AVX2 and AVX-512 on x86, NEON on Arm. SVE's and RVV's
// sizeless vectors cannot sit in the arrays lowbit's kernels keep in registers.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_AVX3_DL | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#include <cstdint>

namespace lowbit::core::cpu {

enum class HwyTarget { sse4, avx2, avx3, other };

// x86: AVX3 where AVX-512 F, BW, DQ and VL are allowed, AVX2 where AVX2, FMA, F16C and BMI2 are, else SSE4
// (the baseline); elsewhere `other`, the build's static target.
HwyTarget hwy_target();

}  // namespace lowbit::core::cpu
