// The int8 GEMMs: every implementation against int64 sums and the dequant
// formula written here, ragged shapes (K of any size), the extremes at the
// largest K, the fused op against the two steps, and the argument errors.
#include <cstring>
#include <string>

#include "core/float_convert.h"
#include "core/quant_math.h"
#include "harness/harness.h"
#include "lowbit/ops/int8_gemm.h"

namespace lowbit::test {
namespace {

Tensor filled_int8(std::vector<int64_t> shape, int8_t v) {
  Tensor t = Tensor::empty(Shape(shape), DType::i8);
  std::memset(t.data(), static_cast<unsigned char>(v), static_cast<size_t>(t.numel()));
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

// The outlier sum written out here: out + sum over ascending marked k of
// a[m, k] * int8_decode(b[n, k], b_stats[n]), each product and sum rounded in
// fp32, then rounded once to out's dtype.
std::vector<float> outliers_oracle(const Tensor& a, const std::vector<uint8_t>& mask, const Tensor& b,
                                   const Tensor& bs, const Tensor& out0) {
  const int64_t K = a.sizes().back(), rows = a.numel() / K, N = b.sizes()[0];
  const std::vector<float> av = to_floats(a.ref()), o = to_floats(out0.ref());
  std::vector<float> want(o.size());
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        if (!mask[static_cast<size_t>(k)]) continue;
        const float w = core::int8_decode(b.ptr<int8_t>()[n * K + k], bs.ptr<float>()[n]);
        const float p = av[static_cast<size_t>(m * K + k)] * w;
        acc = acc + p;
      }
      float v = o[static_cast<size_t>(m * N + n)] + acc;
      switch (out0.dtype()) {
        case DType::f16: v = core::to_f32(core::from_f32<core::Half>(v)); break;
        case DType::bf16: v = core::to_f32(core::from_f32<core::BFloat16>(v)); break;
        default: break;
      }
      want[static_cast<size_t>(m * N + n)] = v;
    }
  }
  return want;
}

TEST(Int8Gemm, LinearOutliersAddTheMarkedColumnsOnEveryDevice) {
  struct Shape {
    std::vector<int64_t> lead;
    int64_t N, K;
  };
  const Shape shapes[] = {{{3, 5}, 33, 70}, {{130}, 257, 300}, {{1}, 64, 1100}};
  int i = 0;
  for (const Shape& s : shapes) {
    for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
      for (int kind = 0; kind < 3; ++kind) {  // no column marked, a few, every column
        ++i;
        std::vector<uint8_t> mask(static_cast<size_t>(s.K), kind == 2 ? 1 : 0);
        if (kind == 1) {
          for (int64_t k = i % 7; k < s.K; k += 37) mask[static_cast<size_t>(k)] = 1;
        }
        Tensor m = Tensor::empty({s.K}, DType::u8);
        std::memcpy(m.data(), mask.data(), mask.size());
        const Tensor a = random_floats(with_last(s.lead, s.K), dtype, 4.0f), b = random_int8({s.N, s.K});
        const Tensor bs = random_stats(s.N), out0 = random_floats(with_last(s.lead, s.N), dtype);
        const std::string name = "int8_linear_outliers N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) + " " +
                                 std::string(dtype_name(dtype)) + " marked=" + std::to_string(kind);
        const std::vector<float> want = outliers_oracle(a, mask, b, bs, out0);
        Tensor out = out0.to(Device::cpu());
        run(Int8LinearOutliersArgs{a, m, b, bs, out});
        expect_bits(want, to_floats(out.ref()), name + " [cpu]");
        if (cuda_available()) {
          const Device g = Device::cuda(0);
          const Tensor ga = a.to(g), gm = m.to(g), gb = b.to(g), gbs = bs.to(g);
          Tensor gout = out0.to(g);
          int8_linear_outliers(ga, gm, gb, gbs, gout);
          expect_bits(want, to_floats(gout.ref()), name + " [cuda]");
        }
      }
    }
  }
}

