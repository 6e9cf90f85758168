// 8-bit blockwise quantization: every backend against the CPU
// reference, known answers, error bounds, nested absmax.
#include <cmath>

#include "core/tables.h"
#include "harness/harness.h"
#include "lowbit/code_maps.h"

namespace lowbit::test {
namespace {

const int64_t kSizes[] = {0, 1, 2, 3, 31, 33, 64, 65, 1000, 4095, 4097, 12345, 70001};
const int64_t kBlocksizes[] = {32, 64, 128, 256, 512, 1024, 2048, 4096};
const DType kFloats[] = {DType::f32, DType::f16, DType::bf16};

std::vector<float> code_map(int which) {
  switch (which % 4) {
    case 0: return create_dynamic_map();
    case 1: return create_linear_map();
    case 2: return create_normal_map();
    default: return create_dynamic_map(false);
  }
}

OpCase<QuantizeBlockwiseArgs> quantize_case(int64_t n, int64_t bs, DType dtype, const std::vector<float>& code) {
  OpCase<QuantizeBlockwiseArgs> c;
  c.name = "quantize_blockwise n=" + std::to_string(n) + " bs=" + std::to_string(bs) + " " +
           std::string(dtype_name(dtype));
  Tensor x = random_floats({n}, dtype);
  sprinkle_specials(x, bs);
  c.inputs = {x, host_tensor(code)};
  c.outputs = {{{n}, DType::u8}, {{(n + bs - 1) / bs}, DType::f32}};
  c.make = [bs](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
    return QuantizeBlockwiseArgs{in[0], in[1], out[0], out[1], bs};
  };
  return c;
}

TEST(QuantizeBlockwise, EveryBackendMatchesReference) {
  SCOPED_TRACE("impls: " + impl_names<QuantizeBlockwiseArgs>());
  int i = 0;
  for (int64_t bs : kBlocksizes) {
    for (DType dtype : kFloats) {
      for (int64_t n : {kSizes[i % 13], kSizes[(i + 5) % 13], int64_t{3 * 4096 + 17}}) {
        run_on_all_backends(quantize_case(n, bs, dtype, code_map(i)));
      }
      ++i;
    }
  }
}

TEST(QuantizeBlockwise, LargeInputUsesBucketEncoder) {
  // >= 2^18 elements: the CPU fast path switches to its bucket table.
  run_on_all_backends(quantize_case((1 << 18) + 77, 256, DType::f32, create_dynamic_map()));
  run_on_all_backends(quantize_case((1 << 18) + 3, 4096, DType::bf16, create_linear_map()));
}

TEST(QuantizeBlockwise, KnownAnswerCodeValuesEncodeToTheirIndex) {
  const std::vector<float> code = create_linear_map(true, 8, true);  // distinct values but a zero run
  std::vector<float> x;
  for (int i = 0; i < 256; ++i) x.push_back(code[static_cast<size_t>(i)] * 3.0f);
  const Tensor input = host_tensor(x);
  const Tensor code_t = host_tensor(code);
  auto [q, state] = quantize_blockwise(input, code_t, 256);
  EXPECT_FLOAT_EQ(state.absmax.ptr<float>()[0], 3.0f);
  for (int i = 0; i < 256; ++i) {
    const uint8_t got = q.ptr<uint8_t>()[i];
    EXPECT_EQ(code[got], code[static_cast<size_t>(i)]) << "index " << i;
  }
}

TEST(QuantizeBlockwise, AllZeroBlockDequantizesToExactZero) {
  const Tensor x = host_tensor(std::vector<float>(300, 0.0f));
  auto [q, state] = quantize_blockwise(x, {}, 64);
  const std::vector<float> y = to_floats(dequantize_blockwise(q, state));
  for (float v : y) EXPECT_EQ(v, 0.0f);
  for (int64_t b = 0; b < state.absmax.numel(); ++b) EXPECT_EQ(state.absmax.ptr<float>()[b], 0.0f);
}

TEST(QuantizeBlockwise, NanEncodesAsZeroAndIsIgnoredByAbsmax) {
  std::vector<float> v(64, 0.5f);
  v[3] = std::nanf("");
  v[5] = -2.0f;
  auto [q, state] = quantize_blockwise(host_tensor(v), {}, 64);
  EXPECT_EQ(state.absmax.ptr<float>()[0], 2.0f);
  const std::vector<float> y = to_floats(dequantize_blockwise(q, state));
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_NEAR(y[5], -2.0f, 0.02f);  // the dynamic map's most negative code is -0.992
}

// Mean absolute error over normal data, relative to the mean |x|, with the
// dynamic map: measured ~0.3-1.2% from blocksize 32 to 4096.
TEST(QuantizeBlockwise, ErrorBoundsPerBlocksize) {
  for (int64_t bs : kBlocksizes) {
    const Tensor x = random_floats({1 << 16}, DType::f32);
    auto [q, state] = quantize_blockwise(x, {}, bs);
    const std::vector<float> y = to_floats(dequantize_blockwise(q, state));
    double err = 0, mag = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      err += std::fabs(y[static_cast<size_t>(i)] - x.ptr<float>()[i]);
      mag += std::fabs(x.ptr<float>()[i]);
    }
    EXPECT_LT(err / mag, 0.02) << "blocksize " << bs;
  }
}

OpCase<DequantizeBlockwiseArgs> dequantize_case(int64_t n, int64_t bs, DType out, bool nested) {
  OpCase<DequantizeBlockwiseArgs> c;
  c.name = "dequantize_blockwise n=" + std::to_string(n) + " bs=" + std::to_string(bs) + " " +
           std::string(dtype_name(out)) + (nested ? " nested" : "");
  const int64_t nb = (n + bs - 1) / bs;
  const int64_t nbs = 64;
  c.inputs = {random_bytes({n}, DType::u8), host_tensor(create_dynamic_map()),
              nested ? random_bytes({nb}, DType::u8) : random_floats({nb}, DType::f32)};
  if (nested) {
    c.inputs.push_back(host_tensor(create_dynamic_map()));
    c.inputs.push_back(random_floats({(nb + nbs - 1) / nbs}, DType::f32));
    c.inputs.push_back(host_tensor({0.37f}));
  }
  c.outputs = {{{n}, out}};
  c.make = [bs, nested, nbs](const std::vector<TensorRef>& in, const std::vector<TensorRef>& o) {
    DequantizeBlockwiseArgs a{in[0], in[1], in[2], {}, o[0], bs};
    if (nested) a.nested = NestedAbsmax{in[3], in[4], in[5], nbs};
    return a;
  };
  return c;
}

TEST(DequantizeBlockwise, EveryBackendMatchesReference) {
  int i = 0;
  for (int64_t bs : kBlocksizes) {
    for (DType out : kFloats) {
      for (bool nested : {false, true}) {
        run_on_all_backends(dequantize_case(kSizes[i++ % 13] + 5000, bs, out, nested));
      }
    }
  }
  run_on_all_backends(dequantize_case(0, 64, DType::f32, false));
}

TEST(AbsmaxCenter, EveryBackendMatchesReference) {
  for (int64_t n : {1, 2, 1000, 1024, 1025, 300000, 1100000}) {
    OpCase<AbsmaxCenterArgs> c;
    c.name = "absmax_center n=" + std::to_string(n);
    // absmax values are non-negative
    Tensor v = random_floats({n}, DType::f32);
    for (int64_t i = 0; i < n; ++i) v.ptr<float>()[i] = std::fabs(v.ptr<float>()[i]);
    c.inputs = {v};
    c.outputs = {{{n}, DType::f32}, {{1}, DType::f32}};
    // The op works in place: copy the input into the (guarded) output first.
    c.make = [](const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
      copy(out[0], in[0]);
      return AbsmaxCenterArgs{out[0], out[1]};
    };
    const std::vector<Tensor> want = run_on_all_backends(c);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += v.ptr<float>()[i];
    EXPECT_NEAR(want[1].ptr<float>()[0], sum / static_cast<double>(n), 1e-5 * std::fabs(sum / n));
  }
}

TEST(QuantizeBlockwise, NestedRoundTripIsCloseToPlain) {
  for (int64_t bs : {64, 256, 4096}) {
    const Tensor x = random_floats({200000}, DType::bf16);
    auto [q1, s1] = quantize_blockwise(x, {}, bs, false);
    auto [q2, s2] = quantize_blockwise(x, {}, bs, true);
    ASSERT_TRUE(s2.nested());
    EXPECT_EQ(s2.absmax.dtype(), DType::u8);
    EXPECT_EQ(s2.state2->blocksize, bs);
    const std::vector<float> ref = to_floats(x);
    const std::vector<float> y1 = to_floats(dequantize_blockwise(q1, s1));
    const std::vector<float> y2 = to_floats(dequantize_blockwise(q2, s2, DType::f32));
    double e1 = 0, e2 = 0, mag = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      e1 += std::fabs(y1[i] - ref[i]);
      e2 += std::fabs(y2[i] - ref[i]);
      mag += std::fabs(ref[i]);
    }
    EXPECT_LT(e2 / mag, 1.5 * e1 / mag + 0.002) << "blocksize " << bs;
  }
}

