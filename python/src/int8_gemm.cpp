// Bindings of the int8 GEMMs (include/lowbit/ops/int8_gemm.h). Each writes
// into `out` when given (returns None), else returns a new array.
#include <optional>
#include <string>

#include "arrays.h"
#include "lowbit/ops/int8_gemm.h"

namespace lowbit::python {
namespace {

// Runs into `out` when given (None returned), else returns allocate(), the GIL released.
template <class Args, class Allocate>
nb::object finish(Args x, const std::optional<OutArray>& out, const CallContext& ctx, Allocate allocate) {
  if (out) {
    x.out = to_ref(Args::kName, "out", *out);
    run_op(x, x.a.device, ctx.stream);
    return nb::none();
  }
  return to_py(without_gil(allocate));
}

nb::object linear_matmul_py(const InArray& a, const InArray& b, const std::optional<OutArray>& out,
                            nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = Int8LinearMatmulArgs::kName;
  const Int8LinearMatmulArgs x{to_ref(op, "a", a), to_ref(op, "b", b), {}, {}};
  return finish(x, out, ctx, [&] { return int8_linear_matmul(x.a, x.b, ctx.stream); });
}

nb::object mm_dequant_py(const InArray& a, const InArray& row_stats, const InArray& col_stats,
                         const std::optional<InArray>& bias, const std::optional<OutArray>& out,
                         const std::string& out_dtype, nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = Int8MmDequantArgs::kName;
  const Int8MmDequantArgs x{to_ref(op, "a", a), to_ref(op, "row_stats", row_stats),
                            to_ref(op, "col_stats", col_stats), to_ref(op, "bias", bias), {}};
  const DType dtype = parse_dtype_arg(op, "out_dtype", out_dtype);
  return finish(x, out, ctx,
                [&] { return int8_mm_dequant(x.a, x.row_stats, x.col_stats, dtype, x.bias, ctx.stream); });
}

nb::object scaled_mm_py(const InArray& a, const InArray& b, const InArray& row_stats, const InArray& col_stats,
                        const std::optional<InArray>& bias, const std::optional<OutArray>& out,
                        const std::string& out_dtype, nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = Int8ScaledMmArgs::kName;
  const Int8ScaledMmArgs x{to_ref(op, "a", a),         to_ref(op, "b", b),       to_ref(op, "row_stats", row_stats),
                           to_ref(op, "col_stats", col_stats), to_ref(op, "bias", bias), {}, {}};
  const DType dtype = parse_dtype_arg(op, "out_dtype", out_dtype);
  return finish(x, out, ctx,
                [&] { return int8_scaled_mm(x.a, x.b, x.row_stats, x.col_stats, dtype, x.bias, ctx.stream); });
}

nb::object linear_py(const InArray& a, const InArray& b, const InArray& b_stats, const std::optional<InArray>& bias,
                     float threshold, nb::handle stream_arg, const std::string& config) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = "int8_linear";
  const TensorRef ra = to_ref(op, "a", a), rb = to_ref(op, "b", b), rs = to_ref(op, "b_stats", b_stats),
                  rbias = to_ref(op, "bias", bias);
  const KernelConfig kc = parse_kernel_config(config);
  return to_py(without_gil([&] { return int8_linear(ra, rb, rs, rbias, threshold, ctx.stream, kc); }));
}

void linear_outliers_py(const InArray& a, const InArray& outlier_mask, const InArray& b, const InArray& b_stats,
                        const OutArray& out, nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = Int8LinearOutliersArgs::kName;
  const Int8LinearOutliersArgs x{to_ref(op, "a", a), to_ref(op, "outlier_mask", outlier_mask), to_ref(op, "b", b),
                                 to_ref(op, "b_stats", b_stats), to_ref(op, "out", out)};
  run_op(x, x.a.device, ctx.stream);
}

nb::object linear_grad_input_py(const InArray& grad_out, const InArray& b, const InArray& b_stats,
                                nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = Int8LinearGradInputArgs::kName;
  const TensorRef g = to_ref(op, "grad_out", grad_out), rb = to_ref(op, "b", b), rs = to_ref(op, "b_stats", b_stats);
  return to_py(without_gil([&] { return int8_linear_grad_input(g, rb, rs, ctx.stream); }));
}

}  // namespace

void bind_int8_gemm(nb::module_& m) {
  using nb::arg;
  m.def("int8_linear_matmul", &linear_matmul_py, arg("a"), arg("b"), arg("out").none(), arg("stream") = 0,
        "Exact int8 GEMM a @ b.T in int32; the output, or None when out was given.");
  m.def("int8_mm_dequant", &mm_dequant_py, arg("a"), arg("row_stats"), arg("col_stats"), arg("bias").none(),
        arg("out").none(), arg("out_dtype"), arg("stream") = 0,
        "Dequantization of an int8 GEMM's int32 result; the output, or None when out was given.");
  m.def("int8_scaled_mm", &scaled_mm_py, arg("a"), arg("b"), arg("row_stats"), arg("col_stats"), arg("bias").none(),
        arg("out").none(), arg("out_dtype"), arg("stream") = 0,
        "int8 GEMM and its dequantization in one op; the output, or None when out was given.");
  m.def("int8_linear", &linear_py, arg("a"), arg("b"), arg("b_stats"), arg("bias").none(), arg("threshold"),
        arg("stream") = 0, arg("config") = "", "The LLM.int8 linear layer's forward (a's dtype out).");
  m.def("int8_linear_grad_input", &linear_grad_input_py, arg("grad_out"), arg("b"), arg("b_stats"),
        arg("stream") = 0, "The input gradient of int8_linear: grad_out @ dequant(b).");
  m.def("int8_linear_outliers", &linear_outliers_py, arg("a"), arg("outlier_mask"), arg("b"), arg("b_stats"),
        arg("out"), arg("stream") = 0, "LLM.int8's outlier columns added into out in place.");
}

}  // namespace lowbit::python
