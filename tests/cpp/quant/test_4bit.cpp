// 4-bit NF4 / FP4 quantization: every backend against the CPU
// reference, bit-exact packing and code selection, error bounds, double quant.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/tables.h"
#include "harness/harness.h"

namespace lowbit::test {
namespace {

const DType kFloats[] = {DType::f32, DType::f16, DType::bf16};

OpCase<Quantize4bitArgs> quantize_case(int64_t n, int64_t bs, DType dtype, Quant4Type type) {
  OpCase<Quantize4bitArgs> c;
  c.name = std::string("quantize_4bit ") + (type == Quant4Type::nf4 ? "nf4" : "fp4") + " n=" + std::to_string(n) +
           " bs=" + std::to_string(bs) + " " + std::string(dtype_name(dtype));
  Tensor x = random_floats({n}, dtype);
  sprinkle_specials(x, bs);
  c.inputs = {x};
  c.outputs = {{{(n + 1) / 2}, DType::u8}, {{(n + bs - 1) / bs}, DType::f32}};
  c.make = [bs, type](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
    return Quantize4bitArgs{in[0], out[0], out[1], bs, type};
  };
  return c;
}

TEST(Quantize4bit, EveryBackendMatchesReference) {
  SCOPED_TRACE("impls: " + impl_names<Quantize4bitArgs>());
  const int64_t sizes[] = {0, 1, 2, 3, 63, 64, 65, 127, 1001, 4097, 33333, 100001};
  int i = 0;
  for (int64_t bs : {32, 64, 128, 256, 512, 1024, 2048, 4096}) {
    for (DType dtype : kFloats) {
      for (Quant4Type type : {Quant4Type::nf4, Quant4Type::fp4}) {
        run_on_all_backends(quantize_case(sizes[i++ % 12], bs, dtype, type));
      }
    }
  }
}

OpCase<Dequantize4bitArgs> dequantize_case(int64_t n, int64_t bs, DType out, Quant4Type type, bool nested) {
  OpCase<Dequantize4bitArgs> c;
  c.name = "dequantize_4bit n=" + std::to_string(n) + " bs=" + std::to_string(bs) + (nested ? " nested" : "");
  const int64_t nb = (n + bs - 1) / bs;
  c.inputs = {random_bytes({(n + 1) / 2}, DType::u8),
              nested ? random_bytes({nb}, DType::u8) : random_floats({nb}, DType::f32)};
  if (nested) {
    c.inputs.push_back(random_floats({256}, DType::f32));  // any code values work for decoding
    c.inputs.push_back(random_floats({(nb + 255) / 256}, DType::f32));
    c.inputs.push_back(host_tensor({0.25f}));
  }
  c.outputs = {{{n}, out}};
  c.make = [bs, type, nested](const std::vector<TensorRef>& in, const std::vector<TensorRef>& o) {
    Dequantize4bitArgs a{in[0], in[1], {}, o[0], bs, type};
    if (nested) a.nested = NestedAbsmax{in[2], in[3], in[4], 256};
    return a;
  };
  return c;
}

TEST(Dequantize4bit, EveryBackendMatchesReference) {
  int i = 0;
  for (int64_t bs : {32, 64, 256, 4096}) {
    for (DType out : kFloats) {
      for (Quant4Type type : {Quant4Type::nf4, Quant4Type::fp4}) {
        for (bool nested : {false, true}) {
          run_on_all_backends(dequantize_case(1 + 2999 * (i++ % 7), bs, out, type, nested));
        }
      }
    }
  }
}

// Absmax NaN, ±Inf, 0 and tiny (products below bf16's normal range): every
// backend's bytes equal the reference's, bf16's NaN and subnormal rounding included.
TEST(Dequantize4bit, SpecialAbsmaxMatchesReference) {
  for (DType out : kFloats) {
    for (int64_t bs : {32, 64}) {
      OpCase<Dequantize4bitArgs> c = dequantize_case(4096 + 33, bs, out, Quant4Type::nf4, false);
      float* m = c.inputs[1].ptr<float>();
      const uint32_t payload_nans[] = {0x7fc0ffffu, 0xffc12345u};  // NaN payloads the product carries to out
      float special[] = {std::nanf(""), 0.0f, 0.0f, -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::infinity(), 0.0f, 1e-39f, -3e-38f, 1e-45f};
      std::memcpy(&special[1], &payload_nans[0], 4);
      std::memcpy(&special[2], &payload_nans[1], 4);
      for (int64_t b = 0; b < c.inputs[1].numel(); ++b) {
        if (b % 3 == 0) m[b] = special[(b / 3) % 9];
      }
      c.name += std::string(" special absmax ") + std::string(dtype_name(out));
      run_on_all_backends(c);
    }
  }
}

TEST(Quantize4bit, Nf4PackingAndCodeSelectionAreExact) {
  // x = table value of code (i % 16) times 2; block 0's absmax is 2.
  std::vector<float> x;
  for (int i = 0; i < 33; ++i) x.push_back(core::kNf4Table[i % 16] * 2.0f);
  auto [packed, state] = quantize_4bit(host_tensor(x), 64, Quant4Type::nf4);
  ASSERT_EQ(packed.numel(), 17);
  EXPECT_EQ(packed.size(0), 17);
  EXPECT_EQ(packed.size(1), 1);
  const uint8_t* p = packed.ptr<uint8_t>();
  for (int j = 0; j < 16; ++j) {
    const int c0 = (2 * j) % 16, c1 = (2 * j + 1) % 16;
    EXPECT_EQ(p[j], (c0 << 4) | c1) << "byte " << j;
  }
  EXPECT_EQ(p[16], 0 << 4) << "odd tail: element 32 (code 0) in the high nibble, low nibble 0";
  EXPECT_EQ(state.absmax.ptr<float>()[0], 2.0f);
}

TEST(Quantize4bit, Nf4MidpointGoesToLowerCode) {
  for (int c = 0; c < 15; ++c) {
    const float mid = core::code_midpoint(core::kNf4Table[c], core::kNf4Table[c + 1]);
    // Block absmax 1 (the first element), so y = x exactly.
    auto [p, s] = quantize_4bit(host_tensor({1.0f, mid, std::nextafter(mid, 2.0f), 0.0f}), 32, Quant4Type::nf4);
    const uint8_t* b = p.ptr<uint8_t>();
    EXPECT_EQ(b[0] & 0xf, c) << "midpoint " << c;
    EXPECT_EQ(b[1] >> 4, c + 1) << "above midpoint " << c;
  }
}

TEST(Quantize4bit, Fp4DecisionConstants) {
  struct Case {
    float y;
    int code;
  };
  const Case cases[] = {{0.0f, 0b000},     {0.0026f, 0b000},   {0.0027f, 0b001},  {0.09f, 0b110},
                        {0.21f, 0b111},    {0.3f, 0b100},      {0.42f, 0b101},    {0.6f, 0b010},
                        {0.84f, 0b011},    {1.0f, 0b011},      {-1.0f, 0b1011},   {-0.0f, 0b000},
                        {-0.3f, 0b1100},   {0.8333333f, 0b010}, {0.0859375f, 0b001}};
  for (const Case& c : cases) {
    // element 0 fixes absmax = 1, element 1 is the probe.
    auto [p, s] = quantize_4bit(host_tensor({1.0f, c.y}), 32, Quant4Type::fp4);
    EXPECT_EQ(p.ptr<uint8_t>()[0] & 0xf, c.code) << "y = " << c.y;
  }
}

double relative_error(const Tensor& x, const Tensor& y) {
  const std::vector<float> a = to_floats(x), b = to_floats(y);
  double err = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (a[i] - b[i]) * double(a[i] - b[i]);
    mag += a[i] * double(a[i]);
  }
  return std::sqrt(err / mag);
}

// Relative RMSE on normal data. Measured (blocksize 64): nf4 ~0.10, fp4 ~0.11.
TEST(Quantize4bit, ErrorBounds) {
  for (Quant4Type type : {Quant4Type::nf4, Quant4Type::fp4}) {
    for (int64_t bs : {32, 64, 256, 4096}) {
      const Tensor x = random_floats({1 << 16}, DType::f32);
      auto [p, s] = quantize_4bit(x, bs, type);
      const double e = relative_error(x, dequantize_4bit(p, s));
      EXPECT_LT(e, bs <= 64 ? 0.13 : 0.25) << (type == Quant4Type::nf4 ? "nf4" : "fp4") << " bs " << bs;
      EXPECT_GT(e, 0.01) << "suspiciously exact";
    }
  }
}

TEST(Quantize4bit, DoubleQuantRoundTrip) {
  for (DType dtype : kFloats) {
    const Tensor x = random_floats({64, 1000}, dtype);
    auto [p1, s1] = quantize_4bit(x, 64, Quant4Type::nf4, false);
    auto [p2, s2] = quantize_4bit(x, 64, Quant4Type::nf4, true);
    ASSERT_TRUE(s2.nested());
    EXPECT_EQ(s2.state2->blocksize, 256);
    EXPECT_EQ(s2.absmax.dtype(), DType::u8);
    EXPECT_EQ(s2.absmax.numel(), 1000);
    expect_same_bytes(p1, p2, "codes do not depend on double quant");
    const Tensor y = dequantize_4bit(p2, s2);
    EXPECT_EQ(y.dtype(), dtype);
    ASSERT_EQ(y.ndim(), 2);
    EXPECT_EQ(y.size(1), 1000);
    EXPECT_LT(relative_error(x, y), relative_error(x, dequantize_4bit(p1, s1)) + 0.01);
  }
}

TEST(Quantize4bit, ValidationMessages) {
  const Tensor x = random_floats({100}, DType::f32);
  expect_error([&] { quantize_4bit(x, 48); }, ErrorCode::invalid_argument, {"quantize_4bit", "blocksize", "48"});
  expect_error([&] { quantize_4bit(x, 8192); }, ErrorCode::invalid_argument, {"quantize_4bit", "blocksize", "8192"});
  Tensor out = Tensor::empty({49}, DType::u8);
  Tensor absmax = Tensor::empty({2}, DType::f32);
  expect_error([&] { run(Quantize4bitArgs{x, out, absmax, 64, Quant4Type::nf4}); }, ErrorCode::invalid_argument,
               {"quantize_4bit", "out", "50", "got 49"});
  auto [p, s] = quantize_4bit(x, 64);
  QuantState bad = s;
  bad.quant_type = "int4";
  expect_error([&] { dequantize_4bit(p, bad); }, ErrorCode::invalid_argument, {"dequantize_4bit", "quant_type", "int4"});
  Tensor short_packed = Tensor::empty({10}, DType::u8);
  expect_error([&] { dequantize_4bit(short_packed, s); }, ErrorCode::invalid_argument,
               {"dequantize_4bit", "input", "50", "got 10"});
}

}  // namespace
}  // namespace lowbit::test
