// The shared op-test harness (the ggml test-backend-ops idea): an OpCase
// holds host inputs and output specs; run_on_all_backends() runs the
// "cpu-reference" implementation on the host, then every other registered
// implementation of the op on its device — the CPU fast path, and CUDA when a
// GPU is present — with outputs poisoned and fenced by sentinel bytes, and
// requires the same bytes. Adding a backend adds cases without test code.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/registry.h"
#include "lowbit/ops/quant.h"
#include "ops/dispatch.h"

namespace lowbit::test {

// The run's random generator. Seeded from LOWBIT_TEST_SEED when set, else
// from the clock; the seed is printed once so a failure can be replayed.
std::mt19937_64& rng();
uint64_t seed();

// Host tensors of fresh random data.
Tensor random_floats(std::vector<int64_t> shape, DType dtype, float stddev = 1.0f);
Tensor random_bytes(std::vector<int64_t> shape, DType dtype);
// Uniform int8, every value including -128.
Tensor random_int8(std::vector<int64_t> shape);
// Positive f32 statistics [n] in [0.01, 4), as int8_vectorwise_quant's absmax are.
Tensor random_stats(int64_t n);
// Random e4m3 codes (f8_e4m3) without the two NaNs (0x7f, 0xff).
Tensor random_e4m3(std::vector<int64_t> shape);
// Overwrites some elements with special values: exact zeros (a whole block
// when `zero_block` > 0), huge and tiny magnitudes, denormals.
void sprinkle_specials(Tensor& t, int64_t zero_block = 0);
Tensor host_tensor(const std::vector<float>& values, DType dtype = DType::f32);
std::vector<float> to_floats(const TensorRef& t);  // any float dtype, any device

// Devices that have at least one registered impl and exist on this machine.
bool cuda_available();

// An output buffer with kGuardBytes of sentinel on each side, poisoned.
class Guarded {
 public:
  static constexpr size_t kGuardBytes = 64;
  static constexpr uint8_t kPoison = 0xA5;
  Guarded(std::vector<int64_t> shape, DType dtype, Device device);
  const TensorRef& ref() const { return view_; }
  // Copies the output to the host; fails the test if a guard byte changed.
  Tensor fetch(const std::string& what) const;

 private:
  Tensor storage_;
  TensorRef view_;
};

struct OutSpec {
  std::vector<int64_t> shape;
  DType dtype;
};

template <class Args>
struct OpCase {
  std::string name;
  std::vector<Tensor> inputs;  // host
  std::vector<OutSpec> outputs;
  // Builds the op's Args from input and output views (on any device).
  std::function<Args(const std::vector<TensorRef>& in, const std::vector<TensorRef>& out)> make;
  // Outputs compared for exact equality (all when empty).
  std::vector<int> exact_outputs;
};

// Runs impl on `device` and returns its outputs, copied to the host.
template <class Args>
std::vector<Tensor> run_case(const OpCase<Args>& c, const core::OpImpl<Args>& impl, Device device) {
  std::vector<Tensor> in_dev;
  std::vector<TensorRef> in;
  for (const Tensor& t : c.inputs) {
    in_dev.push_back(device.is_cpu() ? t : t.to(device));
    in.push_back(in_dev.back().ref());
  }
  std::vector<Guarded> outs;
  std::vector<TensorRef> out;
  for (const OutSpec& s : c.outputs) {
    outs.emplace_back(s.shape, s.dtype, device);
    out.push_back(outs.back().ref());
  }
  const Args args = c.make(in, out);
  check(args);
  const size_t ws_bytes = impl.workspace ? impl.workspace(args) : 0;
  Tensor ws = ws_bytes ? Tensor::empty({static_cast<int64_t>(ws_bytes)}, DType::u8, device) : Tensor();
  ops::run_impl(impl, args, ws.data(), Stream{});
  synchronize(Stream{});
  std::vector<Tensor> result;
  for (size_t i = 0; i < outs.size(); ++i) {
    result.push_back(outs[i].fetch(c.name + " output " + std::to_string(i) + " on " + impl.name));
  }
  return result;
}

void expect_same_bytes(const Tensor& want, const Tensor& got, const std::string& what);

// The oracle's outputs, then every other implementation compared to them.
// Returns the reference outputs for further checks.
template <class Args>
std::vector<Tensor> run_on_all_backends(const OpCase<Args>& c) {
  const auto& reference = core::OpRegistry<Args>::find("cpu-reference");
  std::vector<Tensor> want = run_case(c, reference, Device::cpu());
  for (const auto& impl : core::OpRegistry<Args>::all()) {
    if (&impl == &reference) continue;
    if (impl.device == DeviceType::cuda && !cuda_available()) continue;  // reported once by the environment
    const Device device = impl.device == DeviceType::cuda ? Device::cuda(0) : Device::cpu();
    std::vector<Tensor> got = run_case(c, impl, device);
    for (size_t i = 0; i < want.size(); ++i) {
      const bool exact = c.exact_outputs.empty() ||
                         std::find(c.exact_outputs.begin(), c.exact_outputs.end(), static_cast<int>(i)) !=
                             c.exact_outputs.end();
      if (exact) expect_same_bytes(want[i], got[i], c.name + " output " + std::to_string(i) + " [" + impl.name + "]");
    }
  }
  return want;
}

// Each implementation's outputs for `c` (CUDA ones where a device is present), by name.
template <class Args>
std::vector<std::pair<std::string, std::vector<Tensor>>> run_every_impl(const OpCase<Args>& c) {
  std::vector<std::pair<std::string, std::vector<Tensor>>> out;
  for (const auto& impl : core::OpRegistry<Args>::all()) {
    if (impl.device == DeviceType::cuda && !cuda_available()) continue;
    const Device device = impl.device == DeviceType::cuda ? Device::cuda(0) : Device::cpu();
    out.emplace_back(impl.name, run_case(c, impl, device));
  }
  return out;
}

// Names of the implementations of Args the harness will run (for test logs).
template <class Args>
std::string impl_names() {
  std::string s;
  for (const auto& impl : core::OpRegistry<Args>::all()) {
    s += (s.empty() ? "" : ", ") + std::string(impl.name);
    if (impl.device == DeviceType::cuda && !cuda_available()) s += " (skipped: no CUDA device)";
  }
  return s;
}

// Expects `fn` to throw lowbit::Error with `code` and a message containing
// every one of `parts`.
void expect_error(const std::function<void()>& fn, ErrorCode code, const std::vector<std::string>& parts);

}  // namespace lowbit::test
