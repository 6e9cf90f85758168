// Reductions across the 32 lanes of a warp (butterfly shuffles: every lane
// gets the result).
#pragma once

namespace lowbit::cuda {

__device__ __forceinline__ float warp_max(float v) {
  for (int d = 16; d > 0; d /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

}  // namespace lowbit::cuda
