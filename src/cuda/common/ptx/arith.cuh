// Register arithmetic the compiler does not emit by itself: packed fp16 /
// bf16 fma, conversions to and from packed pairs, byte permutes,
// three-input logic and the approximate base-2 exponential.
#pragma once

#include <cstdint>

namespace lowbit::cuda::ptx {

// d = a * b + c on two fp16 halves at once, one rounding.
__device__ __forceinline__ uint32_t fma_rn_f16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
// The same on two bf16 halves.
__device__ __forceinline__ uint32_t fma_rn_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// (lo, hi) rounded to nearest even fp16 in one register, lo in the low half.
__device__ __forceinline__ uint32_t cvt_rn_f16x2_f32(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
// The same to bf16.
__device__ __forceinline__ uint32_t cvt_rn_bf16x2_f32(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// (lo, hi) to e4m3, round to nearest even, saturating to ±448: lo in the low byte.
__device__ __forceinline__ uint16_t cvt_rn_satfinite_e4m3x2_f32(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}
// Two e4m3 codes (low byte first) to two fp16 halves (low half first), exactly.
__device__ __forceinline__ uint32_t cvt_rn_f16x2_e4m3x2(uint16_t codes) {
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(codes));
  return h2;
}
#endif

// 2^x by the special-function unit (ex2.approx.ftz: about 2 ulp, denormal
// results flushed to 0; 2^-inf = 0): exp2f without fast math is several
// instructions more.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Bytes of {b, a} selected by the four selector nibbles.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// (a & b) | c in one instruction (lop3 with truth table 0xEA).
__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

}  // namespace lowbit::cuda::ptx
