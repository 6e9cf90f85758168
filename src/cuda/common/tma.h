// Tensor maps for the bulk tensor copy engine (TMA, sm_90): built on the host
// through the driver entry point the runtime hands out (no link against
// libcuda), passed to kernels as __grid_constant__ parameters.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace lowbit::cuda {

// A 2-D row-major tensor of 16-bit elements [rows, cols] with rows
// `row_bytes` apart, read in boxes of [box_rows, box_cols] with the 128-byte
// swizzle (box_cols * 2 must be 128) and zeros outside the tensor. base and
// row_bytes must be 16-byte multiples. Throws device_error naming `op` when
// the driver refuses.
CUtensorMap tensor_map_2d_u16(const void* base, uint64_t rows, uint64_t cols, uint64_t row_bytes, uint32_t box_rows,
                              uint32_t box_cols, const char* op);

// A 3-D tensor [depth, rows, cols] of `elem_bytes`-byte elements (1, 2 or
// 4; rows `row_bytes` apart, slices `slice_bytes` apart) moved in boxes of
// [1, box_rows, 128 bytes] with the 128-byte swizzle: loads give zeros
// outside the tensor, stores are clipped at its edges. base, row_bytes and
// slice_bytes must be 16-byte multiples. Throws device_error naming `op`
// when the driver refuses.
CUtensorMap tensor_map_3d(const void* base, int elem_bytes, uint64_t depth, uint64_t rows, uint64_t cols,
                          uint64_t row_bytes, uint64_t slice_bytes, uint32_t box_rows, const char* op);

// A 3-D tensor of floats [depth, rows, cols] (rows `row_bytes` apart,
// slices `slice_bytes` apart) read in boxes of [1, box_rows, box_cols]
// without swizzle, zeros outside the tensor. base, row_bytes and
// slice_bytes must be 16-byte multiples, box_cols * 4 too. Throws
// device_error naming `op` when the driver refuses.
CUtensorMap tensor_map_3d_f32(const void* base, uint64_t depth, uint64_t rows, uint64_t cols, uint64_t row_bytes,
                              uint64_t slice_bytes, uint32_t box_rows, uint32_t box_cols, const char* op);

}  // namespace lowbit::cuda