TEST(QuantizeBlockwise, ValidationMessages) {
  const Tensor x = random_floats({100}, DType::f32);
  expect_error([&] { quantize_blockwise(x, {}, 48); }, ErrorCode::invalid_argument,
               {"quantize_blockwise", "blocksize", "48"});
  const Tensor xi = random_bytes({100}, DType::i8);
  expect_error([&] { quantize_blockwise(xi); }, ErrorCode::unsupported_dtype,
               {"quantize_blockwise", "input", "int8", "float32"});
  std::vector<float> unsorted = create_dynamic_map();
  std::swap(unsorted[10], unsorted[200]);
  expect_error([&] { quantize_blockwise(x, host_tensor(unsorted), 64); }, ErrorCode::invalid_argument,
               {"quantize_blockwise", "code", "sorted"});
  expect_error([&] { quantize_blockwise(x, host_tensor({1.0f, 2.0f}), 64); }, ErrorCode::invalid_argument,
               {"quantize_blockwise", "code", "256", "got 2"});
  Tensor out = Tensor::empty({99}, DType::u8);
  Tensor absmax = Tensor::empty({2}, DType::f32);
  const Tensor code = host_tensor(create_dynamic_map());
  expect_error([&] { run(QuantizeBlockwiseArgs{x, code, out, absmax, 64}); }, ErrorCode::invalid_argument,
               {"quantize_blockwise", "out", "100", "got 99"});
  Tensor out_ok = Tensor::empty({100}, DType::u8);
  Tensor absmax_bad = Tensor::empty({3}, DType::f32);
  expect_error([&] { run(QuantizeBlockwiseArgs{x, code, out_ok, absmax_bad, 64}); }, ErrorCode::invalid_argument,
               {"quantize_blockwise", "absmax", "2", "got 3"});
  expect_error([&] { run(QuantizeBlockwiseArgs{x, code, {}, absmax, 64}); }, ErrorCode::invalid_argument,
               {"quantize_blockwise", "out", "required"});
  TensorRef strided = x.ref();
  strided.shape[0] = 50;
  strided.strides[0] = 2;
  expect_error([&] { quantize_blockwise(strided, {}, 64); }, ErrorCode::invalid_argument,
               {"quantize_blockwise", "input", "contiguous"});
}

