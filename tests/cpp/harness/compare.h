// Tolerance comparison for ops whose backends may round differently (GEMM):
// every registered implementation — and every kernel config it has — runs
// on its device with guarded, poisoned outputs, and each result is held to a
// float64 oracle the test computes itself:
//
//   |got - value| <= tol.rel * |value| + tol.terms * magnitude + tol.abs
//                    + tol.a_terms * Σ|a|
//
// where magnitude is Σ|terms| of the element's sum (a dot product's Σ|a·w|),
// the scale on which accumulation error lives. CUDA implementations are
// skipped when no GPU is present, as in run_on_all_backends.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harness/harness.h"

namespace lowbit::test {

struct Oracle {
  std::vector<double> value;
  std::vector<double> magnitude;
  // Σ|a| of the element's dot product (when the oracle knows it): the scale
  // of the absolute error of operands rounded into subnormals.
  std::vector<double> a_magnitude;
};

struct Tolerance {
  double rel = 0.0;      // output rounding, relative to |value|
  double terms = 0.0;    // accumulation and operand rounding, relative to magnitude
  double abs = 0.0;      // the output dtype's subnormal spacing
  double a_terms = 0.0;  // operand rounding into subnormals, relative to Σ|a|
};

// The unit roundoff of a float dtype (2^-11 f16, 2^-8 bf16, 2^-24 f32).
double unit_roundoff(DType d);

// Bounds for a matmul on `device`: output rounding of `out`, fp32 sums of K
// terms in any order, and on CUDA the weights rounded to A's dtype before
// the tensor-core multiply (and fp16 accumulation when asked).
Tolerance matmul_tolerance(DType a_dtype, DType out_dtype, DType accum_dtype, int64_t K, DeviceType device);

// Fails (one message naming the worst element) when got leaves the bound.
void expect_close(const Oracle& want, const Tensor& got, const Tolerance& tol, const std::string& what);

template <class Args>
struct CloseCase {
  std::string name;
  OutSpec output;
  // Args for an implementation on `device`, writing `out`; device copies of
  // inputs it makes are kept alive in `keep`.
  std::function<Args(Device device, const TensorRef& out, std::vector<Tensor>& keep)> make;
  Oracle oracle;
  // The bound for an implementation (its device, its name).
  std::function<Tolerance(DeviceType device, const std::string& impl)> tolerance;
};

// The configs an implementation lists for the case's arguments on `device`
// (OpImpl::configs), none when it has no such list.
template <class Args>
std::vector<KernelConfig> configs_of(const CloseCase<Args>& c, const core::OpImpl<Args>& impl, Device device) {
  if (!impl.configs) return {};
  std::vector<Tensor> keep;
  Tensor out = Tensor::empty(Shape(c.output.shape.data(), c.output.shape.size()), c.output.dtype, device);
  const Args args = c.make(device, out.ref(), keep);
  check(args);
  return impl.configs(args);
}

template <class Args>
Tensor run_close(const CloseCase<Args>& c, const core::OpImpl<Args>& impl, Device device, const KernelConfig& config) {
  std::vector<Tensor> keep;
  Guarded out(c.output.shape, c.output.dtype, device);
  Args args = c.make(device, out.ref(), keep);
  args.config = config;
  check(args);
  const size_t ws_bytes = impl.workspace ? impl.workspace(args) : 0;
  Tensor ws = ws_bytes ? Tensor::empty({static_cast<int64_t>(ws_bytes)}, DType::u8, device) : Tensor();
  ops::run_impl(impl, args, ws.data(), Stream{});
  synchronize(Stream{});
  return out.fetch(c.name + " on " + impl.name + " config " + (config.empty() ? "heuristic" : config.name()));
}

// Every implementation, with its heuristic and then each config it lists.
template <class Args>
void run_on_all_backends_close(const CloseCase<Args>& c) {
  for (const auto& impl : core::OpRegistry<Args>::all()) {
    if (impl.device == DeviceType::cuda && !cuda_available()) continue;
    const Device device = impl.device == DeviceType::cuda ? Device::cuda(0) : Device::cpu();
    std::vector<KernelConfig> configs{KernelConfig{}};
    for (KernelConfig& k : configs_of(c, impl, device)) configs.push_back(std::move(k));
    for (const KernelConfig& config : configs) {
      const Tensor got = run_close(c, impl, device, config);
      expect_close(c.oracle, got, c.tolerance(impl.device, impl.name),
                   c.name + " [" + impl.name + (config.empty() ? "" : " config " + config.name()) + "]");
    }
  }
}

}  // namespace lowbit::test
