// FP8 block scaling and int8 vector-wise quantization.
#include <cmath>
#include <cstring>

#include "core/float_convert.h"
#include "harness/harness.h"
#include "ops/dispatch.h"

namespace lowbit::test {
namespace {

const DType kFloats[] = {DType::f32, DType::f16, DType::bf16};

TEST(ActQuant, EveryBackendMatchesReference) {
  SCOPED_TRACE("impls: " + impl_names<ActQuantArgs>());
  int i = 0;
  for (DType dtype : kFloats) {
    for (bool ue8m0 : {false, true}) {
      for (auto shape : std::vector<std::vector<int64_t>>{{1, 128}, {7, 384}, {3, 5, 256}, {0, 128}, {129, 1024}}) {
        const int64_t block = (i++ % 3 == 2) ? 64 : 128;
        OpCase<ActQuantArgs> c;
        c.name = "act_quant " + std::string(dtype_name(dtype)) + (ue8m0 ? " ue8m0" : "");
        Tensor x = random_floats(shape, dtype);
        sprinkle_specials(x, block);
        std::vector<int64_t> sshape = shape;
        sshape.back() /= block;
        c.inputs = {x};
        c.outputs = {{shape, DType::f8_e4m3}, {sshape, DType::f32}};
        c.make = [block, ue8m0](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
          return ActQuantArgs{in[0], out[0], out[1], block, ue8m0};
        };
        run_on_all_backends(c);
      }
    }
  }
}

TEST(ActQuant, ScaleAndValuesFollowTheSpec) {
  std::vector<float> v(128);
  for (int i = 0; i < 128; ++i) v[static_cast<size_t>(i)] = (i - 64) * 0.25f;  // amax 16
  auto r = act_quant(host_tensor(v).reshaped(std::vector<int64_t>{1, 128}));
  const float s = r.scale.ptr<float>()[0];
  EXPECT_EQ(s, 16.0f / 448.0f);
  EXPECT_EQ(core::e4m3_to_f32(r.values.ptr<uint8_t>()[0]), -448.0f);  // -16 / s = -448
  auto r2 = act_quant(host_tensor(v).reshaped(std::vector<int64_t>{1, 128}), 128, true);
  EXPECT_EQ(r2.scale.ptr<float>()[0], 0.0625f) << "16/448 = 0.0357 rounds up to 2^-4";
  // An all-zero block: scale 1e-4 / 448, values 0.
  auto r3 = act_quant(host_tensor(std::vector<float>(128, 0.0f)));
  EXPECT_EQ(r3.scale.ptr<float>()[0], 1e-4f / 448.0f);
  EXPECT_EQ(r3.values.ptr<uint8_t>()[7], 0);
}

TEST(WeightQuant, EveryBackendMatchesReferenceIncludingRaggedEdges) {
  for (DType dtype : kFloats) {
    for (auto nk : std::vector<std::pair<int64_t, int64_t>>{{128, 128}, {300, 200}, {1, 1}, {257, 129}, {0, 5}}) {
      const int64_t n = nk.first, k = nk.second, b = 128;
      OpCase<WeightQuantArgs> c;
      c.name = "weight_quant " + std::to_string(n) + "x" + std::to_string(k);
      c.inputs = {random_floats({n, k}, dtype)};
      c.outputs = {{{n, k}, DType::f8_e4m3}, {{(n + b - 1) / b, (k + b - 1) / b}, DType::f32}};
      c.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
        return WeightQuantArgs{in[0], out[0], out[1], 128};
      };
      run_on_all_backends(c);

      OpCase<WeightDequantArgs> d;
      d.name = "weight_dequant " + std::to_string(n) + "x" + std::to_string(k);
      d.inputs = {random_bytes({n, k}, DType::f8_e4m3), random_floats({(n + b - 1) / b, (k + b - 1) / b}, DType::f32)};
      d.outputs = {{{n, k}, dtype}};
      d.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
        return WeightDequantArgs{in[0], in[1], out[0], 128};
      };
      run_on_all_backends(d);
    }
  }
}

