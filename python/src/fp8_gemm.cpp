// Bindings of the block-scaled FP8 GEMMs (include/lowbit/ops/fp8_gemm.h).
// Each writes into `out` when given (returns None), else returns a new array.
#include <optional>
#include <string>

#include "arrays.h"
#include "lowbit/ops/fp8_gemm.h"

namespace lowbit::python {
namespace {

// The operands every layout shares, the one tensor the layout adds (bias,
// m_indices or masked_m), and the kernel config by name.
template <class Args, TensorRef Args::*kExtra>
Args operands(const InArray& a, const InArray& a_s, const InArray& b, const InArray& b_s, const char* extra_name,
              const std::optional<InArray>& extra, const std::string& config) {
  const char* op = Args::kName;
  Args x;
  x.a = to_ref(op, "a", a);
  x.a_s = to_ref(op, "a_s", a_s);
  x.b = to_ref(op, "b", b);
  x.b_s = to_ref(op, "b_s", b_s);
  x.*kExtra = to_ref(op, extra_name, extra);
  x.config = parse_kernel_config(config);
  return x;
}

// Runs into `out` when given (None returned), else returns allocate(dtype).
template <class Args, class Allocate>
nb::object finish(Args x, const std::optional<OutArray>& out, const std::string& out_dtype, const CallContext& ctx,
                  Allocate allocate) {
  if (out) {
    x.out = to_ref(Args::kName, "out", *out);
    run_op(x, x.a.device, ctx.stream);
    return nb::none();
  }
  const DType dtype = parse_dtype_arg(Args::kName, "out_dtype", out_dtype);
  return to_py(without_gil([&] { return allocate(dtype); }));
}

nb::object fp8_gemm_py(const InArray& a, const InArray& a_s, const InArray& b, const InArray& b_s,
                       const std::optional<InArray>& bias, const std::optional<OutArray>& out,
                       const std::string& out_dtype, nb::handle stream_arg, const std::string& config) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const auto x = operands<Fp8GemmArgs, &Fp8GemmArgs::bias>(a, a_s, b, b_s, "bias", bias, config);
  return finish(x, out, out_dtype, ctx,
                [&](DType d) { return fp8_gemm(x.a, x.a_s, x.b, x.b_s, d, x.bias, ctx.stream, x.config); });
}

nb::object contiguous_py(const InArray& a, const InArray& a_s, const InArray& b, const InArray& b_s,
                         const InArray& m_indices, const std::optional<OutArray>& out, const std::string& out_dtype,
                         nb::handle stream_arg, const std::string& config) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  using Args = Fp8GroupedGemmContiguousArgs;
  const auto x = operands<Args, &Args::m_indices>(a, a_s, b, b_s, "m_indices", m_indices, config);
  return finish(x, out, out_dtype, ctx, [&](DType d) {
    return fp8_grouped_gemm_contiguous(x.a, x.a_s, x.b, x.b_s, x.m_indices, d, ctx.stream, x.config);
  });
}

nb::object masked_py(const InArray& a, const InArray& a_s, const InArray& b, const InArray& b_s,
                     const InArray& masked_m, const std::optional<OutArray>& out, const std::string& out_dtype,
                     nb::handle stream_arg, const std::string& config) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  using Args = Fp8GroupedGemmMaskedArgs;
  const auto x = operands<Args, &Args::masked_m>(a, a_s, b, b_s, "masked_m", masked_m, config);
  return finish(x, out, out_dtype, ctx, [&](DType d) {
    return fp8_grouped_gemm_masked(x.a, x.a_s, x.b, x.b_s, x.masked_m, d, ctx.stream, x.config);
  });
}

}  // namespace

void bind_fp8_gemm(nb::module_& m) {
  using nb::arg;
  m.def("fp8_gemm", &fp8_gemm_py, arg("a"), arg("a_s"), arg("b"), arg("b_s"), arg("bias").none(), arg("out").none(),
        arg("out_dtype"), arg("stream") = 0, arg("config") = "",
        "Block-scaled FP8 GEMM; the output, or None when out was given.");
  m.def("fp8_grouped_gemm_contiguous", &contiguous_py, arg("a"), arg("a_s"), arg("b"), arg("b_s"), arg("m_indices"),
        arg("out").none(), arg("out_dtype"), arg("stream") = 0, arg("config") = "",
        "Grouped FP8 GEMM over experts' row runs; the output, or None when out was given.");
  m.def("fp8_grouped_gemm_masked", &masked_py, arg("a"), arg("a_s"), arg("b"), arg("b_s"), arg("masked_m"),
        arg("out").none(), arg("out_dtype"), arg("stream") = 0, arg("config") = "",
        "Grouped FP8 GEMM over experts' first masked_m rows; the output, or None when out was given.");
}

}  // namespace lowbit::python
