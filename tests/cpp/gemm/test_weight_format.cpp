// The weight formats of the matmul (src/core/weight_format.h): known values
// of every kind, the bit-stream packing rule, exact bytes of packed weights
// and zeros, and transform_weight -> unpack / dequantize round trips.
#include <cstring>

#include "core/weight_format.h"
#include "gemm/gemm_cases.h"

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
