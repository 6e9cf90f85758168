// The Matmul class: a checked config bound to a device, packing weights into
// that device's layout and running the matmul primitive for any M.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/registry.h"
#include "core/weight_format.h"
#include "lowbit/ops/int8_gemm.h"
#include "ops/common.h"
#include "ops/dispatch.h"
#include "ops/gemm/common.h"

namespace lowbit {

// A backend's plans for one Matmul, keyed by what its choices depend on
// beyond the config: the device, the rows of A (grid and K splits), A's
// 16-byte alignment (read in place or gathered) and the packed weight's scale
// dtype and permutation.
struct MatmulPlans {
  using Plan = std::shared_ptr<const core::PreparedOp<MatmulArgs>>;
  struct Key {
    int device = 0;
    int64_t rows = 0;
    bool a_aligned = false, perm = false;
    DType scale_dtype{};
    bool operator==(const Key&) const = default;
  };
  // Call shapes kept before the list starts over (a caller sweeping M).
  static constexpr size_t kMax = 64;

  Plan get(const Key& key, const core::OpImpl<MatmulArgs>& impl, const MatmulArgs& a) {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      for (const auto& [k, plan] : plans) {
        if (k == key) return plan;
      }
    }
    Plan plan = impl.prepare(a);  // outside the lock: selection may query the device
    const std::lock_guard<std::mutex> lock(mutex);
    if (plans.size() >= kMax) plans.clear();
    plans.emplace_back(key, plan);
    return plan;
  }

  std::mutex mutex;
  std::vector<std::pair<Key, Plan>> plans;
};

namespace {

Tensor to_device(const Tensor& t, Device device) { return t.defined() ? t.to(device) : t; }

// The packed weight must be the one this config describes.
void check_weight_matches(const MatmulConfig& c, const WeightFormat& f) {
  const char* op = ops::gemm::kMatmul;
  auto same = [&](const char* field, auto want, auto got) {
    LOWBIT_REQUIRE(want == got, ErrorCode::invalid_argument, op, ": the packed weight's ", field, " (", got,
                   ") differs from the config's (", want, ")");
  };
  same("W_dtype", weight_type_name(c.W_dtype), weight_type_name(f.type));
  same("N", c.N, f.N);
  same("K", c.K, f.K);
  same("group_size", c.group_size, f.group_size);
  same("with_scaling", c.with_scaling, f.with_scaling);
  same("with_zeros", c.with_zeros, f.with_zeros);
  if (c.with_zeros) same("zeros_mode", zeros_mode_name(c.zeros_mode), zeros_mode_name(f.zeros_mode));
  same("with_bias", c.with_bias, f.with_bias);
}

}  // namespace

Matmul::Matmul(MatmulConfig config, Device device) : config_(std::move(config)), device_(device) {
  check(config_);
  std::sort(config_.M.begin(), config_.M.end());
  config_.M.erase(std::unique(config_.M.begin(), config_.M.end()), config_.M.end());
  layout_ = ops::gemm::layout_for(device_, config_);
  plans_ = std::make_shared<MatmulPlans>();
}

int64_t Matmul::prepared_m(int64_t m) const {
  for (int64_t p : config_.M) {
    if (p >= m) return p;
  }
  return config_.M.back();
}

PackedWeight Matmul::transform_weight(const TensorRef& weight, const TensorRef& scale, const TensorRef& zeros,
                                      const TensorRef& bias, const TensorRef& perm) const {
  PackedWeight host = ops::gemm::pack_weight(layout_, config_, weight, scale, zeros, bias, perm);
  if (device_.is_cpu()) return host;
  PackedWeight w;
  w.format = host.format;
  w.qweight = to_device(host.qweight, device_);
  w.scale = to_device(host.scale, device_);
  w.zeros = to_device(host.zeros, device_);
  w.bias = to_device(host.bias, device_);
  w.perm = to_device(host.perm, device_);
  return w;
}

PackedWeight Matmul::transform_weight(const QuantizedWeight& w) const {
  check_weight_matches(config_, ops::gemm::format_of(w.config, layout_));
  return transform_weight(w.weight, w.scale, w.zeros, w.bias, w.perm);
}

MatmulArgs Matmul::args(const TensorRef& A, const PackedWeightRef& W, const TensorRef& out) const {
  MatmulArgs a;
  a.A = A;
  a.weight = W;
  a.out = out;
  a.accum_dtype = config_.accum_dtype;
  const int64_t rows = (A.ndim >= 1 && A.size(-1) > 0) ? A.numel() / A.size(-1) : 0;
  a.prepared_m = prepared_m(rows);
  return a;
}

void Matmul::forward(const TensorRef& A, const PackedWeight& W, const TensorRef& out, Stream stream) const {
  const char* op = ops::gemm::kMatmul;
  core::require_present(op, "A", A);
  LOWBIT_REQUIRE(A.dtype == config_.A_dtype, ErrorCode::unsupported_dtype, op,
                 ": A dtype must be the config's A_dtype ", dtype_name(config_.A_dtype), " (got ", dtype_name(A.dtype),
                 ")");
  core::require_present(op, "out", out);
  LOWBIT_REQUIRE(out.dtype == config_.out_dtype, ErrorCode::unsupported_dtype, op,
                 ": out dtype must be the config's out_dtype ", dtype_name(config_.out_dtype), " (got ",
                 dtype_name(out.dtype), ")");
  check_weight_matches(config_, W.format);
  if (config_.A_dtype == DType::i8) {  // W8A8: the packed int8 rows are int8_linear_matmul's B [N, K]
    TensorRef b = TensorRef::contiguous(W.qweight.data(), DType::i8, {config_.N, config_.K}, W.qweight.device());
    ops::run_with_workspace(Int8LinearMatmulArgs{A, b, out, {}}, A.device, stream);
    return;
  }
  const MatmulArgs a = args(A, W.ref(), out);
  const core::OpImpl<MatmulArgs>& impl = core::OpRegistry<MatmulArgs>::select(A.device);
  if (impl.prepare == nullptr || A.numel() == 0 || plans_ == nullptr) {
    ops::run_with_workspace(a, A.device, stream);
    return;
  }
  check(a);
  MatmulPlans::Key key;
  key.device = A.device.index;
  key.rows = A.numel() / A.size(-1);
  key.a_aligned = reinterpret_cast<uintptr_t>(A.data) % 16 == 0;
  key.perm = W.perm.defined();
  key.scale_dtype = W.scale.defined() ? W.scale.dtype() : DType::f32;
  // The plan of the tuned database's config for this shape, where it has one (the database is read once,
  // so a key keeps one plan).
  const std::optional<MatmulArgs> tuned = ops::tuned_call(a, A.device, impl, tune_db());
  const MatmulPlans::Plan plan = plans_->get(key, impl, tuned ? *tuned : a);
  const Tensor ws = ops::workspace_on(plan->workspace(), A.device, stream);
  plan->run(a, ws.data(), stream);
}

Tensor Matmul::forward(const TensorRef& A, const PackedWeight& W, Stream stream) const {
  core::require_present(ops::gemm::kMatmul, "A", A);
  // [..., N]: A's leading dims, then N (built element by element: GCC 13
  // misreports a copy-then-back() here as a free of a non-heap pointer).
  std::vector<int64_t> shape;
  for (int d = 0; d + 1 < A.ndim; ++d) shape.push_back(A.shape[static_cast<size_t>(d)]);
  shape.push_back(config_.N);
  Tensor out = Tensor::empty(Shape(shape), config_.out_dtype, A.device, stream);
  forward(A, W, out, stream);
  return out;
}

}  // namespace lowbit
