// The front ends of the multi-tensor optimizer updates: each entry checked
// as the single-tensor op checks it (the message names the entry), one dtype
// and one device over the list, dispatch.
#include <string>
#include <string_view>

#include "core/check.h"
#include "lowbit/ops/optim.h"
#include "ops/dispatch.h"
#include "ops/optim/checks.h"

namespace lowbit {
namespace {

// The list-wide constants of a multi update copied into a single one.
template <class Single, class Multi>
Single with_constants(const Multi& m) {
  Single a;
  a.optimizer = m.optimizer;
  a.beta1 = m.beta1, a.beta2 = m.beta2, a.beta3 = m.beta3, a.alpha = m.alpha;
  a.eps = m.eps, a.weight_decay = m.weight_decay, a.lr = m.lr, a.gnorm_scale = m.gnorm_scale;
  a.step = m.step, a.skip_zeros = m.skip_zeros;
  return a;
}

// Every entry passes the single op's check (what entries share, on entry 0
// only: the same values); g's dtype and device are entry 0's.
template <class Multi>
void check_entries(const Multi& m) {
  using Single = decltype(m.entry(0));
  const char* op = Multi::kName;
  const std::string single_prefix = std::string(Single::kName) + ": ";
  for (size_t i = 0; i < m.params.size(); ++i) {
    const Single a = m.entry(i);
    try {
      ops::optim::check_update(a, i == 0);
    } catch (const Error& e) {
      std::string_view msg = e.what();
      if (msg.starts_with(single_prefix)) msg.remove_prefix(single_prefix.size());
      core::fail(e.code(), core::cat(op, ": params[", i, "]: ", msg));
    }
    const TensorRef& g0 = m.params[0].g;
    LOWBIT_REQUIRE(a.g.dtype == g0.dtype, ErrorCode::invalid_argument, op, ": params[", i,
                   "].g must have params[0].g's dtype ", dtype_name(g0.dtype), " (got ", dtype_name(a.g.dtype), ")");
    LOWBIT_REQUIRE(a.g.device == g0.device, ErrorCode::device_mismatch, op, ": params[", i, "].g must be on ",
                   g0.device.str(), " like params[0].g (got ", a.g.device.str(), ")");
  }
}

// The device of the list (the host for an empty one: nothing runs).
template <class Multi>
Device list_device(const Multi& m) {
  return m.params.empty() ? Device::cpu() : m.params[0].g.device;
}

}  // namespace

OptimizerUpdate32bitArgs OptimizerUpdate32bitMultiArgs::entry(size_t i) const {
  auto a = with_constants<OptimizerUpdate32bitArgs>(*this);
  const OptimizerTensors32bit& t = params[i];
  a.g = t.g, a.p = t.p, a.state1 = t.state1, a.state2 = t.state2, a.unorm_vec = t.unorm_vec;
  a.clip_scale = t.clip_scale;
  a.max_unorm = max_unorm;
  return a;
}

OptimizerUpdate8bitBlockwiseArgs OptimizerUpdate8bitBlockwiseMultiArgs::entry(size_t i) const {
  auto a = with_constants<OptimizerUpdate8bitBlockwiseArgs>(*this);
  const OptimizerTensors8bitBlockwise& t = params[i];
  a.g = t.g, a.p = t.p, a.state1 = t.state1, a.state2 = t.state2, a.absmax1 = t.absmax1, a.absmax2 = t.absmax2;
  a.clip_scale = t.clip_scale;
  a.qmap1 = qmap1, a.qmap2 = qmap2;
  return a;
}

void check(const OptimizerUpdate32bitMultiArgs& a) { check_entries(a); }
size_t workspace_size(const OptimizerUpdate32bitMultiArgs& a) { return ops::backend_workspace(a, list_device(a)); }
void run(const OptimizerUpdate32bitMultiArgs& a, void* ws, Stream s) { ops::dispatch(a, list_device(a), ws, s); }

void check(const OptimizerUpdate8bitBlockwiseMultiArgs& a) { check_entries(a); }
size_t workspace_size(const OptimizerUpdate8bitBlockwiseMultiArgs& a) {
  return ops::backend_workspace(a, list_device(a));
}
void run(const OptimizerUpdate8bitBlockwiseMultiArgs& a, void* ws, Stream s) {
  ops::dispatch(a, list_device(a), ws, s);
}

}  // namespace lowbit
