// Bindings of tensor-wise 8-bit quantization (include/lowbit/ops/quant.h:
// bitsandbytes' quantize_no_absmax, dequantize_no_absmax, quantize and
// dequantize). Each runs the check/workspace/run primitives on the caller's
// out= buffer or a new tensor, which goes back exported (arrays.h: to_py).
#include <nanobind/stl/tuple.h>

#include <vector>

#include "arrays.h"
#include "core/check.h"

namespace lowbit::python {
namespace {

// The caller's output buffer, or a new tensor (kept in `owned`).
TensorRef output(const char* op, const std::optional<OutArray>& given, Tensor& owned, const TensorRef& like,
                 DType dtype, Stream stream) {
  if (given) return to_ref(op, "out", *given);
  owned = Tensor::empty(like.sizes(), dtype, like.device, stream);
  return owned.ref();
}

nb::object py_or_none(const Tensor& t, const char* what) {
  return t.defined() ? nb::object(to_py(t, what)) : nb::none();
}

nb::object quantize_no_absmax_py(const InArray& A, const std::optional<InArray>& code,
                                 const std::optional<OutArray>& out, nb::handle stream_arg) {
  const char* op = QuantizeNoAbsmaxArgs::kName;
  const TensorRef input = to_ref(op, "A", A);
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  std::vector<Tensor> keep;
  Tensor out_t;
  QuantizeNoAbsmaxArgs a;
  a.input = input;
  a.code = code_arg(op, "code", code, input.device, ctx.stream, keep);
  a.out = output(op, out, out_t, input, DType::u8, ctx.stream);
  run_op(a, input.device, ctx.stream);
  return py_or_none(out_t, "out");
}

nb::object dequantize_no_absmax_py(const InArray& A, const std::optional<InArray>& code,
                                   const std::optional<OutArray>& out, const std::string& dtype,
                                   nb::handle stream_arg) {
  const char* op = DequantizeNoAbsmaxArgs::kName;
  const TensorRef input = to_ref(op, "A", A);
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  std::vector<Tensor> keep;
  Tensor out_t;
  DequantizeNoAbsmaxArgs a;
  a.input = input;
  a.code = code_arg(op, "code", code, input.device, ctx.stream, keep);
  a.out = output(op, out, out_t, input, parse_dtype_arg(op, "dtype", dtype), ctx.stream);
  run_op(a, input.device, ctx.stream);
  return py_or_none(out_t, "out");
}

// (out or None when given, absmax as a 0-d float32, the code's copy on A's
// device or None when the call's code is used as given).
nb::tuple quantize_tensorwise_py(const InArray& A, const std::optional<InArray>& code,
                                 const std::optional<OutArray>& out, nb::handle stream_arg) {
  const char* op = QuantizeTensorwiseArgs::kName;
  const TensorRef input = to_ref(op, "A", A);
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  std::vector<Tensor> keep;
  Tensor out_t;
  QuantizeTensorwiseArgs a;
  a.input = input;
  a.code = code_arg(op, "code", code, input.device, ctx.stream, keep);
  a.out = output(op, out, out_t, input, DType::u8, ctx.stream);
  const Tensor absmax = Tensor::empty({1}, DType::f32, input.device, ctx.stream);
  a.absmax = absmax.ref();
  run_op(a, input.device, ctx.stream);
  return nb::make_tuple(py_or_none(out_t, "out"), to_py(absmax.reshaped(Shape{}), "absmax"),
                        keep.empty() ? nb::none() : nb::object(to_py(keep.back(), "code")));
}

nb::object dequantize_tensorwise_py(const InArray& A, const InArray& absmax, const std::optional<InArray>& code,
                                    const std::optional<OutArray>& out, const std::string& dtype,
                                    nb::handle stream_arg) {
  const char* op = DequantizeTensorwiseArgs::kName;
  const TensorRef input = to_ref(op, "A", A);
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  std::vector<Tensor> keep;
  Tensor out_t;
  DequantizeTensorwiseArgs a;
  a.input = input;
  a.code = code_arg(op, "code", code, input.device, ctx.stream, keep);
  a.absmax = place(to_ref(op, "absmax", absmax), input.device, ctx.stream, keep);
  a.out = output(op, out, out_t, input, parse_dtype_arg(op, "dtype", dtype), ctx.stream);
  run_op(a, input.device, ctx.stream);
  return py_or_none(out_t, "out");
}

}  // namespace

void bind_tensorwise(nb::module_& m) {
  using nb::arg;
  m.def("quantize_no_absmax", &quantize_no_absmax_py, arg("A"), arg("code").none(), arg("out").none(),
        arg("stream") = 0, "8-bit codes of A, nearest in code; returns the output (None when out was given).");
  m.def("dequantize_no_absmax", &dequantize_no_absmax_py, arg("A"), arg("code").none(), arg("out").none(),
        arg("dtype"), arg("stream") = 0, "code[A]; returns the output (None when out was given).");
  m.def("quantize_tensorwise", &quantize_tensorwise_py, arg("A"), arg("code").none(), arg("out").none(),
        arg("stream") = 0,
        "absmax = max|A| on A's device, codes of A / absmax: (out or None, absmax 0-d, code copy or None).");
  m.def("dequantize_tensorwise", &dequantize_tensorwise_py, arg("A"), arg("absmax"), arg("code").none(),
        arg("out").none(), arg("dtype"), arg("stream") = 0,
        "code[A] * absmax; returns the output (None when out was given).");
}

}  // namespace lowbit::python