TEST(WeightQuant, RoundTripErrorBound) {
  const Tensor w = random_floats({300, 520}, DType::f32);
  auto q = weight_quant(w);
  EXPECT_EQ(q.scale.size(0), 3);
  EXPECT_EQ(q.scale.size(1), 5);
  const std::vector<float> a = to_floats(w), b = to_floats(weight_dequant(q.values, q.scale));
  double err = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (a[i] - b[i]) * double(a[i] - b[i]);
    mag += a[i] * double(a[i]);
  }
  EXPECT_LT(std::sqrt(err / mag), 0.05);  // e4m3 has 3 mantissa bits: ~2-3% RMS
}

TEST(Fp8, ValidationMessages) {
  const Tensor x = random_floats({4, 100}, DType::f32);
  expect_error([&] { act_quant(x); }, ErrorCode::invalid_argument, {"act_quant", "100", "divisible", "128"});
  expect_error([&] { act_quant(random_floats({4, 128}, DType::f32), 100); }, ErrorCode::invalid_argument,
               {"act_quant", "block", "100"});
  expect_error([&] { weight_quant(random_floats({4, 4, 4}, DType::f32)); }, ErrorCode::invalid_argument,
               {"weight_quant", "2-D", "3-D"});
  auto q = weight_quant(random_floats({200, 300}, DType::f32));
  const Tensor bad_scale = Tensor::empty({2, 2}, DType::f32);
  expect_error([&] { weight_dequant(q.values, bad_scale); }, ErrorCode::invalid_argument,
               {"weight_dequant", "scale", "[2, 3]", "[2, 2]"});
  expect_error([&] { weight_dequant(x, q.scale); }, ErrorCode::unsupported_dtype,
               {"weight_dequant", "input", "float8_e4m3fn", "float32"});
}

OpCase<Int8VectorwiseQuantArgs> int8_case(std::vector<int64_t> shape, DType dtype, float threshold) {
  OpCase<Int8VectorwiseQuantArgs> c;
  c.name = "int8_vectorwise_quant thr=" + std::to_string(threshold);
  Tensor x = random_floats(shape, dtype, 1.0f);
  sprinkle_specials(x, 0);
  const int64_t k = shape.back();
  const int64_t rows = k ? x.numel() / k : 0;
  c.inputs = {x};
  c.outputs = {{shape, DType::i8}, {{rows}, DType::f32}};
  if (threshold > 0) c.outputs.push_back({{k}, DType::u8});
  c.make = [threshold](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
    return Int8VectorwiseQuantArgs{in[0], out[0], out[1], threshold > 0 ? out[2] : TensorRef{}, threshold};
  };
  return c;
}

TEST(Int8Vectorwise, EveryBackendMatchesReference) {
  SCOPED_TRACE("impls: " + impl_names<Int8VectorwiseQuantArgs>());
  for (DType dtype : kFloats) {
    for (float thr : {0.0f, 6.0f, 20.0f}) {
      for (auto shape : std::vector<std::vector<int64_t>>{
               {1, 1}, {7, 33}, {64, 4096}, {3, 5, 100}, {0, 16}, {9, 24}, {130, 520}, {2, 9000}, {3, 20000}}) {
        run_on_all_backends(int8_case(shape, dtype, thr));
      }
    }
    OpCase<Int8VectorwiseDequantArgs> d;
    d.name = "int8_vectorwise_dequant";
    d.inputs = {random_bytes({33, 257}, DType::i8), random_floats({33}, DType::f32)};
    d.outputs = {{{33, 257}, dtype}};
    d.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
      return Int8VectorwiseDequantArgs{in[0], in[1], out[0]};
    };
    run_on_all_backends(d);
  }
}

