// Shared-memory tiles of 128-byte rows (a K block of 8-bit operands) that
// the mma.sync kernels fill by cp.async and read by ldmatrix: the chunk copy
// and the swizzled chunk address.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda/common/ptx/copy.cuh"
#include "cuda/common/swizzle.cuh"

namespace lowbit::cuda {

// 16 bytes global -> shared, of which the first `bytes` (0..16) are read and
// the rest are zeros. kAsync: cp.async (src 16-byte aligned, and a valid
// address even when bytes == 0); otherwise byte loads, for any address.
template <bool kAsync>
__device__ __forceinline__ void copy_chunk(uint8_t* dst, const uint8_t* src, int bytes) {
  if constexpr (kAsync) {
    ptx::cp_async16(dst, src, bytes);
  } else {
    uint8_t v[16] = {};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      if (i < bytes) v[i] = __ldg(src + i);
    }
    uint4 w;
    memcpy(&w, v, 16);
    *reinterpret_cast<uint4*>(dst) = w;
  }
}

// The address of logical 16-byte chunk `chunk` of row `row` of a tile of 128-byte rows (swizzled).
template <class Byte>
__device__ __forceinline__ Byte* tile_at(Byte* tile, int row, int chunk) {
  return tile + row * 128 + swizzle128(row, chunk) * 16;
}

}  // namespace lowbit::cuda
