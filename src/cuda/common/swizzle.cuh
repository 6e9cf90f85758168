// The 128-byte swizzle of shared-memory tiles read by ldmatrix (and the
// layout the TMA writes with CU_TENSOR_MAP_SWIZZLE_128B and wgmma reads
// with layout type 1, for rows of 128 bytes).
//
// A row is cut into 16-byte chunks; logical chunk c of row r is stored at
// chunk c ^ (r % 8) of the same row: the low 3 bits of the chunk index are
// XORed with the low 3 bits of the row, the higher chunk bits pass through
// (a row longer than 128 bytes repeats the pattern every 128 bytes).
//
//   chunk index  c = ... c3 | c2    c1    c0
//   stored at        ... c3 | c2^r2 c1^r1 c0^r0      (r = ... r2 r1 r0)
//
//            stored position:  0  1  2  3  4  5  6  7
//   row 0 holds logical chunk  0  1  2  3  4  5  6  7
//   row 1                      1  0  3  2  5  4  7  6
//   row 2                      2  3  0  1  6  7  4  5
//   ...
//   row 7                      7  6  5  4  3  2  1  0
//
// Why: rows whose length is a multiple of 128 bytes all start on bank 0,
// so the same chunk of 8 consecutive rows (one 8x8 matrix of an ldmatrix,
// or a column of results being written) would fall in the same 4 banks, an
// 8-way conflict; swizzled, the 8 rows' chunks occupy 8 distinct groups of
// 4 banks and the access takes one wavefront.
//
// Plain C++ as well (LOWBIT_HD), so the host tests check these properties.
#pragma once

#include "core/hd.h"

namespace lowbit::cuda {

// The stored 16-byte chunk of logical chunk `chunk` of row `row`.
LOWBIT_HD constexpr int swizzle128(int row, int chunk) { return chunk ^ (row & 7); }

}  // namespace lowbit::cuda
