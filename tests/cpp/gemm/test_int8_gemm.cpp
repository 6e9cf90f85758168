// The int8 GEMMs: every implementation against int64 sums and the dequant
// formula written here, ragged shapes (K of any size), the extremes at the
// largest K, the fused op against the two steps, and the argument errors.
#include <cstring>
#include <string>

#include "core/float_convert.h"
#include "harness/harness.h"
#include "lowbit/ops/int8_gemm.h"

namespace lowbit::test {
namespace {

// Uniform int8, every value including -128.
Tensor random_int8(std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(Shape(shape), DType::i8);
  std::uniform_int_distribution<int> pick(-128, 127);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<int8_t>()[i] = static_cast<int8_t>(pick(rng()));
  return t;
}

Tensor filled_int8(std::vector<int64_t> shape, int8_t v) {
  Tensor t = Tensor::empty(Shape(shape), DType::i8);
  std::memset(t.data(), static_cast<unsigned char>(v), static_cast<size_t>(t.numel()));
  return t;
}

// Positive statistics, as int8_vectorwise_quant's absmax are.
Tensor random_stats(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::f32);
  std::uniform_real_distribution<float> pick(0.01f, 4.0f);
  for (int64_t i = 0; i < n; ++i) t.ptr<float>()[i] = pick(rng());
  return t;
}

std::vector<int32_t> int64_products(const Tensor& a, const Tensor& b) {
  const int64_t K = a.sizes().back(), rows = a.numel() / K, N = b.sizes()[0];
  std::vector<int32_t> c(static_cast<size_t>(rows * N));
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      int64_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += int64_t{a.ptr<int8_t>()[m * K + k]} * b.ptr<int8_t>()[n * K + k];
      c[static_cast<size_t>(m * N + n)] = static_cast<int32_t>(s);
    }
  }
  return c;
}

// The documented formula, in fp32 in its order, as floats of out's dtype.
std::vector<float> dequant_oracle(const std::vector<int32_t>& c, const Tensor& rs, const Tensor& cs, const Tensor* bias,
                                  DType out_dtype, int64_t N) {
  const std::vector<float> b = bias != nullptr ? to_floats(bias->ref()) : std::vector<float>{};
  std::vector<float> out(c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    const int64_t m = static_cast<int64_t>(i) / N, n = static_cast<int64_t>(i) % N;
    float v = static_cast<float>(c[i]) * (rs.ptr<float>()[m] * cs.ptr<float>()[n]) * kInt8DequantScale;
    if (bias != nullptr) v += b[static_cast<size_t>(n)];
    switch (out_dtype) {
      case DType::f16: v = core::to_f32(core::from_f32<core::Half>(v)); break;
      case DType::bf16: v = core::to_f32(core::from_f32<core::BFloat16>(v)); break;
      default: break;
    }
    out[i] = v;
  }
  return out;
}

void expect_bits(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::memcmp(&want[i], &got[i], 4), 0) << what << " at " << i << ": want " << want[i] << " got " << got[i];
  }
}

struct Case {
  std::vector<int64_t> lead;
  int64_t N, K;
};
const Case kShapes[] = {{{1}, 1, 1},     {{7}, 130, 272}, {{3, 5}, 64, 100}, {{0}, 64, 128},
                         {{129}, 67, 65}, {{65}, 129, 1000}, {{4}, 5, 63},    {{2}, 3, 4099}};

std::vector<int64_t> with_last(std::vector<int64_t> s, int64_t last) {
  s.push_back(last);
  return s;
}

TEST(Int8Gemm, LinearMatmulIsExactOnEveryBackend) {
  SCOPED_TRACE("impls: " + impl_names<Int8LinearMatmulArgs>());
  for (const Case& s : kShapes) {
    OpCase<Int8LinearMatmulArgs> c;
    c.name = "int8_linear_matmul N=" + std::to_string(s.N) + " K=" + std::to_string(s.K);
    c.inputs = {random_int8(with_last(s.lead, s.K)), random_int8({s.N, s.K})};
    c.outputs = {{with_last(s.lead, s.N), DType::i32}};
    c.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
      return Int8LinearMatmulArgs{in[0], in[1], out[0], {}};
    };
    const std::vector<int32_t> want = int64_products(c.inputs[0], c.inputs[1]);
    for (const auto& [name, outs] : run_every_impl(c)) {
      ASSERT_EQ(outs[0].numel(), static_cast<int64_t>(want.size())) << c.name;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(outs[0].ptr<int32_t>()[i], want[i]) << c.name << " [" << name << "] at " << i;
      }
    }
  }
}

