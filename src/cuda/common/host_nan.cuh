// NaN results as the CPU backend produces them.
//
// IEEE 754 leaves the sign and payload of a NaN result open. x86-64 (SSE, the
// CPU backend's target) returns the NaN operand, quieted, and for an invalid
// operation (0 * Inf, Inf / Inf) its "default NaN" 0xffc00000 (sign set);
// NVIDIA GPUs return 0x7fffffff in every case. The CPU backend is the oracle,
// and some outputs carry a NaN's sign (e4m3: S.1111.111) or payload (f16,
// bf16), so kernels whose results can be NaN fix them up with host_nan. One
// caveat that no backend can remove: with two NaN operands x86 returns the
// first, and which one is first is up to the host compiler.
#pragma once

#include <cstdint>

#include "core/hd.h"

namespace lowbit::cuda {

// The NaN x86 returns for a binary operation on a and b whose result is NaN.
__device__ __forceinline__ float host_nan(float a, float b) {
  constexpr uint32_t kQuiet = 0x00400000u;
  if (a != a) return core::bits_float(core::float_bits(a) | kQuiet);
  if (b != b) return core::bits_float(core::float_bits(b) | kQuiet);
  return core::bits_float(0xffc00000u);  // x86 default NaN
}

// a * b, with x86's NaN.
__device__ __forceinline__ float mul_host_nan(float a, float b) {
  const float r = a * b;
  return r == r ? r : host_nan(a, b);
}

}  // namespace lowbit::cuda
