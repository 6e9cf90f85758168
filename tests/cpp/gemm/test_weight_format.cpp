// The weight formats of the matmul (src/core/weight_format.h): known values
// of every kind, the bit-stream packing rule, exact bytes of packed weights
// and zeros, the tile permutation of the CUDA `tiles` layout, and
// transform_weight -> unpack / dequantize round trips in both layouts.
#include <cstring>

#include "core/weight_format.h"
#include "gemm/gemm_cases.h"
#include "ops/gemm/common.h"

namespace lowbit::test {
namespace {

const WeightType kAllTypes[] = {WeightType::int8,  WeightType::int4,  WeightType::int2,     WeightType::int1,
                                WeightType::uint8, WeightType::uint4, WeightType::uint2,    WeightType::uint1,
                                WeightType::nf4,   WeightType::fp4,   WeightType::fp4_e2m1, WeightType::fp8_e4m3,
                                WeightType::f16,   WeightType::bf16};

TEST(GemmWeightFormat, CodeValuesKnownAnswers) {
  using core::weight_code_value;
  const float* none = nullptr;
  EXPECT_EQ(weight_code_value(WeightType::int4, 0xF, none), -1.0f);
  EXPECT_EQ(weight_code_value(WeightType::int4, 0x8, none), -8.0f);
  EXPECT_EQ(weight_code_value(WeightType::int4, 0x7, none), 7.0f);
  EXPECT_EQ(weight_code_value(WeightType::int2, 0x2, none), -2.0f);
  EXPECT_EQ(weight_code_value(WeightType::int2, 0x1, none), 1.0f);
  EXPECT_EQ(weight_code_value(WeightType::int1, 0, none), -1.0f);
  EXPECT_EQ(weight_code_value(WeightType::int1, 1, none), 1.0f);
  EXPECT_EQ(weight_code_value(WeightType::int8, 0x80, none), -128.0f);
  EXPECT_EQ(weight_code_value(WeightType::uint8, 0xFF, none), 255.0f);
  EXPECT_EQ(weight_code_value(WeightType::uint2, 3, none), 3.0f);
  EXPECT_EQ(weight_code_value(WeightType::uint1, 1, none), 1.0f);
  EXPECT_EQ(weight_code_value(WeightType::nf4, 0, core::weight_table16(WeightType::nf4)), -1.0f);
  EXPECT_EQ(weight_code_value(WeightType::nf4, 8, core::weight_table16(WeightType::nf4)), 0.07958029955625534f);
  EXPECT_EQ(weight_code_value(WeightType::fp4, 3, core::weight_table16(WeightType::fp4)), 1.0f);
  EXPECT_EQ(weight_code_value(WeightType::fp4, 0xB, core::weight_table16(WeightType::fp4)), -1.0f);
  EXPECT_EQ(weight_code_value(WeightType::fp4_e2m1, 7, core::weight_table16(WeightType::fp4_e2m1)), 6.0f);
  EXPECT_EQ(weight_code_value(WeightType::fp4_e2m1, 0xD, core::weight_table16(WeightType::fp4_e2m1)), -3.0f);
  EXPECT_EQ(weight_code_value(WeightType::fp8_e4m3, 0x7E, none), 448.0f);
  EXPECT_EQ(weight_code_value(WeightType::fp8_e4m3, 0x38, none), 1.0f);
  EXPECT_EQ(weight_code_value(WeightType::f16, 0x3C00, none), 1.0f);
  EXPECT_EQ(weight_code_value(WeightType::bf16, 0xC000, none), -2.0f);
  // Every integer value's code decodes back to it.
  for (WeightType t : kAllTypes) {
    if (!core::weight_is_integer(t)) continue;
    const core::WeightTypeInfo info = core::weight_type_info(t);
    for (int32_t v = info.min; v <= info.max; ++v) {
      if (!core::weight_int_in_range(t, v)) continue;
      EXPECT_EQ(core::weight_int_value(t, core::weight_int_code(t, v)), v) << weight_type_name(t);
    }
  }
}

TEST(GemmWeightFormat, StreamsAreLsbFirst) {
  uint8_t s[4] = {};
  for (int i = 0; i < 3; ++i) core::stream_write(s, i, 4, static_cast<uint32_t>(i + 1));
  EXPECT_EQ(s[0], 0x21);
  EXPECT_EQ(s[1], 0x03);
  std::memset(s, 0, 4);
  const uint32_t codes2[] = {2, 1, 3, 0, 1};
  for (int i = 0; i < 5; ++i) core::stream_write(s, i, 2, codes2[i]);
  EXPECT_EQ(s[0], 0x36);  // 2 | 1 << 2 | 3 << 4 | 0 << 6
  EXPECT_EQ(s[1], 0x01);
  std::memset(s, 0, 4);
  const uint32_t bits[] = {1, 0, 1, 1, 0, 0, 0, 0, 1};
  for (int i = 0; i < 9; ++i) core::stream_write(s, i, 1, bits[i]);
  EXPECT_EQ(s[0], 0x0D);
  EXPECT_EQ(s[1], 0x01);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(core::stream_read(s, i, 1), bits[i]);
  EXPECT_EQ(core::rows_row_bytes(33, 4), 32);
  EXPECT_EQ(core::rows_row_bytes(32, 4), 16);
  EXPECT_EQ(core::rows_row_bytes(1, 16), 16);
  EXPECT_EQ(core::packed_zeros_words(9, 4), 2);
}

TEST(GemmWeightFormat, PackedBytesOfInt4AndQuantizedZeros) {
  MatmulConfig c;
  c.N = 3;
  c.K = 2;
  c.W_dtype = WeightType::uint4;
  c.with_scaling = true;
  c.with_zeros = true;
  c.zeros_mode = ZerosMode::quantized;
  Tensor w = Tensor::empty({3, 2}, DType::u8);
  const uint8_t values[] = {15, 2, 7, 8, 0, 1};
  std::memcpy(w.data(), values, 6);
  Tensor z = Tensor::empty({3, 1}, DType::u8);
  const uint8_t zeros[] = {1, 2, 3};
  std::memcpy(z.data(), zeros, 3);
  const PackedWeight p = Matmul(c).transform_weight(w, host_tensor({1, 1, 1}).reshaped(std::vector<int64_t>{3, 1}), z);
  ASSERT_EQ(p.qweight.size(1), 16);
  EXPECT_EQ(p.qweight.ptr<uint8_t>()[0], 0x2F);
  EXPECT_EQ(p.qweight.ptr<uint8_t>()[16], 0x87);
  EXPECT_EQ(p.qweight.ptr<uint8_t>()[32], 0x10);
  EXPECT_EQ(p.qweight.ptr<uint8_t>()[1], 0x00);  // padding is zero
  ASSERT_EQ(p.zeros.dtype(), DType::i32);
  EXPECT_EQ(p.zeros.ptr<int32_t>()[0], 0x321);  // GPTQ-style: zero n in bits 4n of the group's word
  // int4 values are two's complement nibbles.
  c.W_dtype = WeightType::int4;
  c.with_scaling = false;
  c.with_zeros = false;
  Tensor wi = Tensor::empty({3, 2}, DType::i8);
  const int8_t ivalues[] = {-1, 2, 7, -8, 0, 1};
  std::memcpy(wi.data(), ivalues, 6);
  const PackedWeight pi = Matmul(c).transform_weight(wi);
  EXPECT_EQ(pi.qweight.ptr<uint8_t>()[0], 0x2F);
  EXPECT_EQ(pi.qweight.ptr<uint8_t>()[16], 0x87);
}

// transform_weight then unpack_weight gives the inputs back; dequantize_weight
// gives the tests' own dequantization, bit for bit.
TEST(GemmWeightFormat, RoundTripsAndDequantizesExactly) {
  int i = 0;
  for (WeightType t : kAllTypes) {
    for (int variant = 0; variant < 4; ++variant, ++i) {
      MatmulConfig c;
      c.W_dtype = t;
      c.N = 5 + i % 4;
      c.K = 64 + 32 * (i % 3);
      c.with_scaling = variant > 0;
      c.group_size = variant > 1 ? 32 : -1;
      c.with_zeros = variant > 1 && core::weight_is_integer(t);
      c.zeros_mode = static_cast<ZerosMode>(i % 3);
      c.with_bias = variant == 3;
      const QuantizedWeight w = random_weight(c, DType::f32, variant == 2);
      const PackedWeight p = Matmul(c).transform_weight(w.weight, w.scale, w.zeros, w.bias, w.perm);
      const QuantizedWeight u = unpack_weight(p);
      const std::string what = describe(c);
      EXPECT_EQ(std::memcmp(u.weight.data(), w.weight.data(), w.weight.nbytes()), 0) << what;
      if (c.with_scaling) {
        EXPECT_EQ(to_floats(u.scale), to_floats(w.scale)) << what;
      }
      if (c.with_zeros && c.zeros_mode == ZerosMode::quantized) {
        for (int64_t j = 0; j < w.zeros.numel(); ++j) {
          const int64_t want = w.zeros.dtype() == DType::i8 ? w.zeros.ptr<int8_t>()[j] : w.zeros.ptr<int32_t>()[j];
          const int64_t got = u.zeros.dtype() == DType::i8 ? u.zeros.ptr<int8_t>()[j] : u.zeros.ptr<uint8_t>()[j];
          EXPECT_EQ(got, want) << what << " zero " << j;
        }
      } else if (c.with_zeros) {
        EXPECT_EQ(to_floats(u.zeros), to_floats(w.zeros)) << what;
      }
      if (w.perm.defined()) {
        EXPECT_EQ(std::memcmp(u.perm.data(), w.perm.data(), w.perm.nbytes()), 0) << what;
      }
      const Tensor d = dequantize_weight(p);
      const std::vector<float> want = expected_dequant(w);
      EXPECT_EQ(std::memcmp(d.data(), want.data(), want.size() * 4), 0) << what;
    }
  }
}

// Where elements land in a tile (src/core/weight_format.h): lane 4g + q owns
// bytes [16·lane, 16·lane + 16); register 4j + r of k16 step j is word
// (4j + r) / P, pair (4j + r) % P.
TEST(GemmWeightFormat, TileSpotsKnownAnswers) {
  using core::tile_spot;
  auto spot = [](int bits, bool adjacent, int row, int col) {
    const core::TileSpot s = tile_spot(bits, adjacent, row, col);
    return std::pair<int, int>(s.byte, s.shift);
  };
  // int4, pairs (i, i + 4) of a word: step 0 of lane 0 is word 0.
  EXPECT_EQ(spot(4, false, 0, 0), std::make_pair(0, 0));   // r 0, element 0
  EXPECT_EQ(spot(4, false, 0, 1), std::make_pair(2, 0));   // r 0, element 4 (bit 16)
  EXPECT_EQ(spot(4, false, 8, 0), std::make_pair(0, 4));   // r 1 (row g + 8), element 1
  EXPECT_EQ(spot(4, false, 0, 8), std::make_pair(1, 0));   // r 2 (columns + 8), element 2
  EXPECT_EQ(spot(4, false, 8, 9), std::make_pair(3, 4));   // r 3, element 7
  EXPECT_EQ(spot(4, false, 0, 2), std::make_pair(16, 0));  // q 1: lane 1
  EXPECT_EQ(spot(4, false, 1, 0), std::make_pair(64, 0));  // g 1: lane 4
  EXPECT_EQ(spot(4, false, 0, 16), std::make_pair(4, 0));  // step 1: word 1
  EXPECT_EQ(spot(4, false, 15, 63), std::make_pair(511, 4));
  // 4-bit tables: a byte is a pair.
  EXPECT_EQ(spot(4, true, 0, 1), std::make_pair(0, 4));
  EXPECT_EQ(spot(4, true, 8, 0), std::make_pair(1, 0));
  // int8: two registers a word; int2 / int1: 8 and 16 pairs a word.
  EXPECT_EQ(spot(8, true, 8, 1), std::make_pair(3, 0));
  EXPECT_EQ(spot(8, true, 0, 16), std::make_pair(8, 0));
  EXPECT_EQ(spot(2, false, 0, 1), std::make_pair(2, 0));
  EXPECT_EQ(spot(2, false, 0, 32), std::make_pair(4, 0));
  EXPECT_EQ(spot(1, false, 0, 1), std::make_pair(2, 0));
  EXPECT_EQ(spot(1, false, 15, 255), std::make_pair(511, 7));
  EXPECT_EQ(core::tile_k(1), 256);
  EXPECT_EQ(core::tile_k(8), 32);
}

// Every position of a tile holds exactly one element, at every bit width.
TEST(GemmWeightFormat, TileSpotsArePermutations) {
  for (int bits : {1, 2, 4, 8}) {
    for (bool adjacent : {false, true}) {
      if (bits == 8 && !adjacent) continue;
      std::vector<int> hits(core::kTileBytes * 8, 0);
      for (int row = 0; row < core::kTileRows; ++row) {
        for (int col = 0; col < core::tile_k(bits); ++col) {
          const core::TileSpot s = core::tile_spot(bits, adjacent, row, col);
          ASSERT_LT(s.byte, core::kTileBytes);
          ASSERT_EQ(s.shift % bits, 0);
          ++hits[static_cast<size_t>(s.byte * 8 + s.shift)];
        }
      }
      for (size_t i = 0; i < hits.size(); i += static_cast<size_t>(bits)) {
        ASSERT_EQ(hits[i], 1) << "bits " << bits << " adjacent " << adjacent << " bit " << i;
      }
    }
  }
}

// The tiles layout (CUDA's, packed on the host) holds the same weight: its
// unpacked form is the input, its dequantized values the tests' own, for
// every format it takes; formats it does not take are refused.
TEST(GemmWeightFormat, TilesRoundTripAndDequantizeExactly) {
  int i = 0;
  for (WeightType t : kAllTypes) {
    const int kt = core::tile_k(core::weight_bits(t));
    for (int variant = 0; variant < 5; ++variant, ++i) {
      MatmulConfig c;
      c.W_dtype = t;
      c.N = 1 + (i * 7) % 40;  // ragged: partial row tiles
      c.with_scaling = variant > 0;
      c.group_size = variant > 1 ? (kt > 128 ? kt : 128) : -1;
      c.K = variant > 1 ? c.group_size * (1 + i % 3) : 1 + (i * 37) % 300;
      c.with_zeros = variant > 2 && core::weight_is_integer(t);
      c.zeros_mode = ZerosMode::quantized;
      c.with_bias = variant == 4;
      const std::string what = describe(c);
      const QuantizedWeight w = random_weight(c, variant == 3 ? DType::bf16 : DType::f16, variant == 4);
      if (!core::tiles_supported(t, c.with_scaling ? c.group_size : -1, c.with_zeros, c.zeros_mode)) {
        expect_error(
            [&] { ops::gemm::pack_weight(WeightLayout::tiles, c, w.weight, w.scale, w.zeros, w.bias, w.perm); },
            ErrorCode::invalid_argument, {"transform_weight: the tiles layout takes"});
        continue;
      }
      const PackedWeight p = ops::gemm::pack_weight(WeightLayout::tiles, c, w.weight, w.scale, w.zeros, w.bias, w.perm);
      ASSERT_EQ(p.format.layout, WeightLayout::tiles) << what;
      EXPECT_EQ(p.qweight.size(1), core::tiles_k_tiles(c.K, core::weight_bits(t)) * core::kTileBytes) << what;
      if (c.with_scaling) {
        EXPECT_EQ(p.scale.dtype(), w.scale.dtype()) << what;  // scales keep their dtype
      }
      const QuantizedWeight u = unpack_weight(p);
      EXPECT_EQ(std::memcmp(u.weight.data(), w.weight.data(), w.weight.nbytes()), 0) << what;
      if (c.with_scaling) {
        EXPECT_EQ(to_floats(u.scale), to_floats(w.scale)) << what;
      }
      if (c.with_zeros) {
        const std::vector<int64_t> want = ops::gemm::host_ints(w.zeros), got = ops::gemm::host_ints(u.zeros);
        EXPECT_EQ(got, want) << what;
      }
      const Tensor d = dequantize_weight(p);
      const std::vector<float> want = expected_dequant(w);
      EXPECT_EQ(std::memcmp(d.data(), want.data(), want.size() * 4), 0) << what;
    }
  }
}

TEST(GemmWeightFormat, NamesParse) {
  for (WeightType t : kAllTypes) {
    WeightType back{};
    ASSERT_TRUE(parse_weight_type(weight_type_name(t), &back)) << weight_type_name(t);
    EXPECT_EQ(back, t);
  }
  WeightType t{};
  EXPECT_TRUE(parse_weight_type("float8_e4m3fn", &t));
  EXPECT_EQ(t, WeightType::fp8_e4m3);
  EXPECT_FALSE(parse_weight_type("int3", &t));
  for (ZerosMode m : {ZerosMode::original, ZerosMode::rescale, ZerosMode::quantized}) {
    ZerosMode back{};
    ASSERT_TRUE(parse_zeros_mode(zeros_mode_name(m), &back));
    EXPECT_EQ(back, m);
  }
}

TEST(GemmWeightFormat, PreparedMPicksTheNextLargerSize) {
  MatmulConfig c;
  c.N = 4;
  c.K = 32;
  c.M = {64, 1, 16, 16};
  const Matmul m(c);
  EXPECT_EQ(m.config().M, (std::vector<int64_t>{1, 16, 64}));
  EXPECT_EQ(m.prepared_m(1), 1);
  EXPECT_EQ(m.prepared_m(2), 16);
  EXPECT_EQ(m.prepared_m(15), 16);
  EXPECT_EQ(m.prepared_m(17), 64);
  EXPECT_EQ(m.prepared_m(5000), 64);  // beyond the list: the largest
}

}  // namespace
}  // namespace lowbit::test
