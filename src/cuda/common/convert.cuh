// Format conversions of a whole chunk of elements, with hardware fast paths.
//
// The formats are defined once, in src/core/float_convert.h. Where a hardware
// instruction computes the same function faster (cvt.f32.f16, cvt.rn.f16.f32,
// cvt.rn.bf16.f32, and on sm_89+ cvt.rn.satfinite.e4m3x2.f32 and
// cvt.rn.f16x2.e4m3x2), the chunk functions below use it for chunks free of
// NaN and fall back to the core function for a chunk holding a NaN, because
// the hardware returns a canonical NaN where the core keeps sign and payload.
// The selftest (src/cuda/quant/selftest.cu, run by tests/cpp/cuda) checks every
// hardware path against the core function on all 2^16 / 2^32 inputs.
//
// Defining LOWBIT_CUDA_CORE_CONVERT=1 forces the core functions everywhere.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/float_convert.h"
#include "cuda/common/ptx/arith.cuh"

#ifndef LOWBIT_CUDA_CORE_CONVERT
#define LOWBIT_CUDA_CORE_CONVERT 0
#endif

namespace lowbit::cuda {

// ------------------------------------------------ single-value hardware paths
// Each equals the named core function for every non-NaN input.
__device__ __forceinline__ float f16_to_f32_hw(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t f32_to_f16_hw(float v) { return __half_as_ushort(__float2half_rn(v)); }
__device__ __forceinline__ uint16_t f32_to_bf16_hw(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define LOWBIT_CUDA_HAS_FP8_CVT 1
// e4m3 of lo (low byte) and hi (high byte), RNE, saturating: core::f32_to_e4m3(v, true).
__device__ __forceinline__ uint16_t f32x2_to_e4m3x2_hw(float lo, float hi) {
  return ptx::cvt_rn_satfinite_e4m3x2_f32(lo, hi);
}
// Two e4m3 codes (low byte first) to f32: core::e4m3_to_f32. Exact: every
// e4m3 value is an f16 value.
__device__ __forceinline__ float2 e4m3x2_to_f32x2_hw(uint16_t codes) {
  const uint32_t h2 = ptx::cvt_rn_f16x2_e4m3x2(codes);
  return make_float2(f16_to_f32_hw(static_cast<uint16_t>(h2 & 0xffffu)),
                     f16_to_f32_hw(static_cast<uint16_t>(h2 >> 16)));
}
#else
#define LOWBIT_CUDA_HAS_FP8_CVT 0
#endif

__device__ __forceinline__ bool is_nan_f16(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }
__device__ __forceinline__ bool is_nan_e4m3(uint8_t b) { return (b & 0x7fu) == 0x7fu; }

// ------------------------------------------------------- chunk conversions
// v[i] = to_f32(x[i])
template <int kN>
__device__ __forceinline__ void to_floats(const float (&x)[kN], float (&v)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) v[i] = x[i];
}

template <int kN>
__device__ __forceinline__ void to_floats(const core::BFloat16 (&x)[kN], float (&v)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) v[i] = core::to_f32(x[i]);  // a shift: nothing faster exists
}

template <int kN>
__device__ __forceinline__ void to_floats(const core::Half (&x)[kN], float (&v)[kN]) {
  bool nan = LOWBIT_CUDA_CORE_CONVERT != 0;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    v[i] = f16_to_f32_hw(x[i].bits);
    nan |= v[i] != v[i];  // NaN in f16 <=> NaN after the exact widening
  }
  if (nan) {
#pragma unroll
    for (int i = 0; i < kN; ++i) v[i] = core::to_f32(x[i]);
  }
}

// y[i] = from_f32<T>(v[i])
template <int kN>
__device__ __forceinline__ void from_floats(const float (&v)[kN], float (&y)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) y[i] = v[i];
}

template <int kN>
__device__ __forceinline__ void from_floats(const float (&v)[kN], core::Half (&y)[kN]) {
  bool nan = LOWBIT_CUDA_CORE_CONVERT != 0;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    y[i].bits = f32_to_f16_hw(v[i]);
    nan |= v[i] != v[i];
  }
  if (nan) {
#pragma unroll
    for (int i = 0; i < kN; ++i) y[i] = core::from_f32<core::Half>(v[i]);
  }
}

template <int kN>
__device__ __forceinline__ void from_floats(const float (&v)[kN], core::BFloat16 (&y)[kN]) {
  bool nan = LOWBIT_CUDA_CORE_CONVERT != 0;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    y[i].bits = f32_to_bf16_hw(v[i]);
    nan |= v[i] != v[i];
  }
  if (nan) {
#pragma unroll
    for (int i = 0; i < kN; ++i) y[i] = core::from_f32<core::BFloat16>(v[i]);
  }
}

// q[i] = core::f32_to_e4m3(v[i], /*saturate=*/true); kN even.
template <int kN>
__device__ __forceinline__ void to_e4m3_sat(const float (&v)[kN], uint8_t (&q)[kN]) {
  static_assert(kN % 2 == 0, "pairs");
#if LOWBIT_CUDA_HAS_FP8_CVT
  bool nan = LOWBIT_CUDA_CORE_CONVERT != 0;
#pragma unroll
  for (int i = 0; i < kN; i += 2) {
    const uint16_t r = f32x2_to_e4m3x2_hw(v[i], v[i + 1]);
    q[i] = static_cast<uint8_t>(r & 0xffu);
    q[i + 1] = static_cast<uint8_t>(r >> 8);
    nan |= (v[i] != v[i]) | (v[i + 1] != v[i + 1]);
  }
  if (!nan) return;
#endif
#pragma unroll
  for (int i = 0; i < kN; ++i) q[i] = core::f32_to_e4m3(v[i], true);
}

// v[i] = core::e4m3_to_f32(q[i]); kN even.
template <int kN>
__device__ __forceinline__ void from_e4m3(const uint8_t (&q)[kN], float (&v)[kN]) {
  static_assert(kN % 2 == 0, "pairs");
#if LOWBIT_CUDA_HAS_FP8_CVT
  bool nan = LOWBIT_CUDA_CORE_CONVERT != 0;
#pragma unroll
  for (int i = 0; i < kN; i += 2) {
    const float2 f = e4m3x2_to_f32x2_hw(static_cast<uint16_t>(q[i] | (q[i + 1] << 8)));
    v[i] = f.x;
    v[i + 1] = f.y;
    nan |= is_nan_e4m3(q[i]) | is_nan_e4m3(q[i + 1]);
  }
  if (!nan) return;
#endif
#pragma unroll
  for (int i = 0; i < kN; ++i) v[i] = core::e4m3_to_f32(q[i]);
}

}  // namespace lowbit::cuda
