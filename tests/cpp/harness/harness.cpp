#include "harness/harness.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/float_convert.h"

namespace lowbit::test {

uint64_t seed() {
  static const uint64_t s = [] {
    const char* env = std::getenv("LOWBIT_TEST_SEED");
    const uint64_t v = env ? std::strtoull(env, nullptr, 10)
                           : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    std::printf("[ lowbit  ] LOWBIT_TEST_SEED=%llu\n", static_cast<unsigned long long>(v));
    return v;
  }();
  return s;
}

std::mt19937_64& rng() {
  static std::mt19937_64 g(seed());
  return g;
}

bool cuda_available() {
  static const bool available = [] {
    const int n = cuda_device_count();
    if (n == 0) std::printf("[ lowbit  ] no CUDA device: CUDA cases are skipped\n");
    return n > 0;
  }();
  return available;
}

namespace {

void store_float(Tensor& t, int64_t i, float v) {
  switch (t.dtype()) {
    case DType::f32: t.ptr<float>()[i] = v; break;
    case DType::f16: t.ptr<uint16_t>()[i] = core::f32_to_f16(v); break;
    case DType::bf16: t.ptr<uint16_t>()[i] = core::f32_to_bf16(v); break;
    default: FAIL() << "store_float: not a float dtype: " << dtype_name(t.dtype());
  }
}

}  // namespace

Tensor random_int8(std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(Shape(shape), DType::i8);
  std::uniform_int_distribution<int> pick(-128, 127);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<int8_t>()[i] = static_cast<int8_t>(pick(rng()));
  return t;
}

Tensor random_stats(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::f32);
  std::uniform_real_distribution<float> pick(0.01f, 4.0f);
  for (int64_t i = 0; i < n; ++i) t.ptr<float>()[i] = pick(rng());
  return t;
}

Tensor random_floats(std::vector<int64_t> shape, DType dtype, float stddev) {
  Tensor t = Tensor::empty(Shape(shape), dtype);
  std::normal_distribution<float> normal(0.0f, stddev);
  // Vary the scale every few hundred elements so blocks see different absmax.
  std::uniform_real_distribution<float> scale(0.05f, 20.0f);
  float s = 1.0f;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (i % 300 == 0) s = scale(rng());
    store_float(t, i, normal(rng()) * s);
  }
  return t;
}

Tensor random_bytes(std::vector<int64_t> shape, DType dtype) {
  Tensor t = Tensor::empty(Shape(shape), dtype);
  auto* p = static_cast<uint8_t*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng()());
  return t;
}

Tensor random_e4m3(std::vector<int64_t> shape) {
  Tensor t = random_bytes(std::move(shape), DType::f8_e4m3);
  auto* p = static_cast<uint8_t*>(t.data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if ((p[i] & 0x7f) == 0x7f) p[i] ^= 0x01;
  }
  return t;
}

void sprinkle_specials(Tensor& t, int64_t zero_block) {
  const int64_t n = t.numel();
  if (n == 0) return;
  if (zero_block > 0 && n > zero_block) {
    for (int64_t i = 0; i < zero_block; ++i) store_float(t, i, 0.0f);
  }
  const float specials[] = {0.0f, -0.0f, 1e-30f, -3e-39f /* denormal */, 6e4f, -6e4f, 1e-7f, 448.0f, 1.0f};
  std::uniform_int_distribution<int64_t> pos(0, n - 1);
  for (float v : specials) store_float(t, pos(rng()), t.dtype() == DType::f16 && std::fabs(v) > 6.5e4f ? 6e4f : v);
}

Tensor host_tensor(const std::vector<float>& values, DType dtype) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, dtype);
  for (size_t i = 0; i < values.size(); ++i) store_float(t, static_cast<int64_t>(i), values[i]);
  return t;
}

std::vector<float> to_floats(const TensorRef& ref) {
  const Tensor t = Tensor::copy_of(ref, Device::cpu());
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::f32: v[static_cast<size_t>(i)] = t.ptr<const float>()[i]; break;
      case DType::f16: v[static_cast<size_t>(i)] = core::f16_to_f32(t.ptr<const uint16_t>()[i]); break;
      case DType::bf16: v[static_cast<size_t>(i)] = core::bf16_to_f32(t.ptr<const uint16_t>()[i]); break;
      case DType::f8_e4m3: v[static_cast<size_t>(i)] = core::e4m3_to_f32(t.ptr<const uint8_t>()[i]); break;
      default: ADD_FAILURE() << "to_floats: not a float dtype"; return v;
    }
  }
  return v;
}

Guarded::Guarded(std::vector<int64_t> shape, DType dtype, Device device) {
  view_ = TensorRef::contiguous(nullptr, dtype, Shape(shape), device);
  const int64_t total = static_cast<int64_t>(view_.nbytes() + 2 * kGuardBytes);
  Tensor host = Tensor::empty({total}, DType::u8);
  std::memset(host.data(), kPoison, static_cast<size_t>(total));
  storage_ = device.is_cpu() ? host : host.to(device);
  view_.data = static_cast<uint8_t*>(storage_.data()) + kGuardBytes;
}

Tensor Guarded::fetch(const std::string& what) const {
  const Tensor all = storage_.device().is_cpu() ? storage_ : storage_.to(Device::cpu());
  const auto* p = all.ptr<const uint8_t>();
  const size_t body = view_.nbytes();
  for (size_t i = 0; i < kGuardBytes; ++i) {
    EXPECT_EQ(p[i], kPoison) << what << ": write before the output (guard byte " << i << ")";
    EXPECT_EQ(p[kGuardBytes + body + i], kPoison) << what << ": write past the output end (byte " << i << ")";
  }
  Tensor out = Tensor::empty(view_.sizes(), view_.dtype);
  std::memcpy(out.data(), p + kGuardBytes, body);
  return out;
}

void expect_same_bytes(const Tensor& want, const Tensor& got, const std::string& what) {
  ASSERT_EQ(want.nbytes(), got.nbytes()) << what;
  const auto* a = static_cast<const uint8_t*>(want.data());
  const auto* b = static_cast<const uint8_t*>(got.data());
  if (std::memcmp(a, b, want.nbytes()) == 0) return;
  size_t first = 0, count = 0;
  for (size_t i = 0; i < want.nbytes(); ++i) {
    if (a[i] != b[i]) {
      if (count++ == 0) first = i;
    }
  }
  ADD_FAILURE() << what << ": " << count << " of " << want.nbytes() << " bytes differ; first at byte " << first
                << " (want 0x" << std::hex << int{a[first]} << ", got 0x" << int{b[first]} << std::dec
                << "); seed " << seed();
}

void expect_error(const std::function<void()>& fn, ErrorCode code, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << "message: " << e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message '" << e.what() << "' lacks '" << p << "'";
    }
    return;
  }
  ADD_FAILURE() << "expected lowbit::Error " << error_code_name(code);
}

}  // namespace lowbit::test
