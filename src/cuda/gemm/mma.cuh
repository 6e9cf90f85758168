// The activation types of the matmul kernels (fp16, bf16) and the
// tensor-core and packed-half operations on them: each picks the PTX
// instruction of its type (cuda/common/ptx/).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/ptx/arith.cuh"
#include "cuda/common/ptx/mma.cuh"

namespace lowbit::cuda::gemm {

// The activation (and tensor-core operand) type: fp16 or bf16.
struct F16 {
  // 1024 + x for a code x < 1024 placed in the low mantissa bits.
  static constexpr uint32_t kMagic = 0x6400u;
  static constexpr float kMagicValue = 1024.0f;
  // Codes up to kMagicBits wide are exact under the magic number.
  static constexpr int kMagicBits = 10;
};
struct BF16 {
  static constexpr uint32_t kMagic = 0x4300u;  // 128 + x for x < 128
  static constexpr float kMagicValue = 128.0f;
  static constexpr int kMagicBits = 7;
};

// d = a * b + c on two halves at once, one rounding.
template <class T>
__device__ __forceinline__ uint32_t fma2(uint32_t a, uint32_t b, uint32_t c);
template <>
__device__ __forceinline__ uint32_t fma2<F16>(uint32_t a, uint32_t b, uint32_t c) {
  return ptx::fma_rn_f16x2(a, b, c);
}
template <>
__device__ __forceinline__ uint32_t fma2<BF16>(uint32_t a, uint32_t b, uint32_t c) {
  return ptx::fma_rn_bf16x2(a, b, c);
}

// (lo, hi) rounded to nearest even into one register, lo in the low half.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<F16>(float lo, float hi) {
  return ptx::cvt_rn_f16x2_f32(lo, hi);
}
template <>
__device__ __forceinline__ uint32_t pack2<BF16>(float lo, float hi) {
  return ptx::cvt_rn_bf16x2_f32(lo, hi);
}

// The 16-bit pattern of v rounded to T, in both halves of a register.
template <class T>
__device__ __forceinline__ uint32_t splat2(float v) {
  return pack2<T>(v, v);
}

// c[4] += a[16x16] · b[16x8] (fragments as PTX lays them out for m16n8k16).
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, BF16>) {
    ptx::mma_m16n8k16_bf16(c, a0, a1, a2, a3, b0, b1);
  } else {
    static_assert(std::is_same_v<T, F16>, "mma_m16n8k16: T is F16 or BF16");
    ptx::mma_m16n8k16_f16(c, a0, a1, a2, a3, b0, b1);
  }
}

}  // namespace lowbit::cuda::gemm