// The int32 range's edges: the largest K with every product at +-128 * 128
// or 127 * -128 (the VNNI path's u8 sums pass 2^31 and wrap back exactly).
TEST(Int8Gemm, ExtremesAtTheLargestKAreExact) {
  const int64_t K = kInt8GemmMaxK;
  const int8_t values[][2] = {{-128, -128}, {127, -128}, {-128, 127}, {127, 127}};
  for (int64_t rows : {2, 40}) {  // a few rows (decode) and many (the packed kernels)
  for (const auto& v : values) {
    OpCase<Int8LinearMatmulArgs> c;
    c.name = "int8_linear_matmul rows=" + std::to_string(rows) + " K=" + std::to_string(K) + " a=" + std::to_string(v[0]) + " b=" + std::to_string(v[1]);
    c.inputs = {filled_int8({rows, K}, v[0]), filled_int8({3, K}, v[1])};
    c.outputs = {{{rows, 3}, DType::i32}};
    c.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
      return Int8LinearMatmulArgs{in[0], in[1], out[0], {}};
    };
    const int64_t want = int64_t{v[0]} * v[1] * K;
    ASSERT_LE(want, INT32_MAX);
    ASSERT_GE(want, INT32_MIN);
    for (const auto& [name, outs] : run_every_impl(c)) {
      for (int64_t i = 0; i < rows * 3; ++i) ASSERT_EQ(outs[0].ptr<int32_t>()[i], want) << c.name << " [" << name << "]";
    }
  }
  }
}

TEST(Int8Gemm, MmDequantIsTheFormulaForEveryDtype) {
  int i = 0;
  for (const Case& s : kShapes) {
    const int64_t rows = [&] {
      int64_t r = 1;
      for (int64_t d : s.lead) r *= d;
      return r;
    }();
    for (DType out_dtype : {DType::f16, DType::bf16, DType::f32}) {
      const DType bias_dtype = i % 4 == 0 ? DType::f16 : i % 4 == 1 ? DType::f32 : DType::bf16;
      const bool bias = i % 4 != 3;
      ++i;
      Tensor c32 = Tensor::empty(Shape(with_last(s.lead, s.N)), DType::i32);
      std::uniform_int_distribution<int32_t> pick(INT32_MIN, INT32_MAX);
      for (int64_t j = 0; j < c32.numel(); ++j) c32.ptr<int32_t>()[j] = j % 7 == 0 ? pick(rng()) : pick(rng()) >> 12;
      OpCase<Int8MmDequantArgs> c;
      c.name = "int8_mm_dequant N=" + std::to_string(s.N) + " " + std::string(dtype_name(out_dtype)) +
               (bias ? " bias " + std::string(dtype_name(bias_dtype)) : "");
      c.inputs = {c32, random_stats(rows), random_stats(s.N), random_floats({s.N}, bias_dtype)};
      c.outputs = {{with_last(s.lead, s.N), out_dtype}};
      c.make = [bias](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
        return Int8MmDequantArgs{in[0], in[1], in[2], bias ? in[3] : TensorRef{}, out[0]};
      };
      const std::vector<int32_t> cv(c32.ptr<int32_t>(), c32.ptr<int32_t>() + c32.numel());
      const std::vector<float> want =
          dequant_oracle(cv, c.inputs[1], c.inputs[2], bias ? &c.inputs[3] : nullptr, out_dtype, s.N);
      for (const auto& [name, outs] : run_every_impl(c)) expect_bits(want, to_floats(outs[0]), c.name + " [" + name + "]");
    }
  }
}

