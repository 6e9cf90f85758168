// Shared-memory tiles of 128-byte rows (a K block of 8-bit operands) that
// the mma.sync kernels fill by cp.async and read by ldmatrix: the chunk copy,
// the swizzled chunk address and the k32 fragments of m16n8k32.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda/common/ptx/copy.cuh"
#include "cuda/common/ptx/mma.cuh"
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

// The offset of logical 16-byte chunk `chunk` of row `row` in a tile of 128-byte rows (swizzled).
__device__ __forceinline__ int tile_offset(int row, int chunk) { return row * 128 + swizzle128(row, chunk) * 16; }
template <class Byte>
__device__ __forceinline__ Byte* tile_at(Byte* tile, int row, int chunk) {
  return tile + tile_offset(row, chunk);
}

// The A fragment of an m16n8k32 MMA on 8-bit operands: rows row0..row0+15
// of tile at the 32 K bytes of step ks (matrices: rows 0-7 / 8-15 at bytes
// 0-15, then the same at 16-31).
__device__ __forceinline__ void ldmatrix_a_k32(const uint8_t* tile, int row0, int ks, int lane, uint32_t (&f)[4]) {
  ptx::ldmatrix_x4(f, tile_at(tile, row0 + lane % 8 + (lane / 8) % 2 * 8, ks * 2 + lane / 16));
}

// The B fragments of two m16n8k32 MMAs: columns (tile rows) row0..row0+7 in
// f0 and row0+8..row0+15 in f1, at the 32 K bytes of step ks (matrices:
// columns 0-7 at bytes 0-15 and 16-31, then columns 8-15).
__device__ __forceinline__ void ldmatrix_b_k32(const uint8_t* tile, int row0, int ks, int lane, uint32_t (&f0)[2],
                                               uint32_t (&f1)[2]) {
  uint32_t r[4];
  ptx::ldmatrix_x4(r, tile_at(tile, row0 + lane % 8 + lane / 16 * 8, ks * 2 + (lane / 8) % 2));
  f0[0] = r[0];
  f0[1] = r[1];
  f1[0] = r[2];
  f1[1] = r[3];
}

}  // namespace lowbit::cuda
