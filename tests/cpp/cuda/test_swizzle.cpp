// The 128-byte swizzle of the CUDA kernels' shared-memory tiles
// (src/cuda/common/swizzle.cuh): a permutation of each row's chunks that
// spreads a column of 8 rows over 8 bank groups, and the layout the TMA
// writes with its 128-byte swizzle.
#include <gtest/gtest.h>

#include <set>

#include "cuda/common/swizzle.cuh"

namespace {

using lowbit::cuda::swizzle128;

TEST(Swizzle128, PermutesEachRowWithinGroupsOfEightChunks) {
  for (int chunks : {8, 16, 32, 64}) {
    for (int r = 0; r < 64; ++r) {
      std::set<int> stored;
      for (int c = 0; c < chunks; ++c) {
        const int s = swizzle128(r, c);
        EXPECT_EQ(s >> 3, c >> 3) << "row " << r << " chunk " << c << " leaves its 128 bytes";
        stored.insert(s);
      }
      EXPECT_EQ(static_cast<int>(stored.size()), chunks) << "row " << r << " of " << chunks << " chunks";
    }
  }
}

TEST(Swizzle128, SpreadsAColumnOfEightRowsOverEightBankGroups) {
  // Rows a multiple of 128 bytes long: a chunk's bank group (4 banks) is its
  // position within its 128 bytes.
  for (int r0 = 0; r0 < 64; r0 += 8) {
    for (int c = 0; c < 64; ++c) {
      std::set<int> groups;
      for (int r = r0; r < r0 + 8; ++r) groups.insert(swizzle128(r, c) & 7);
      EXPECT_EQ(groups.size(), 8u) << "rows " << r0 << "..+7, chunk " << c;
    }
  }
}

TEST(Swizzle128, IsTheTmaSwizzleOfRowsOf128Bytes) {
  // CU_TENSOR_MAP_SWIZZLE_128B: byte address bits 4-6 XOR bits 7-9.
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < 8; ++c) {
      const int linear = r * 128 + c * 16;
      EXPECT_EQ(r * 128 + swizzle128(r, c) * 16, linear ^ (((linear >> 7) & 7) << 4)) << "row " << r << " chunk " << c;
    }
  }
}

}  // namespace
