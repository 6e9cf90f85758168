// Bindings of the BSR products (include/lowbit/ops/sparse.h): into `out`
// when given (returns None), else a new array.
#include "lowbit/ops/sparse.h"

#include <optional>

#include "arrays.h"

namespace lowbit::python {
namespace {

nb::object bsr_dense_addmm_py(const std::optional<InArray>& input, const InArray& crow_indices,
                              const InArray& col_indices, const InArray& values, int64_t M, int64_t K,
                              const InArray& dense, double beta, double alpha, const std::optional<OutArray>& out,
                              nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = BsrDenseAddmmArgs::kName;
  BsrDenseAddmmArgs x{to_ref(op, "input", input),
                      BsrRef{to_ref(op, "crow_indices", crow_indices), to_ref(op, "col_indices", col_indices),
                             to_ref(op, "values", values), M, K},
                      to_ref(op, "dense", dense),
                      beta,
                      alpha,
                      {}};
  if (out) {
    x.out = to_ref(op, "out", *out);
    run_op(x, x.dense.device, ctx.stream);
    return nb::none();
  }
  return to_py(without_gil([&] { return bsr_dense_addmm(x.input, x.bsr, x.dense, beta, alpha, ctx.stream); }));
}

}  // namespace

void bind_sparse(nb::module_& m) {
  using nb::arg;
  m.def("bsr_dense_addmm", &bsr_dense_addmm_py, arg("input").none(), arg("crow_indices"), arg("col_indices"),
        arg("values"), arg("M"), arg("K"), arg("dense"), arg("beta"), arg("alpha"), arg("out").none(),
        arg("stream") = 0, "beta * input + alpha * (bsr @ dense); the output, or None when out was given.");
}

}  // namespace lowbit::python
