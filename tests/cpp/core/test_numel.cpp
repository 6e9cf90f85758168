// core::checked_numel, the one element count every TensorRef and op argument
// goes through: shapes whose count or byte size would wrap in 64 bits are
// refused with the op, the argument and the shape, wherever they come in.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "core/check.h"
#include "harness/harness.h"
#include "lowbit/ops/gemm.h"
#include "lowbit/ops/quant.h"
#include "lowbit/quant_state.h"

namespace lowbit {
namespace {

using test::expect_error;

constexpr int64_t kHugeRows = (int64_t{1} << 62) + 1;  // x 128 wraps to 128 in 64 bits
const char* const kHugeShape = "[4611686018427387905, 128]";

int64_t count(std::initializer_list<int64_t> shape, DType dtype = DType::f32) {
  return core::checked_numel("op", "arg", Shape(shape.begin(), shape.size()), dtype);
}

TEST(CheckedNumel, CountsOrdinaryShapes) {
  EXPECT_EQ(count({}), 1);
  EXPECT_EQ(count({3, 4}), 12);
  EXPECT_EQ(count({0, 5}), 0);
  EXPECT_EQ(count({int64_t{1} << 40, 1 << 20}, DType::u8), int64_t{1} << 60);
}

TEST(CheckedNumel, RefusesACountThatWraps) {
  expect_error(
      [] {
        count({kHugeRows, 128});
      },
      ErrorCode::invalid_argument, {"op: arg shape ", kHugeShape, "too large"});
}

TEST(CheckedNumel, RefusesAByteSizeThatWraps) {
  // 2^62 elements fit in int64_t; their 2^64 bytes of float32 do not, their 2^62 bytes of uint8 do.
  expect_error(
      [] {
        count({int64_t{1} << 61, 2});
      },
      ErrorCode::invalid_argument, {"op: arg shape [2305843009213693952, 2]", "float32"});
  EXPECT_EQ(count({int64_t{1} << 60, 4}, DType::u8), int64_t{1} << 62);
  const int64_t f32_limit = std::numeric_limits<int64_t>::max() / 32 * 8;
  EXPECT_EQ(count({f32_limit}), f32_limit);
  EXPECT_EQ(dtype_storage_bytes(DType::f32, f32_limit), static_cast<size_t>(f32_limit) * 4);
  expect_error([&] { count({f32_limit + 1}); }, ErrorCode::invalid_argument, {"at most"});
  // Packed kinds: the count itself is the bound (their bytes are fewer).
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(count({15, 64}, DType::u4), 960);
  EXPECT_EQ(count({max}, DType::u4), max);
  EXPECT_EQ(dtype_storage_bytes(DType::u4, max), static_cast<size_t>(max / 2 + 1));
}

TEST(CheckedNumel, EmptyShapesStillBoundTheirOtherExtents) {
  // A kernel may form the product of the non-zero extents (a row length).
  expect_error([] { count({0, int64_t{1} << 40, int64_t{1} << 40}); }, ErrorCode::invalid_argument, {"too large"});
}

TEST(CheckedNumel, RefusesNegativeExtents) {
  expect_error([] { count({4, -1}); }, ErrorCode::invalid_argument, {"op: arg extent 1 must be >= 0 (got -1"});
}

TEST(CheckedNumel, GuardsEveryWayIntoATensorRef) {
  float data[4] = {};
  const int64_t huge[] = {kHugeRows, 128};
  expect_error([&] { TensorRef::contiguous(data, DType::f32, Shape(huge)); }, ErrorCode::invalid_argument,
               {"TensorRef", kHugeShape});
  // Filled in field by field, as a caller of the C++ API may: numel() and every op check it.
  TensorRef t;
  t.data = data;
  t.dtype = DType::f32;
  t.ndim = 2;
  t.shape = {kHugeRows, 128};
  t.strides = {128, 1};
  expect_error([&] { (void)t.numel(); }, ErrorCode::invalid_argument, {kHugeShape});
  expect_error([&] { core::require_present("some_op", "weight", t); }, ErrorCode::invalid_argument,
               {"some_op: weight shape ", kHugeShape});
  expect_error([&] { quantize_4bit(t, 64, Quant4Type::nf4, false); }, ErrorCode::invalid_argument,
               {"quantize_4bit: input shape ", kHugeShape});
  expect_error([&] { weight_quant(t, 128); }, ErrorCode::invalid_argument, {"weight_quant: input shape ", kHugeShape});
}

TEST(CheckedNumel, GuardsQuantStateShapes) {
  // A state's shape is a plain vector (from a checkpoint, a dict, a caller):
  // 128 values quantized, then a shape claiming 2^69 + 128, which wraps to 128.
  std::vector<float> x(128, 1.0f);
  auto [packed, state] = quantize_4bit(TensorRef::contiguous(x.data(), DType::f32, {128}), 64, Quant4Type::nf4, false);
  QuantStateDict dict = quant_state_as_dict(state);
  state.shape = {kHugeRows, 128};
  expect_error([&] { (void)state.numel(); }, ErrorCode::invalid_argument, {"QuantState: state shape ", kHugeShape});
  expect_error([&] { dequantize_4bit(packed, state); }, ErrorCode::invalid_argument,
               {"dequantize_4bit: quant state shape ", kHugeShape});
  expect_error([&] { import_bnb_4bit(packed, state); }, ErrorCode::invalid_argument,
               {"import_bnb_4bit: quant state shape ", kHugeShape});
  std::vector<float> a(128, 1.0f);
  expect_error(
      [&] {
        matmul_4bit(TensorRef::contiguous(a.data(), DType::f32, {1, 128}), packed, state);
      },
      ErrorCode::invalid_argument, {"matmul_4bit: quant state shape ", kHugeShape});
  // Read from a file, the same shape makes the file malformed.
  dict["shape"] = std::vector<int64_t>{kHugeRows, 128};
  expect_error([&] { quant_state_from_dict(dict); }, ErrorCode::format_error,
               {"quant_state_from_dict", "shape", "is too large", kHugeShape});
}

}  // namespace
}  // namespace lowbit
