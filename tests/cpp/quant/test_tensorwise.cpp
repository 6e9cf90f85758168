// Tensor-wise 8-bit quantization (bitsandbytes' quantize, dequantize,
// quantize_no_absmax, dequantize_no_absmax): every backend against the CPU
// reference (a CUDA device included where present), known answers, the
// round trip's error bound, bad arguments.
#include <cmath>

#include "core/tables.h"
#include "harness/harness.h"
#include "lowbit/code_maps.h"

namespace lowbit::test {
namespace {

const int64_t kSizes[] = {0, 1, 7, 8, 9, 2047, 2049, 12345, 70001, (1 << 16) + 5};
const DType kFloats[] = {DType::f32, DType::f16, DType::bf16};

std::vector<float> code_map(int which) {
  switch (which % 3) {
    case 0: return create_dynamic_map();
    case 1: return create_linear_map();
    default: return create_normal_map();
  }
}

OpCase<QuantizeTensorwiseArgs> quantize_case(int64_t n, DType dtype, const std::vector<float>& code, float scale) {
  OpCase<QuantizeTensorwiseArgs> c;
  c.name = "quantize_tensorwise n=" + std::to_string(n) + " " + std::string(dtype_name(dtype));
  Tensor x = random_floats({n}, dtype, scale);
  sprinkle_specials(x);
  c.inputs = {x, host_tensor(code)};
  c.outputs = {{{n}, DType::u8}, {{1}, DType::f32}};
  c.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
    return QuantizeTensorwiseArgs{in[0], in[1], out[0], out[1]};
  };
  return c;
}

OpCase<QuantizeNoAbsmaxArgs> no_absmax_case(int64_t n, DType dtype, const std::vector<float>& code) {
  OpCase<QuantizeNoAbsmaxArgs> c;
  c.name = "quantize_no_absmax n=" + std::to_string(n) + " " + std::string(dtype_name(dtype));
  Tensor x = random_floats({n}, dtype, 0.5f);
  sprinkle_specials(x);
  c.inputs = {x, host_tensor(code)};
  c.outputs = {{{n}, DType::u8}};
  c.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
    return QuantizeNoAbsmaxArgs{in[0], in[1], out[0]};
  };
  return c;
}

TEST(QuantizeTensorwise, EveryBackendMatchesReference) {
  SCOPED_TRACE("impls: " + impl_names<QuantizeTensorwiseArgs>());
  int i = 0;
  for (int64_t n : kSizes) {
    for (DType dtype : kFloats) {
      run_on_all_backends(quantize_case(n, dtype, code_map(i), i % 2 ? 1.0f : 1e-3f));
      run_on_all_backends(no_absmax_case(n, dtype, code_map(i + 1)));
      ++i;
    }
  }
}

TEST(QuantizeTensorwise, DequantizeEveryBackendMatchesReference) {
  for (int64_t n : kSizes) {
    for (DType dtype : kFloats) {
      OpCase<DequantizeTensorwiseArgs> c;
      c.name = "dequantize_tensorwise n=" + std::to_string(n) + " " + std::string(dtype_name(dtype));
      c.inputs = {random_bytes({n}, DType::u8), host_tensor(create_dynamic_map()), host_tensor({0.37f})};
      c.outputs = {{{n}, dtype}};
      c.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
        return DequantizeTensorwiseArgs{in[0], in[1], in[2], out[0]};
      };
      run_on_all_backends(c);
      OpCase<DequantizeNoAbsmaxArgs> d;
      d.name = "dequantize_no_absmax n=" + std::to_string(n) + " " + std::string(dtype_name(dtype));
      d.inputs = {random_bytes({n}, DType::u8), host_tensor(create_normal_map())};
      d.outputs = {{{n}, dtype}};
      d.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
        return DequantizeNoAbsmaxArgs{in[0], in[1], out[0]};
      };
      run_on_all_backends(d);
    }
  }
}