// int8_linear: the three documented steps, bit for bit, on every device; near
// the float product a @ dequant(b)^T + bias; outlier columns only past the threshold.
TEST(Int8Gemm, LinearIsQuantScaledMmAndOutliers) {
  const int64_t K = 200, N = 70;
  const Tensor w = random_floats({N, K}, DType::f32);
  const Int8Quantized wq = int8_vectorwise_quant(w.ref());
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    for (float threshold : {0.0f, 6.0f}) {
      const std::string name =
          "int8_linear " + std::string(dtype_name(dtype)) + " threshold=" + std::to_string(threshold);
      std::vector<float> values = to_floats(random_floats({35 * K}, DType::f32).ref());
      for (int64_t r = 0; r < 35; ++r) {
        for (int64_t k : {3, 77, 150}) values[static_cast<size_t>(r * K + k)] *= 12.0f;  // outlier features
      }
      const Tensor flat = host_tensor(values, dtype);
      const Tensor a = Tensor::copy_of(TensorRef::contiguous(flat.data(), dtype, Shape({5, 7, K}), Device::cpu()),
                                       Device::cpu());
      const Tensor bias = random_floats({N}, DType::f16);
      const Tensor got = int8_linear(a.ref(), wq.values.ref(), wq.row_stats.ref(), bias.ref(), threshold);
      ASSERT_EQ(got.dtype(), dtype) << name;
      ASSERT_EQ(std::vector<int64_t>(got.sizes().begin(), got.sizes().end()), (std::vector<int64_t>{5, 7, N})) << name;
      // The steps.
      const Int8Quantized aq = int8_vectorwise_quant(a.ref(), threshold);
      if (threshold > 0.0f) {
        EXPECT_GE(aq.outlier_cols.size(), 3u) << name;
      }
      Tensor want = int8_scaled_mm(aq.values.ref(), wq.values.ref(), aq.row_stats.ref(), wq.row_stats.ref(), dtype,
                                   bias.ref());
      if (threshold > 0.0f) {
        Tensor mask = Tensor::empty({K}, DType::u8);
        std::memset(mask.data(), 0, static_cast<size_t>(K));
        for (int64_t k : aq.outlier_cols) mask.ptr<uint8_t>()[k] = 1;
        run(Int8LinearOutliersArgs{a, mask, wq.values, wq.row_stats, want});
      }
      expect_bits(to_floats(want.ref()), to_floats(got.ref()), name + " against its steps");
      // Near the float product (the outliers kept exact help at threshold 6).
      const std::vector<float> av = to_floats(a.ref()), g = to_floats(got.ref()), bv = to_floats(bias.ref());
      double err = 0.0, ref = 0.0;
      for (int64_t m = 0; m < 35; ++m) {
        for (int64_t n = 0; n < N; ++n) {
          double s = bv[static_cast<size_t>(n)];
          for (int64_t k = 0; k < K; ++k) {
            s += double{av[static_cast<size_t>(m * K + k)]} *
                 core::int8_decode(wq.values.ptr<int8_t>()[n * K + k], wq.row_stats.ptr<float>()[n]);
          }
          err += (g[static_cast<size_t>(m * N + n)] - s) * (g[static_cast<size_t>(m * N + n)] - s);
          ref += s * s;
        }
      }
      EXPECT_LT(std::sqrt(err / ref), threshold > 0.0f ? 0.01 : 0.05) << name;
      if (cuda_available()) {
        const Device gpu = Device::cuda(0);
        const Tensor ga = a.to(gpu), gw = wq.values.to(gpu), gs = wq.row_stats.to(gpu), gbias = bias.to(gpu);
        const Tensor gout = int8_linear(ga.ref(), gw.ref(), gs.ref(), gbias.ref(), threshold);
        expect_bits(to_floats(got.ref()), to_floats(gout.ref()), name + " [cuda]");
      }
    }
  }
  expect_error([&] { int8_linear(w.ref(), wq.values.ref(), wq.row_stats.ref(), {}, -1.0f); },
               ErrorCode::invalid_argument, {"int8_linear", "threshold", ">= 0"});
  expect_error([&] { int8_linear(w.ref(), wq.values.ref(), random_stats(N + 1).ref()); }, ErrorCode::invalid_argument,
               {"int8_linear", "b_stats", "[70]", "[71]"});
  expect_error([&] { int8_linear(wq.values.ref(), wq.values.ref(), wq.row_stats.ref()); }, ErrorCode::unsupported_dtype,
               {"int8_linear", "a", "int8"});
  // The op's own arguments: out's dtype and shape, a config the cpu backend does not have.
  Tensor out16 = Tensor::empty({N, N}, DType::f16), out_short = Tensor::empty({N, N - 1}, DType::f32);
  expect_error([&] { int8_linear_into(w.ref(), wq.values.ref(), wq.row_stats.ref(), {}, 6.0f, out16.ref()); },
               ErrorCode::unsupported_dtype, {"int8_linear", "out", "float32", "float16"});
  expect_error([&] { int8_linear_into(w.ref(), wq.values.ref(), wq.row_stats.ref(), {}, 6.0f, out_short.ref()); },
               ErrorCode::invalid_argument, {"int8_linear", "out", "[70, 70]", "[70, 69]"});
  Tensor out32 = Tensor::empty({N, N}, DType::f32);
  expect_error([&] { run(Int8LinearArgs{w, wq.values, wq.row_stats, {}, 6.0f, out32, parse_kernel_config("mma_i8")}); },
               ErrorCode::invalid_argument, {"int8_linear", "mma_i8", "not a cpu kernel config"});
}

