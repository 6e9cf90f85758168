// Bindings of the block-scaled FP8 GEMMs (include/lowbit/ops/fp8_gemm.h).
// Each writes into `out` when given (returns None), else returns a new array.
#include <optional>
#include <string>

#include "arrays.h"
#include "lowbit/ops/fp8_gemm.h"

namespace lowbit::python {
namespace {

nb::object fp8_gemm_py(const InArray& a, const InArray& a_s, const InArray& b, const InArray& b_s,
                       const std::optional<InArray>& bias, const std::optional<OutArray>& out,
                       const std::string& out_dtype, nb::handle stream_arg) {
  const char* op = Fp8GemmArgs::kName;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const TensorRef ra = to_ref(op, "a", a), ras = to_ref(op, "a_s", a_s), rb = to_ref(op, "b", b),
                  rbs = to_ref(op, "b_s", b_s), rbias = to_ref(op, "bias", bias);
  if (out) {
    run_op(Fp8GemmArgs{ra, ras, rb, rbs, rbias, to_ref(op, "out", *out), {}}, ra.device, ctx.stream);
    return nb::none();
  }
  const DType dtype = parse_dtype_arg(op, "out_dtype", out_dtype);
  return to_py(without_gil([&] { return fp8_gemm(ra, ras, rb, rbs, dtype, rbias, ctx.stream); }));
}

nb::object contiguous_py(const InArray& a, const InArray& a_s, const InArray& b, const InArray& b_s,
                         const InArray& m_indices, const std::optional<OutArray>& out, const std::string& out_dtype,
                         nb::handle stream_arg) {
  const char* op = Fp8GroupedGemmContiguousArgs::kName;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const TensorRef ra = to_ref(op, "a", a), ras = to_ref(op, "a_s", a_s), rb = to_ref(op, "b", b),
                  rbs = to_ref(op, "b_s", b_s), ids = to_ref(op, "m_indices", m_indices);
  if (out) {
    run_op(Fp8GroupedGemmContiguousArgs{ra, ras, rb, rbs, ids, to_ref(op, "out", *out), {}}, ra.device, ctx.stream);
    return nb::none();
  }
  const DType dtype = parse_dtype_arg(op, "out_dtype", out_dtype);
  return to_py(without_gil([&] { return fp8_grouped_gemm_contiguous(ra, ras, rb, rbs, ids, dtype, ctx.stream); }));
}

nb::object masked_py(const InArray& a, const InArray& a_s, const InArray& b, const InArray& b_s,
                     const InArray& masked_m, const std::optional<OutArray>& out, const std::string& out_dtype,
                     nb::handle stream_arg) {
  const char* op = Fp8GroupedGemmMaskedArgs::kName;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const TensorRef ra = to_ref(op, "a", a), ras = to_ref(op, "a_s", a_s), rb = to_ref(op, "b", b),
                  rbs = to_ref(op, "b_s", b_s), counts = to_ref(op, "masked_m", masked_m);
  if (out) {
    run_op(Fp8GroupedGemmMaskedArgs{ra, ras, rb, rbs, counts, to_ref(op, "out", *out), {}}, ra.device, ctx.stream);
    return nb::none();
  }
  const DType dtype = parse_dtype_arg(op, "out_dtype", out_dtype);
  return to_py(without_gil([&] { return fp8_grouped_gemm_masked(ra, ras, rb, rbs, counts, dtype, ctx.stream); }));
}

}  // namespace

void bind_fp8_gemm(nb::module_& m) {
  using nb::arg;
  m.def("fp8_gemm", &fp8_gemm_py, arg("a"), arg("a_s"), arg("b"), arg("b_s"), arg("bias").none(), arg("out").none(),
        arg("out_dtype"), arg("stream") = 0, "Block-scaled FP8 GEMM; the output, or None when out was given.");
  m.def("fp8_grouped_gemm_contiguous", &contiguous_py, arg("a"), arg("a_s"), arg("b"), arg("b_s"), arg("m_indices"),
        arg("out").none(), arg("out_dtype"), arg("stream") = 0,
        "Grouped FP8 GEMM over experts' row runs; the output, or None when out was given.");
  m.def("fp8_grouped_gemm_masked", &masked_py, arg("a"), arg("a_s"), arg("b"), arg("b_s"), arg("masked_m"),
        arg("out").none(), arg("out_dtype"), arg("stream") = 0,
        "Grouped FP8 GEMM over experts' first masked_m rows; the output, or None when out was given.");
}

}  // namespace lowbit::python