TEST(Int8Gemm, ScaledMmEqualsMatmulThenDequantBitForBit) {
  int i = 0;
  for (const Case& s : kShapes) {
    const DType out_dtype = i % 3 == 0 ? DType::f16 : i % 3 == 1 ? DType::bf16 : DType::f32;
    const bool bias = i % 2 == 0;
    ++i;
    const Tensor a = random_int8(with_last(s.lead, s.K)), b = random_int8({s.N, s.K});
    const Tensor rs = random_stats(a.numel() / s.K), cs = random_stats(s.N), bv = random_floats({s.N}, DType::f16);
    OpCase<Int8ScaledMmArgs> c;
    c.name = "int8_scaled_mm N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) + " " +
             std::string(dtype_name(out_dtype)) + (bias ? " bias" : "");
    c.inputs = {a, b, rs, cs, bv};
    c.outputs = {{with_last(s.lead, s.N), out_dtype}};
    c.make = [bias](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
      return Int8ScaledMmArgs{in[0], in[1], in[2], in[3], bias ? in[4] : TensorRef{}, out[0], {}};
    };
    const std::vector<float> want =
        dequant_oracle(int64_products(a, b), rs, cs, bias ? &bv : nullptr, out_dtype, s.N);
    for (const auto& [name, outs] : run_every_impl(c)) expect_bits(want, to_floats(outs[0]), c.name + " [" + name + "]");
    // The allocating calls: the same bits, a's leading dims kept.
    const Tensor two = int8_mm_dequant(int8_linear_matmul(a, b), rs, cs, out_dtype, bias ? bv.ref() : TensorRef{});
    const Tensor one = int8_scaled_mm(a, b, rs, cs, out_dtype, bias ? bv.ref() : TensorRef{});
    EXPECT_EQ(std::vector<int64_t>(one.sizes().begin(), one.sizes().end()), with_last(s.lead, s.N)) << c.name;
    expect_bits(to_floats(two.ref()), to_floats(one.ref()), c.name + " allocating calls");
  }
}

TEST(Int8Gemm, BadArgumentsSayWhatIsWrong) {
  const Tensor a = random_int8({4, 32}), b = random_int8({8, 32});
  expect_error([&] { int8_linear_matmul(random_floats({4, 32}, DType::f16), b); }, ErrorCode::unsupported_dtype,
               {"int8_linear_matmul", "a", "int8", "float16"});
  expect_error([&] { int8_linear_matmul(a, random_int8({8, 31})); }, ErrorCode::invalid_argument,
               {"int8_linear_matmul", "b's last dimension", "31", "32"});
  expect_error([&] { int8_linear_matmul(a, random_int8({2, 8, 32})); }, ErrorCode::invalid_argument,
               {"int8_linear_matmul", "b must be 2-D", "[2, 8, 32]"});
  expect_error([&] { int8_linear_matmul(random_int8({1, kInt8GemmMaxK + 1}), random_int8({1, kInt8GemmMaxK + 1})); },
               ErrorCode::invalid_argument, {"int8_linear_matmul", "K must be at most", "131072"});
  expect_error([&] { run(Int8LinearMatmulArgs{a, b, Tensor::empty({4, 8}, DType::i32), parse_kernel_config("mma_i8")}); },
               ErrorCode::invalid_argument, {"int8_linear_matmul", "mma_i8", "not a cpu kernel config"});
  Tensor wrong_out = Tensor::empty({4, 8}, DType::f32);
  expect_error([&] { run(Int8LinearMatmulArgs{a, b, wrong_out, {}}); }, ErrorCode::unsupported_dtype,
               {"int8_linear_matmul", "out", "int32", "float32"});
  const Tensor c = int8_linear_matmul(a, b);
  expect_error([&] { int8_mm_dequant(c, random_stats(3), random_stats(8)); }, ErrorCode::invalid_argument,
               {"int8_mm_dequant", "row_stats", "[4]", "[3]"});
  expect_error([&] { int8_mm_dequant(c, random_stats(4), random_stats(9)); }, ErrorCode::invalid_argument,
               {"int8_mm_dequant", "col_stats", "[8]", "[9]"});
  expect_error([&] { int8_mm_dequant(a, random_stats(4), random_stats(32)); }, ErrorCode::unsupported_dtype,
               {"int8_mm_dequant", "a", "int32", "int8"});
  expect_error([&] { int8_mm_dequant(c, random_stats(4), random_stats(8), DType::i32); }, ErrorCode::unsupported_dtype,
               {"int8_mm_dequant", "out", "int32"});
  expect_error([&] { int8_scaled_mm(a, b, random_stats(4), random_stats(8), DType::f16, random_floats({7}, DType::f16)); },
               ErrorCode::invalid_argument, {"int8_scaled_mm", "bias", "[8]", "[7]"});
}

}  // namespace
}  // namespace lowbit::test