// The input gradient against the sum written out here, bit for bit; near the
// float product; shapes ragged in every dimension; the errors.
TEST(Int8Gemm, LinearGradInputIsTheFloatSumInOrder) {
  struct Shape {
    std::vector<int64_t> lead;
    int64_t N, K;
  };
  const Shape shapes[] = {{{1}, 1, 1}, {{3, 5}, 33, 70}, {{9}, 130, 67}, {{0}, 8, 16}, {{2}, 0, 5}};  // N = 0: zeros
  for (const Shape& s : shapes) {
    for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
      const Tensor g = random_floats(with_last(s.lead, s.N), dtype), b = random_int8({s.N, s.K});
      const Tensor bs = random_stats(s.N);
      const std::string name = "int8_linear_grad_input N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) + " " +
                               std::string(dtype_name(dtype));
      const Tensor got = int8_linear_grad_input(g.ref(), b.ref(), bs.ref());
      ASSERT_EQ(std::vector<int64_t>(got.sizes().begin(), got.sizes().end()), with_last(s.lead, s.K)) << name;
      const std::vector<float> gv = to_floats(g.ref());
      const int64_t rows = got.numel() / s.K;
      std::vector<float> want(static_cast<size_t>(rows * s.K));
      for (int64_t m = 0; m < rows; ++m) {
        for (int64_t k = 0; k < s.K; ++k) {
          float acc = 0.0f;
          for (int64_t n = 0; n < s.N; ++n) {
            const float p = gv[static_cast<size_t>(m * s.N + n)] *
                            core::int8_decode(b.ptr<int8_t>()[n * s.K + k], bs.ptr<float>()[n]);
            acc = acc + p;
          }
          switch (dtype) {
            case DType::f16: acc = core::to_f32(core::from_f32<core::Half>(acc)); break;
            case DType::bf16: acc = core::to_f32(core::from_f32<core::BFloat16>(acc)); break;
            default: break;
          }
          want[static_cast<size_t>(m * s.K + k)] = acc;
        }
      }
      expect_bits(want, to_floats(got.ref()), name);
    }
  }
  const Tensor b = random_int8({8, 16});
  expect_error([&] { int8_linear_grad_input(random_floats({2, 7}, DType::f32).ref(), b.ref(), random_stats(8).ref()); },
               ErrorCode::invalid_argument, {"int8_linear_grad_input", "grad_out's last dimension", "7", "8"});
  expect_error([&] { int8_linear_grad_input(random_floats({2, 8}, DType::f32).ref(), b.ref(), random_stats(9).ref()); },
               ErrorCode::invalid_argument, {"int8_linear_grad_input", "b_stats", "[8]", "[9]"});
  expect_error([&] { int8_linear_grad_input(b.ref(), b.ref(), random_stats(8).ref()); }, ErrorCode::unsupported_dtype,
               {"int8_linear_grad_input", "grad_out"});
}

}  // namespace
}  // namespace lowbit::test
