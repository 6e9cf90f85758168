// Bindings of the optimizer updates and percentile clipping
// (include/lowbit/ops/optim.h): in place, no result.
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "core/check.h"
#include "lowbit/ops/optim.h"

namespace lowbit::python {
namespace {

// The name, the tensors and the constants both updates take.
template <class Args>
void set_common(Args& a, const std::string& optimizer_name, const InArray& g, const OutArray& p,
                const OutArray& state1, const std::optional<OutArray>& state2, float beta1, float beta2, float beta3,
                float alpha, float eps, float weight_decay, float lr, float gnorm_scale, int64_t step,
                bool skip_zeros) {
  const char* op = Args::kName;
  a.optimizer = optimizer_from_name(optimizer_name, op);
  a.g = to_ref(op, "g", g);
  a.p = to_ref(op, "p", p);
  a.state1 = to_ref(op, "state1", state1);
  if (state2) a.state2 = to_ref(op, "state2", *state2);
  a.beta1 = beta1, a.beta2 = beta2, a.beta3 = beta3, a.alpha = alpha;
  a.eps = eps, a.weight_decay = weight_decay, a.lr = lr, a.gnorm_scale = gnorm_scale;
  a.step = step, a.skip_zeros = skip_zeros;
}

void update_32bit_py(const std::string& optimizer_name, const InArray& g, const OutArray& p, const OutArray& state1,
                     float beta1, float eps, int64_t step, float lr, const std::optional<OutArray>& state2, float beta2,
                     float beta3, float alpha, float weight_decay, float gnorm_scale,
                     const std::optional<OutArray>& unorm_vec, float max_unorm, bool skip_zeros, nb::handle stream_arg,
                     const std::optional<InArray>& clip_scale) {
  const char* op = OptimizerUpdate32bitArgs::kName;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  OptimizerUpdate32bitArgs a;
  set_common(a, optimizer_name, g, p, state1, state2, beta1, beta2, beta3, alpha, eps, weight_decay, lr, gnorm_scale,
             step, skip_zeros);
  if (unorm_vec) a.unorm_vec = to_ref(op, "unorm_vec", *unorm_vec);
  a.clip_scale = to_ref(op, "clip_scale", clip_scale);
  a.max_unorm = max_unorm;
  run_op(a, a.g.device, ctx.stream);
}

void update_8bit_py(const std::string& optimizer_name, const InArray& g, const OutArray& p, const OutArray& state1,
                    const std::optional<OutArray>& state2, float beta1, float beta2, float eps, int64_t step, float lr,
                    const InArray& qmap1, const std::optional<InArray>& qmap2, const InArray& max1,
                    const std::optional<InArray>& max2, const OutArray& new_max1,
                    const std::optional<OutArray>& new_max2, float weight_decay, float gnorm_scale,
                    const std::optional<OutArray>& unorm_vec, float max_unorm, nb::handle stream_arg,
                    const std::optional<InArray>& clip_scale) {
  const char* op = OptimizerUpdate8bitArgs::kName;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  OptimizerUpdate8bitArgs a;
  a.optimizer = optimizer_from_name(optimizer_name, op);
  a.g = to_ref(op, "g", g);
  a.p = to_ref(op, "p", p);
  a.state1 = to_ref(op, "state1", state1);
  if (state2) a.state2 = to_ref(op, "state2", *state2);
  a.qmap1 = to_ref(op, "qmap1", qmap1);
  a.qmap2 = to_ref(op, "qmap2", qmap2);
  a.max1 = to_ref(op, "max1", max1);
  a.max2 = to_ref(op, "max2", max2);
  a.new_max1 = to_ref(op, "new_max1", new_max1);
  if (new_max2) a.new_max2 = to_ref(op, "new_max2", *new_max2);
  if (unorm_vec) a.unorm_vec = to_ref(op, "unorm_vec", *unorm_vec);
  a.beta1 = beta1, a.beta2 = beta2, a.eps = eps, a.weight_decay = weight_decay, a.lr = lr;
  a.clip_scale = to_ref(op, "clip_scale", clip_scale);
  a.gnorm_scale = gnorm_scale, a.max_unorm = max_unorm, a.step = step;
  run_op(a, a.g.device, ctx.stream);
}

void update_8bit_blockwise_py(const std::string& optimizer_name, const InArray& g, const OutArray& p,
                              const OutArray& state1, const std::optional<OutArray>& state2, float beta1, float beta2,
                              float beta3, float alpha, float eps, int64_t step, float lr, const InArray& qmap1,
                              const std::optional<InArray>& qmap2, const OutArray& absmax1,
                              const std::optional<OutArray>& absmax2, float weight_decay, float gnorm_scale,
                              bool skip_zeros, nb::handle stream_arg, const std::optional<InArray>& clip_scale) {
  const char* op = OptimizerUpdate8bitBlockwiseArgs::kName;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  OptimizerUpdate8bitBlockwiseArgs a;
  set_common(a, optimizer_name, g, p, state1, state2, beta1, beta2, beta3, alpha, eps, weight_decay, lr, gnorm_scale,
             step, skip_zeros);
  a.qmap1 = to_ref(op, "qmap1", qmap1);
  a.qmap2 = to_ref(op, "qmap2", qmap2);
  a.absmax1 = to_ref(op, "absmax1", absmax1);
  if (absmax2) a.absmax2 = to_ref(op, "absmax2", *absmax2);
  a.clip_scale = to_ref(op, "clip_scale", clip_scale);
  run_op(a, a.g.device, ctx.stream);
}

// Entry i of an optional list argument (of g's length): absent when the list or its entry is None.
template <class Array>
TensorRef optional_entry_ref(const char* op, const char* name,
                             const std::optional<std::vector<std::optional<Array>>>& list, size_t i) {
  if (!list) return {};
  const auto& a = (*list)[i];
  return a ? entry_ref(op, name, i, *a) : TensorRef{};
}

// Lists given beside g must have its length.
template <class List>
void require_length(const char* op, const char* name, const List& list, size_t n) {
  LOWBIT_REQUIRE(list.size() == n, ErrorCode::invalid_argument, op, ": ", name, " must have g's length ", n, " (got ",
                 list.size(), ")");
}

using OutList = std::vector<OutArray>;
using OptionalOutList = std::optional<std::vector<std::optional<OutArray>>>;
using OptionalInList = std::optional<std::vector<std::optional<InArray>>>;

void update_32bit_multi_py(const std::string& optimizer_name, const std::vector<InArray>& g, const OutList& p,
                           const OutList& state1, float beta1, float eps, int64_t step, float lr,
                           const OptionalOutList& state2, float beta2, float beta3, float alpha, float weight_decay,
                           float gnorm_scale, const OptionalOutList& unorm_vec, float max_unorm, bool skip_zeros,
                           nb::handle stream_arg, const OptionalInList& clip_scale) {
  const char* op = OptimizerUpdate32bitMultiArgs::kName;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  require_length(op, "p", p, g.size());
  require_length(op, "state1", state1, g.size());
  if (state2) require_length(op, "state2", *state2, g.size());
  if (unorm_vec) require_length(op, "unorm_vec", *unorm_vec, g.size());
  if (clip_scale) require_length(op, "clip_scale", *clip_scale, g.size());
  std::vector<OptimizerTensors32bit> params(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    params[i] = {entry_ref(op, "g", i, g[i]),
                 entry_ref(op, "p", i, p[i]),
                 entry_ref(op, "state1", i, state1[i]),
                 optional_entry_ref(op, "state2", state2, i),
                 optional_entry_ref(op, "unorm_vec", unorm_vec, i),
                 optional_entry_ref(op, "clip_scale", clip_scale, i)};
  }
  OptimizerUpdate32bitMultiArgs a;
  a.optimizer = optimizer_from_name(optimizer_name, op), a.params = params;
  a.beta1 = beta1, a.beta2 = beta2, a.beta3 = beta3, a.alpha = alpha;
  a.eps = eps, a.weight_decay = weight_decay, a.lr = lr, a.gnorm_scale = gnorm_scale;
  a.max_unorm = max_unorm, a.step = step, a.skip_zeros = skip_zeros;
  run_op(a, params.empty() ? Device::cpu() : params[0].g.device, ctx.stream);
}

void update_8bit_blockwise_multi_py(const std::string& optimizer_name, const std::vector<InArray>& g, const OutList& p,
                                    const OutList& state1, const OptionalOutList& state2, float beta1, float beta2,
                                    float beta3, float alpha, float eps, int64_t step, float lr, const InArray& qmap1,
                                    const std::optional<InArray>& qmap2, const OutList& absmax1,
                                    const OptionalOutList& absmax2, float weight_decay, float gnorm_scale,
                                    bool skip_zeros, nb::handle stream_arg, const OptionalInList& clip_scale) {
  const char* op = OptimizerUpdate8bitBlockwiseMultiArgs::kName;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  require_length(op, "p", p, g.size());
  require_length(op, "state1", state1, g.size());
  require_length(op, "absmax1", absmax1, g.size());
  if (state2) require_length(op, "state2", *state2, g.size());
  if (absmax2) require_length(op, "absmax2", *absmax2, g.size());
  if (clip_scale) require_length(op, "clip_scale", *clip_scale, g.size());
  std::vector<OptimizerTensors8bitBlockwise> params(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    params[i] = {entry_ref(op, "g", i, g[i]),
                 entry_ref(op, "p", i, p[i]),
                 entry_ref(op, "state1", i, state1[i]),
                 optional_entry_ref(op, "state2", state2, i),
                 entry_ref(op, "absmax1", i, absmax1[i]),
                 optional_entry_ref(op, "absmax2", absmax2, i),
                 optional_entry_ref(op, "clip_scale", clip_scale, i)};
  }
  OptimizerUpdate8bitBlockwiseMultiArgs a;
  a.optimizer = optimizer_from_name(optimizer_name, op), a.params = params;
  a.qmap1 = to_ref(op, "qmap1", qmap1);
  a.qmap2 = to_ref(op, "qmap2", qmap2);
  a.beta1 = beta1, a.beta2 = beta2, a.beta3 = beta3, a.alpha = alpha;
  a.eps = eps, a.weight_decay = weight_decay, a.lr = lr, a.gnorm_scale = gnorm_scale;
  a.step = step, a.skip_zeros = skip_zeros;
  run_op(a, params.empty() ? Device::cpu() : params[0].g.device, ctx.stream);
}

void percentile_clipping_py(const InArray& grad, const OutArray& gnorm_vec, int64_t step, nb::handle stream_arg,
                            const std::optional<OutArray>& scale, int64_t percentile) {
  const char* op = PercentileClippingArgs::kName;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  PercentileClippingArgs a;
  a.grad = to_ref(op, "grad", grad);
  a.gnorm_vec = to_ref(op, "gnorm_vec", gnorm_vec);
  if (scale) a.scale = to_ref(op, "scale", *scale);
  a.step = step, a.percentile = percentile;
  run_op(a, a.grad.device, ctx.stream);
}

}  // namespace

void bind_optim(nb::module_& m) {
  using nb::arg;
  m.def("optimizer_update_32bit", &update_32bit_py, arg("optimizer_name"), arg("g"), arg("p"), arg("state1"),
        arg("beta1"), arg("eps"), arg("step"), arg("lr"), arg("state2").none(), arg("beta2"), arg("beta3"),
        arg("alpha"), arg("weight_decay"), arg("gnorm_scale"), arg("unorm_vec").none(), arg("max_unorm"),
        arg("skip_zeros"), arg("stream") = 0, arg("clip_scale").none() = nb::none(),
        "One optimizer step with 32-bit states, in place.");
  m.def("optimizer_update_8bit", &update_8bit_py, arg("optimizer_name"), arg("g"), arg("p"), arg("state1"),
        arg("state2").none(), arg("beta1"), arg("beta2"), arg("eps"), arg("step"), arg("lr"), arg("qmap1"),
        arg("qmap2").none(), arg("max1"), arg("max2").none(), arg("new_max1"), arg("new_max2").none(),
        arg("weight_decay"), arg("gnorm_scale"), arg("unorm_vec").none(), arg("max_unorm"), arg("stream") = 0,
        arg("clip_scale").none() = nb::none(), "One optimizer step with 8-bit tensor-wise states, in place.");
  m.def("optimizer_update_8bit_blockwise", &update_8bit_blockwise_py, arg("optimizer_name"), arg("g"), arg("p"),
        arg("state1"), arg("state2").none(), arg("beta1"), arg("beta2"), arg("beta3"), arg("alpha"), arg("eps"),
        arg("step"), arg("lr"), arg("qmap1"), arg("qmap2").none(), arg("absmax1"), arg("absmax2").none(),
        arg("weight_decay"), arg("gnorm_scale"), arg("skip_zeros"), arg("stream") = 0,
        arg("clip_scale").none() = nb::none(), "One optimizer step with 8-bit blockwise states, in place.");
  m.def("optimizer_update_32bit_multi", &update_32bit_multi_py, arg("optimizer_name"), arg("g"), arg("p"),
        arg("state1"), arg("beta1"), arg("eps"), arg("step"), arg("lr"), arg("state2").none(), arg("beta2"),
        arg("beta3"), arg("alpha"), arg("weight_decay"), arg("gnorm_scale"), arg("unorm_vec").none(), arg("max_unorm"),
        arg("skip_zeros"), arg("stream") = 0, arg("clip_scale").none() = nb::none(),
        "One optimizer step with 32-bit states over lists of parameters, in place.");
  m.def("optimizer_update_8bit_blockwise_multi", &update_8bit_blockwise_multi_py, arg("optimizer_name"), arg("g"),
        arg("p"), arg("state1"), arg("state2").none(), arg("beta1"), arg("beta2"), arg("beta3"), arg("alpha"),
        arg("eps"), arg("step"), arg("lr"), arg("qmap1"), arg("qmap2").none(), arg("absmax1"), arg("absmax2").none(),
        arg("weight_decay"), arg("gnorm_scale"), arg("skip_zeros"), arg("stream") = 0,
        arg("clip_scale").none() = nb::none(),
        "One optimizer step with 8-bit blockwise states over lists of parameters, in place.");
  m.def(
      "percentile_clipping", &percentile_clipping_py, arg("grad"), arg("gnorm_vec"), arg("step"), arg("stream") = 0,
      arg("scale").none() = nb::none(), arg("percentile") = 5,
      "Percentile clipping's device step: grad's squared norm into gnorm_vec, the step's scale into scale; in place.");
}

}  // namespace lowbit::python