TEST(DequantizeBlockwise, ValidationMessages) {
  auto [q, state] = quantize_blockwise(random_floats({100}, DType::f32), {}, 64);
  QuantState bad = state;
  bad.blocksize = 100;
  expect_error([&] { dequantize_blockwise(q, bad); }, ErrorCode::invalid_argument,
               {"dequantize_blockwise", "blocksize", "100"});
  const Tensor u8_absmax = Tensor::empty({2}, DType::u8);
  Tensor out = Tensor::empty({100}, DType::f32);
  expect_error([&] { run(DequantizeBlockwiseArgs{q, state.code, u8_absmax, {}, out, 64}); },
               ErrorCode::unsupported_dtype, {"dequantize_blockwise", "absmax", "nested"});
  Tensor out_i8 = Tensor::empty({100}, DType::i8);
  expect_error([&] { run(DequantizeBlockwiseArgs{q, state.code, state.absmax, {}, out_i8, 64}); },
               ErrorCode::unsupported_dtype, {"dequantize_blockwise", "out", "int8"});
}

TEST(Registry, MissingBackendIsAClearError) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  TensorRef x = TensorRef::contiguous(reinterpret_cast<void*>(0x1000), DType::f32, {64}, Device::cuda(0));
  expect_error([&] { quantize_blockwise(x, {}, 64); }, ErrorCode::no_backend, {"cuda"});
}

TEST(Registry, MixedDevicesAreRejected) {
  const Tensor x = random_floats({64}, DType::f32);
  const Tensor code = host_tensor(create_dynamic_map());
  Tensor absmax = Tensor::empty({1}, DType::f32);
  TensorRef out = TensorRef::contiguous(reinterpret_cast<void*>(0x1000), DType::u8, {64}, Device::cuda(0));
  expect_error([&] { run(QuantizeBlockwiseArgs{x, code, out, absmax, 64}); }, ErrorCode::device_mismatch,
               {"quantize_blockwise", "out", "cuda:0", "cpu"});
}

}  // namespace
}  // namespace lowbit::test
