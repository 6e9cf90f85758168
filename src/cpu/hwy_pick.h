// LOWBIT_HWY_PICK(FN): a pointer to the build of FN (a function of a Highway
// source's per-target namespace) for the target hwy_target() picks: on x86
// the SSE4, AVX2 or AVX-512 build, elsewhere the static target's. Include in
// the source's HWY_ONCE part, after Highway's headers (it reads HWY_TARGETS).
#pragma once

#include "cpu/hwy_targets.h"
#include "hwy/highway.h"

#if HWY_ARCH_X86
#if HWY_TARGETS & HWY_AVX3
#define LOWBIT_HWY_AVX3_CASE(FN)             \
  case ::lowbit::core::cpu::HwyTarget::avx3: \
    return &N_AVX3::FN;
#else
#define LOWBIT_HWY_AVX3_CASE(FN)
#endif
#if HWY_TARGETS & HWY_AVX2
#define LOWBIT_HWY_AVX2_CASE(FN)             \
  case ::lowbit::core::cpu::HwyTarget::avx2: \
    return &N_AVX2::FN;
#else
#define LOWBIT_HWY_AVX2_CASE(FN)
#endif
#define LOWBIT_HWY_PICK(FN)                      \
  ([] {                                          \
    switch (::lowbit::core::cpu::hwy_target()) { \
      LOWBIT_HWY_AVX3_CASE(FN)                   \
      LOWBIT_HWY_AVX2_CASE(FN)                   \
      default: return &N_SSE4::FN;               \
    }                                            \
  }())
#else
#define LOWBIT_HWY_PICK(FN) (&HWY_STATIC_DISPATCH(FN))
#endif