TEST(Int8Vectorwise, OutliersAreExcludedAndTheirColumnsZeroed) {
  // rows: [1, 2, 8, -1], [0.5, -4, 1, 2] ; threshold 6 -> column 2 is an outlier column
  const Tensor x = host_tensor({1, 2, 8, -1, 0.5f, -4, 1, 2}).reshaped(std::vector<int64_t>{2, 4});
  auto r = int8_vectorwise_quant(x, 6.0f);
  ASSERT_EQ(r.outlier_cols, std::vector<int64_t>{2});
  EXPECT_EQ(r.row_stats.ptr<float>()[0], 2.0f);
  EXPECT_EQ(r.row_stats.ptr<float>()[1], 4.0f);
  const int8_t* q = r.values.ptr<int8_t>();
  EXPECT_EQ(q[0], 64);   // rint(1 * 127 / 2) = rint(63.5) = 64 (half to even)
  EXPECT_EQ(q[1], 127);
  EXPECT_EQ(q[2], 0);
  EXPECT_EQ(q[3], -64);
  EXPECT_EQ(q[4], 16);   // rint(0.5 * 31.75) = rint(15.875)
  EXPECT_EQ(q[5], -127);
  EXPECT_EQ(q[6], 0);    // column 2 zeroed in every row
  EXPECT_EQ(q[7], 64);
  const std::vector<float> y = to_floats(int8_vectorwise_dequant(r.values, r.row_stats));
  EXPECT_NEAR(y[1], 2.0f, 1e-6f);
  EXPECT_NEAR(y[5], -4.0f, 1e-6f);
  // The mask stays on the device when the columns are not read back.
  const Int8Quantized rm = int8_vectorwise_quant(x, 6.0f, {}, /*read_outlier_cols=*/false);
  EXPECT_TRUE(rm.outlier_cols.empty());
  ASSERT_TRUE(rm.outlier_mask.defined());
  const std::vector<uint8_t> want_mask = {0, 0, 1, 0};
  EXPECT_EQ(std::vector<uint8_t>(rm.outlier_mask.ptr<uint8_t>(), rm.outlier_mask.ptr<uint8_t>() + 4), want_mask);
  auto r0 = int8_vectorwise_quant(x);
  EXPECT_TRUE(r0.outlier_cols.empty());
  EXPECT_FALSE(r0.outlier_mask.defined());
  EXPECT_EQ(r0.row_stats.ptr<float>()[0], 8.0f);
}

// Column-wise: the row rule applied to the transpose (threshold 0), on every backend.
TEST(Int8Colwise, IsTheRowRuleOnTheTranspose) {
  for (DType dtype : kFloats) {
    for (auto shape : std::vector<std::vector<int64_t>>{{1, 1}, {7, 33}, {3, 5, 100}, {130, 70}}) {
      const int64_t k = shape.back(), rows = Tensor::empty(Shape(shape), DType::u8).numel() / k;
      const Tensor x = random_floats(shape, dtype, 3.0f);
      // x^T [k, rows], in x's dtype (a permutation of its elements).
      Tensor xt = Tensor::empty({k, rows}, dtype);
      const size_t es = static_cast<size_t>(dtype_bits(dtype) / 8);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          std::memcpy(static_cast<char*>(xt.data()) + (c * rows + r) * es,
                      static_cast<const char*>(x.data()) + (r * k + c) * es, es);
        }
      }
      const Int8Quantized t = int8_vectorwise_quant(xt);
      const std::string name = "int8_colwise_quant " + std::string(dtype_name(dtype)) + " k=" + std::to_string(k);
      for (const auto& impl : core::OpRegistry<Int8ColwiseQuantArgs>::all()) {
        if (impl.device != DeviceType::cpu) continue;
        Tensor q = Tensor::empty(Shape(shape), DType::i8), cs = Tensor::empty({k}, DType::f32);
        ops::run_impl(impl, Int8ColwiseQuantArgs{x, q, cs, 0.0f}, nullptr, Stream{});
        for (int64_t c = 0; c < k; ++c) ASSERT_EQ(cs.ptr<float>()[c], t.row_stats.ptr<float>()[c]) << name;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < k; ++c) {
            ASSERT_EQ(q.ptr<int8_t>()[r * k + c], t.values.ptr<int8_t>()[c * rows + r]) << name << " " << r << "," << c;
          }
        }
      }
    }
  }
}

TEST(Int8Colwise, OutlierElementsAreLeftOutAndZeroed) {
  // columns: [1, 0.5], [2, -4], [8, 1], [-1, 2]; threshold 6: the 8 alone is an outlier
  const Tensor x = host_tensor({1, 2, 8, -1, 0.5f, -4, 1, 2}).reshaped(std::vector<int64_t>{2, 4});
  const Int8ColwiseQuantized r = int8_colwise_quant(x, 6.0f);
  const float* cs = r.col_stats.ptr<float>();
  EXPECT_EQ(cs[0], 1.0f);
  EXPECT_EQ(cs[1], 4.0f);
  EXPECT_EQ(cs[2], 1.0f);  // the 8 left out
  EXPECT_EQ(cs[3], 2.0f);
  const int8_t* q = r.values.ptr<int8_t>();
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], 64);   // rint(2 * 31.75) = 63.5 -> 64
  EXPECT_EQ(q[2], 0);    // the outlier
  EXPECT_EQ(q[3], -64);
  EXPECT_EQ(q[4], 64);   // rint(0.5 * 127) = rint(63.5) -> 64
  EXPECT_EQ(q[5], -127);
  EXPECT_EQ(q[6], 127);  // 1 in its column of absmax 1
  EXPECT_EQ(q[7], 127);
  const Int8ColwiseQuantized r0 = int8_colwise_quant(x);
  EXPECT_EQ(r0.col_stats.ptr<float>()[2], 8.0f);
  expect_error([&] { int8_colwise_quant(x, -1.0f); }, ErrorCode::invalid_argument,
               {"int8_colwise_quant", "threshold", ">= 0"});
  expect_error([&] { int8_colwise_quant(Tensor::empty({2, 4}, DType::i8)); }, ErrorCode::unsupported_dtype,
               {"int8_colwise_quant", "input"});
}

