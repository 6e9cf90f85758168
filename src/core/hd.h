// LOWBIT_HD marks functions usable from host and device code; everything in
// src/core that a kernel may call is written with it.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LOWBIT_HD __host__ __device__ __forceinline__
#else
#define LOWBIT_HD inline
#endif

namespace lowbit::core {

LOWBIT_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

LOWBIT_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Right shift by s (1..31) rounding to nearest, ties to even.
LOWBIT_HD uint32_t shift_right_rne(uint32_t m, int s) {
  return (m + ((1u << (s - 1)) - 1u) + ((m >> s) & 1u)) >> s;
}

// ceil(a / b) for a >= 0, b > 0: block and tile counts everywhere.
LOWBIT_HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Multiply and add rounded separately, never contracted into an FMA: nvcc
// contracts a * b + c by default, which would change the bits the CPU gets.
LOWBIT_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
LOWBIT_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
LOWBIT_HD double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
LOWBIT_HD double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

}  // namespace lowbit::core
