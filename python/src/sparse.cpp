// Bindings of the BSR products (include/lowbit/ops/sparse.h): into `out`
// when given (returns None), else a new array.
#include "lowbit/ops/sparse.h"

#include <optional>
#include <string>

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

BsrRef bsr_ref(const char* op, const InArray& crow_indices, const InArray& col_indices, const InArray& values,
               int64_t M, int64_t K) {
  return BsrRef{to_ref(op, "crow_indices", crow_indices), to_ref(op, "col_indices", col_indices),
                to_ref(op, "values", values), M, K};
}

nb::object sampled_addmm_py(const InArray& crow_indices, const InArray& col_indices, const InArray& values, int64_t M,
                            int64_t N, const InArray& mat1, const InArray& mat2, double beta, double alpha,
                            const std::optional<OutArray>& out_values, nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = SampledAddmmArgs::kName;
  SampledAddmmArgs x{bsr_ref(op, crow_indices, col_indices, values, M, N),
                     to_ref(op, "mat1", mat1),
                     to_ref(op, "mat2", mat2),
                     beta,
                     alpha,
                     {}};
  if (out_values) {
    x.out_values = to_ref(op, "out_values", *out_values);
    run_op(x, x.mat1.device, ctx.stream);
    return nb::none();
  }
  return to_py(without_gil([&] { return sampled_addmm(x.input, x.mat1, x.mat2, beta, alpha, ctx.stream); }));
}

nb::object bsr_softmax_py(const InArray& crow_indices, const InArray& col_indices, const InArray& values, int64_t M,
                          int64_t K, nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const BsrRef in = bsr_ref(BsrSoftmaxArgs::kName, crow_indices, col_indices, values, M, K);
  return to_py(without_gil([&] { return bsr_softmax(in, ctx.stream); }));
}

ScatterMmFormat scatter_mm_format(const std::string& name) {
  for (ScatterMmFormat f : {ScatterMmFormat::scatter_mm, ScatterMmFormat::bsr_strided_mm,
                            ScatterMmFormat::bsr_strided_mm_compressed}) {
    if (name == scatter_mm_format_name(f)) return f;
  }
  throw Error(ErrorCode::invalid_argument, "scatter_mm: indices format must be scatter_mm, bsr_strided_mm or "
                                           "bsr_strided_mm_compressed (got '" + name + "')");
}

void scatter_mm_py(const std::string& format, const InArray& blocks, const InArray& others, const InArray& c_indices,
                   const std::optional<InArray>& pq, const std::optional<InArray>& r_offsets,
                   const std::optional<InArray>& p_offsets, const std::optional<InArray>& q_offsets, int64_t split_n,
                   const OutArray& accumulators, nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = ScatterMmArgs::kName;
  const ScatterMmArgs x{scatter_mm_format(format),
                        to_ref(op, "blocks", blocks),
                        to_ref(op, "others", others),
                        to_ref(op, "c_indices", c_indices),
                        to_ref(op, "pq", pq),
                        to_ref(op, "r_offsets", r_offsets),
                        to_ref(op, "p_offsets", p_offsets),
                        to_ref(op, "q_offsets", q_offsets),
                        split_n,
                        to_ref(op, "accumulators", accumulators)};
  run_op(x, x.blocks.device, ctx.stream);
}

}  // namespace

void bind_sparse(nb::module_& m) {
  using nb::arg;
  m.def("bsr_dense_addmm", &bsr_dense_addmm_py, arg("input").none(), arg("crow_indices"), arg("col_indices"),
        arg("values"), arg("M"), arg("K"), arg("dense"), arg("beta"), arg("alpha"), arg("out").none(),
        arg("stream") = 0, "beta * input + alpha * (bsr @ dense); the output, or None when out was given.");
  m.def("sampled_addmm", &sampled_addmm_py, arg("crow_indices"), arg("col_indices"), arg("values"), arg("M"), arg("N"),
        arg("mat1"), arg("mat2"), arg("beta"), arg("alpha"), arg("out_values").none(), arg("stream") = 0,
        "The values of beta * input + alpha * (mat1 @ mat2) at input's blocks; None when out_values was given.");
  m.def("bsr_softmax", &bsr_softmax_py, arg("crow_indices"), arg("col_indices"), arg("values"), arg("M"), arg("K"),
        arg("stream") = 0, "The values of the row-wise softmax over a BSR's stored elements.");
  m.def("scatter_mm", &scatter_mm_py, arg("format"), arg("blocks"), arg("others"), arg("c_indices"), arg("pq").none(),
        arg("r_offsets").none(), arg("p_offsets").none(), arg("q_offsets").none(), arg("split_n"), arg("accumulators"),
        arg("stream") = 0, "Scattered block products added into accumulators (in place).");
}

}  // namespace lowbit::python