TEST(Int8Vectorwise, ValidationMessages) {
  const Tensor x = random_floats({4, 8}, DType::f32);
  expect_error([&] { int8_vectorwise_quant(x, -1.0f); }, ErrorCode::invalid_argument,
               {"int8_vectorwise_quant", "threshold", "-1"});
  Tensor q = Tensor::empty({4, 8}, DType::i8);
  Tensor stats = Tensor::empty({4}, DType::f32);
  expect_error([&] { run(Int8VectorwiseQuantArgs{x, q, stats, {}, 6.0f}); }, ErrorCode::invalid_argument,
               {"int8_vectorwise_quant", "outlier_mask"});
  expect_error([&] { int8_vectorwise_dequant(q, Tensor::empty({3}, DType::f32)); }, ErrorCode::invalid_argument,
               {"int8_vectorwise_dequant", "row_stats", "4", "got 3"});
}

TEST(EstimateQuantiles, EveryBackendMatchesReference) {
  for (DType dtype : kFloats) {
    for (int64_t n : {256, 1000, 65537}) {
      OpCase<EstimateQuantilesArgs> c;
      c.name = "estimate_quantiles n=" + std::to_string(n);
      Tensor x = random_floats({n}, dtype);
      sprinkle_specials(x, 0);
      c.inputs = {x};
      c.outputs = {{{256}, DType::f32}};
      c.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
        return EstimateQuantilesArgs{in[0], out[0], 1.0f / 512.0f};
      };
      run_on_all_backends(c);
    }
  }
}

TEST(EstimateQuantiles, ExactOnAKnownSequence) {
  // 0..1023: quantile p is 1023 p exactly (linear interpolation).
  std::vector<float> v(1024);
  for (int i = 0; i < 1024; ++i) v[static_cast<size_t>(1023 - i)] = static_cast<float>(i);  // unsorted input
  const std::vector<float> q = to_floats(estimate_quantiles(host_tensor(v)));
  ASSERT_EQ(q.size(), 256u);
  for (int j = 0; j < 256; ++j) {
    const double p = 1.0 / 512 + j * (1.0 - 2.0 / 512) / 255.0;
    EXPECT_NEAR(q[static_cast<size_t>(j)], 1023.0 * p, 1e-4) << j;
  }
  const std::vector<float> q15 = to_floats(estimate_quantiles(host_tensor(v), 1.0f / 512.0f, 15));
  EXPECT_EQ(q15.size(), 15u);
  EXPECT_NEAR(q15[0], 1023.0 / 30.0, 1e-3) << "offset becomes 1/(2*15)";
  expect_error([&] { estimate_quantiles(host_tensor(std::vector<float>(100, 1.0f))); }, ErrorCode::invalid_argument,
               {"estimate_quantiles", "256", "got 100"});
}

}  // namespace
}  // namespace lowbit::test

namespace lowbit::test {
namespace {

TEST(Int8Vectorwise, NanEncodesAsZero) {
  const Tensor x = host_tensor({1.0f, std::nanf(""), -2.0f, 0.5f}).reshaped(std::vector<int64_t>{1, 4});
  auto r = int8_vectorwise_quant(x);
  EXPECT_EQ(r.row_stats.ptr<float>()[0], 2.0f);
  EXPECT_EQ(r.values.ptr<int8_t>()[1], 0);
  EXPECT_EQ(r.values.ptr<int8_t>()[2], -127);
}

}  // namespace
}  // namespace lowbit::test
