// Bindings of the optimizer updates (include/lowbit/ops/optim.h): in place,
// no result.
#include <optional>
#include <string>

#include "arrays.h"
#include "lowbit/ops/optim.h"

namespace lowbit::python {
namespace {

void update_32bit_py(const std::string& optimizer_name, const InArray& g, const OutArray& p, const OutArray& state1,
                     float beta1, float eps, int64_t step, float lr, const std::optional<OutArray>& state2, float beta2,
                     float beta3, float alpha, float weight_decay, float gnorm_scale,
                     const std::optional<OutArray>& unorm_vec, float max_unorm, bool skip_zeros, nb::handle stream_arg) {
  const char* op = OptimizerUpdate32bitArgs::kName;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  OptimizerUpdate32bitArgs a;
  a.optimizer = optimizer_from_name(optimizer_name, op);
  a.g = to_ref(op, "g", g);
  a.p = to_ref(op, "p", p);
  a.state1 = to_ref(op, "state1", state1);
  if (state2) a.state2 = to_ref(op, "state2", *state2);
  if (unorm_vec) a.unorm_vec = to_ref(op, "unorm_vec", *unorm_vec);
  a.beta1 = beta1, a.beta2 = beta2, a.beta3 = beta3, a.alpha = alpha;
  a.eps = eps, a.weight_decay = weight_decay, a.lr = lr, a.gnorm_scale = gnorm_scale;
  a.max_unorm = max_unorm, a.step = step, a.skip_zeros = skip_zeros;
  run_op(a, a.g.device, ctx.stream);
}

}  // namespace

void bind_optim(nb::module_& m) {
  using nb::arg;
  m.def("optimizer_update_32bit", &update_32bit_py, arg("optimizer_name"), arg("g"), arg("p"), arg("state1"),
        arg("beta1"), arg("eps"), arg("step"), arg("lr"), arg("state2").none(), arg("beta2"), arg("beta3"),
        arg("alpha"), arg("weight_decay"), arg("gnorm_scale"), arg("unorm_vec").none(), arg("max_unorm"),
        arg("skip_zeros"), arg("stream") = 0, "One optimizer step with 32-bit states, in place.");
}

}  // namespace lowbit::python