// Known answers: absmax is max |x| (NaN ignored), each code value divided
// back lands on its own index, an exact midpoint takes the lower code, and
// dequantize gives code[q] * absmax.
TEST(QuantizeTensorwise, KnownAnswers) {
  const std::vector<float> code = create_dynamic_map();
  float mid[255];
  core::table_midpoints(code.data(), 256, mid);
  std::vector<float> x;
  for (int i = 0; i < 256; ++i) x.push_back(code[i] * 2.0f);  // exact: times a power of two
  x.push_back(NAN);
  x.push_back(mid[200] * 2.0f);  // a midpoint, exactly
  const Tensor in = host_tensor(x), c = host_tensor(code);
  const int64_t n = static_cast<int64_t>(x.size());
  for (const auto& impl : core::OpRegistry<QuantizeTensorwiseArgs>::all()) {
    if (impl.device != DeviceType::cpu) continue;
    SCOPED_TRACE(impl.name);
    Tensor q = Tensor::empty({n}, DType::u8), absmax = Tensor::empty({1}, DType::f32);
    const QuantizeTensorwiseArgs a{in, c, q, absmax};
    check(a);
    impl.run(a, nullptr, Stream{});
    EXPECT_EQ(absmax.ptr<float>()[0], 2.0f);
    for (int i = 0; i < 256; ++i) {
      // Zero runs of a map share a value: the lowest index of the run.
      const uint8_t got = q.ptr<uint8_t>()[i];
      EXPECT_EQ(code[got], code[i]) << "code " << i;
    }
    EXPECT_EQ(q.ptr<uint8_t>()[256], core::encode_by_midpoints<8>(0.0f, mid)) << "NaN encodes as 0";
    EXPECT_EQ(q.ptr<uint8_t>()[257], 200) << "an exact midpoint takes the lower code";
  }
  Tensor q = Tensor::empty({n}, DType::u8), absmax = Tensor::empty({1}, DType::f32);
  run(QuantizeTensorwiseArgs{in, c, q, absmax});
  Tensor out = Tensor::empty({n}, DType::f32);
  run(DequantizeTensorwiseArgs{q, c, absmax, out});
  for (int i = 0; i < 256; ++i) EXPECT_EQ(out.ptr<float>()[i], x[i]) << "element " << i;

  // All zeros: absmax 0, 0's code, decoded to 0 exactly.
  const Tensor zeros = host_tensor(std::vector<float>(100, 0.0f));
  Tensor qz = Tensor::empty({100}, DType::u8);
  run(QuantizeTensorwiseArgs{zeros, c, qz, absmax});
  EXPECT_EQ(absmax.ptr<float>()[0], 0.0f);
  Tensor back = Tensor::empty({100}, DType::f32);
  run(DequantizeTensorwiseArgs{qz, c, absmax, back});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(back.ptr<float>()[i], 0.0f);
}

// The round trip is within half the map's largest gap, times absmax.
TEST(QuantizeTensorwise, RoundTripWithinHalfAGap) {
  const std::vector<float> code = create_dynamic_map();
  double gap = 0.0;
  for (int i = 0; i + 1 < 256; ++i) gap = std::max(gap, static_cast<double>(code[i + 1]) - code[i]);
  for (DType dtype : kFloats) {
    const int64_t n = 50001;
    const Tensor x = random_floats({n}, dtype, 3.0f);
    Tensor q = Tensor::empty({n}, DType::u8), absmax = Tensor::empty({1}, DType::f32);
    run(QuantizeTensorwiseArgs{x, host_tensor(code), q, absmax});
    Tensor back = Tensor::empty({n}, DType::f32);
    run(DequantizeTensorwiseArgs{q, host_tensor(code), absmax, back});
    const std::vector<float> xv = to_floats(x.ref());
    double m = 0.0;
    for (float v : xv) m = std::max(m, std::fabs(static_cast<double>(v)));
    EXPECT_EQ(absmax.ptr<float>()[0], static_cast<float>(m));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(back.ptr<float>()[i] - static_cast<double>(xv[i])), (0.5 * gap + 1e-6) * m) << i;
    }
  }
}

TEST(QuantizeTensorwise, BadArgumentsSayWhatIsWrong) {
  const Tensor x = random_floats({10}, DType::f32), code = host_tensor(create_dynamic_map());
  const Tensor q = Tensor::empty({10}, DType::u8), q9 = Tensor::empty({9}, DType::u8);
  const Tensor absmax = Tensor::empty({1}, DType::f32), absmax2 = Tensor::empty({2}, DType::f32);
  const Tensor xi = Tensor::empty({10}, DType::i32), out = Tensor::empty({10}, DType::f32);
  std::vector<float> unsorted = create_dynamic_map();
  std::swap(unsorted[3], unsorted[4]);
  expect_error([&] { run(QuantizeTensorwiseArgs{x, code, q9, absmax}); }, ErrorCode::invalid_argument,
               {"quantize_tensorwise", "out", "10", "9"});
  expect_error([&] { run(QuantizeTensorwiseArgs{x, code, q, absmax2}); }, ErrorCode::invalid_argument,
               {"quantize_tensorwise", "absmax", "1", "2"});
  expect_error([&] { run(QuantizeTensorwiseArgs{xi, code, q, absmax}); }, ErrorCode::unsupported_dtype,
               {"quantize_tensorwise", "input", "int32"});
  expect_error([&] { run(QuantizeNoAbsmaxArgs{x, host_tensor(unsorted), q}); }, ErrorCode::invalid_argument,
               {"quantize_no_absmax", "code must be sorted ascending"});
  expect_error([&] { run(QuantizeNoAbsmaxArgs{x, code, TensorRef{}}); }, ErrorCode::invalid_argument,
               {"quantize_no_absmax", "out"});
  expect_error([&] { run(DequantizeNoAbsmaxArgs{x, code, out}); }, ErrorCode::unsupported_dtype,
               {"dequantize_no_absmax", "input", "float32"});
  expect_error([&] { run(DequantizeNoAbsmaxArgs{q, code, xi}); }, ErrorCode::unsupported_dtype,
               {"dequantize_no_absmax", "out", "int32"});
  expect_error([&] { run(DequantizeTensorwiseArgs{q9, code, absmax, out}); }, ErrorCode::invalid_argument,
               {"dequantize_tensorwise", "out", "9", "10"});
  expect_error([&] { run(DequantizeTensorwiseArgs{q, code, TensorRef{}, out}); }, ErrorCode::invalid_argument,
               {"dequantize_tensorwise", "absmax"});
}

}  // namespace
}  // namespace lowbit::test
