// Bindings of the quantization ops (include/lowbit/ops/quant.h). Arguments
// arrive as (array, as) pairs from lowbit/functional.py; results go back as
// exported tensors (arrays.h: to_py) that functional.py wraps in the caller's framework.
// Ops with bitsandbytes' out=/absmax= buffers run the check/workspace/run
// primitives on the caller's memory; the others call the allocating front ends.
#include <nanobind/stl/array.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <cstring>
#include <tuple>

#include "arrays.h"
#include "ops/quant/common.h"
#include "core/check.h"
#include "core/hd.h"
#include "lowbit/code_maps.h"

namespace lowbit::python {
namespace {

using core::cat;

using core::ceil_div;

// The caller's output buffer, or a new tensor (kept in `owned`).
TensorRef output(const char* op, const char* arg, const std::optional<OutArray>& given, Tensor& owned, Shape shape,
                 DType dtype, Device device, Stream stream) {
  if (given) return to_ref(op, arg, *given);
  owned = Tensor::empty(shape, dtype, device, stream);
  return owned.ref();
}
TensorRef output(const char* op, const char* arg, const std::optional<OutArray>& given, Tensor& owned,
                 std::initializer_list<int64_t> shape, DType dtype, Device device, Stream stream) {
  return output(op, arg, given, owned, Shape(shape.begin(), shape.size()), dtype, device, stream);
}

nb::object py_or_none(const Tensor& t, const char* what) {
  return t.defined() ? nb::object(to_py(t, what)) : nb::none();
}

// Double quantization of an f32 absmax (bitsandbytes' nested /
// compress_statistics): absmax is centered in place (offset = its mean), then
// quantized blockwise with the dynamic map. Fills the state fields of `r`.
void compress_absmax(const TensorRef& absmax, int64_t blocksize2, Device device, Stream stream, nb::dict& r) {
  Tensor offset = Tensor::empty({1}, DType::f32, device, stream);
  run_op(AbsmaxCenterArgs{absmax, offset}, device, stream);
  auto [qabsmax, state2] =
      without_gil([&] { return quantize_blockwise(absmax, TensorRef{}, blocksize2, false, stream); });
  r["absmax"] = to_py(qabsmax, "absmax");
  r["offset"] = to_py(offset.reshaped(Shape{}), "offset");
  r["absmax2"] = to_py(state2.absmax, "absmax2");
  r["blocksize2"] = blocksize2;
}

// ------------------------------------------------------------------- 8-bit

nb::dict quantize_blockwise_py(const InArray& A, const std::optional<InArray>& code,
                               const std::optional<OutArray>& absmax, const std::optional<OutArray>& out,
                               int64_t blocksize, bool nested, nb::handle stream_arg) {
  const char* op = "quantize_blockwise";
  const TensorRef input = to_ref(op, "A", A);
  const Device device = input.device;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const Stream stream = ctx.stream;
  core::require_blocksize(op, "blocksize", blocksize);
  // The map on A's device: the shared dynamic map for None, the caller's
  // array when it is there already (the state refers to it), else a copy
  // (bitsandbytes: code.to(A.device)).
  std::vector<Tensor> keep;
  const TensorRef code_t = code_arg(op, "code", code, device, stream, keep);
  Tensor out_t, absmax_t;
  const TensorRef out_ref = output(op, "out", out, out_t, input.sizes(), DType::u8, device, stream);
  const TensorRef absmax_ref =
      output(op, "absmax", absmax, absmax_t, {ceil_div(input.numel(), blocksize)}, DType::f32, device, stream);
  run_op(QuantizeBlockwiseArgs{input, code_t, out_ref, absmax_ref, blocksize}, device, stream);

  nb::dict r;
  r["shape"] = nb::tuple(nb::cast(std::vector<int64_t>(input.sizes().begin(), input.sizes().end())));
  r["dtype"] = std::string(dtype_name(input.dtype));
  r["out"] = py_or_none(out_t, "out");
  r["code"] = keep.empty() ? nb::none() : nb::object(to_py(keep.back(), "code"));
  r["absmax"] = py_or_none(absmax_t, "absmax");
  if (nested && absmax_ref.numel() > 0) compress_absmax(absmax_ref, blocksize, device, stream, r);
  return r;
}

nb::object dequantize_blockwise_py(const InArray& A, const InArray& absmax, const std::optional<InArray>& code,
                                   int64_t blocksize,
                                   const std::optional<NestedIn>& nested, const std::optional<OutArray>& out,
                                   const std::string& out_dtype, nb::handle stream_arg) {
  const char* op = "dequantize_blockwise";
  const TensorRef input = to_ref(op, "A", A);
  const Device device = input.device;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const Stream stream = ctx.stream;
  std::vector<Tensor> keep;
  DequantizeBlockwiseArgs args;
  args.input = input;
  args.code = code_arg(op, "code", code, device, stream, keep);
  args.absmax = to_ref(op, "absmax", absmax);
  args.nested = nested_arg(op, nested, device, stream, keep);
  args.blocksize = blocksize;
  Tensor out_t;
  args.out = output(op, "out", out, out_t, input.sizes(), parse_dtype_arg(op, "dtype", out_dtype), device, stream);
  run_op(args, device, stream);
  return py_or_none(out_t, "out");
}

// ------------------------------------------------------------------- 4-bit

nb::dict quantize_4bit_py(const InArray& A, const std::optional<OutArray>& absmax, const std::optional<OutArray>& out,
                          int64_t blocksize, bool compress_statistics, const std::string& quant_type,
                          nb::handle stream_arg) {
  const char* op = "quantize_4bit";
  const TensorRef input = to_ref(op, "A", A);
  const Device device = input.device;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const Stream stream = ctx.stream;
  const Quant4Type type = quant4_type(op, quant_type);
  core::require_blocksize(op, "blocksize", blocksize);
  const int64_t n = input.numel();
  Tensor out_t, absmax_t;
  const TensorRef out_ref = output(op, "out", out, out_t, {(n + 1) / 2, 1}, DType::u8, device, stream);
  const TensorRef absmax_ref = output(op, "absmax", absmax, absmax_t, {ceil_div(n, blocksize)}, DType::f32, device, stream);
  run_op(Quantize4bitArgs{input, out_ref, absmax_ref, blocksize, type}, device, stream);

  nb::dict r;
  r["shape"] = nb::tuple(nb::cast(std::vector<int64_t>(input.sizes().begin(), input.sizes().end())));
  r["dtype"] = std::string(dtype_name(input.dtype));
  r["out"] = py_or_none(out_t, "out");
  r["absmax"] = py_or_none(absmax_t, "absmax");
  if (compress_statistics && absmax_ref.numel() > 0) compress_absmax(absmax_ref, 256, device, stream, r);
  return r;
}

nb::object dequantize_4bit_py(const InArray& A, const InArray& absmax, const std::string& quant_type, int64_t blocksize,
                              const std::optional<NestedIn>& nested, const std::vector<int64_t>& shape,
                              const std::optional<OutArray>& out, const std::string& out_dtype,
                              nb::handle stream_arg) {
  const char* op = "dequantize_4bit";
  const TensorRef input = to_ref(op, "A", A);
  const Device device = input.device;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const Stream stream = ctx.stream;
  std::vector<Tensor> keep;
  Dequantize4bitArgs args;
  args.input = input;
  args.absmax = to_ref(op, "absmax", absmax);
  args.nested = nested_arg(op, nested, device, stream, keep);
  args.blocksize = blocksize;
  args.type = quant4_type(op, quant_type);
  LOWBIT_REQUIRE(shape.size() <= static_cast<size_t>(kMaxDims), ErrorCode::invalid_argument, op,
                 ": shape must have at most ", kMaxDims, " dimensions (got ", shape.size(), ")");
  const DType dtype = parse_dtype_arg(op, "dtype", out_dtype);
  core::checked_numel(op, "quant_state", Shape(shape), dtype);
  Tensor out_t;
  args.out = output(op, "out", out, out_t, Shape(shape), dtype, device, stream);
  // The state's shape decides the sizes: a caller's out of another size is the
  // argument at fault (the op itself sizes everything from out).
  if (out) {
    const int64_t n = core::checked_numel(op, "quant_state", Shape(shape), args.out.dtype);
    LOWBIT_REQUIRE(args.out.numel() == n, ErrorCode::invalid_argument, op, ": out must have ", n,
                   " elements, the quant state's shape ", core::shape_str(Shape(shape)), " (got ", args.out.numel(),
                   ", shape ", core::shape_str(args.out), ")");
  }
  run_op(args, device, stream);
  return py_or_none(out_t, "out");
}

// ---------------------------------------------------------------- quantiles

nb::object estimate_quantiles_py(const InArray& A, const std::optional<OutArray>& out, float offset, int num_quantiles,
                                 nb::handle stream_arg) {
  const char* op = "estimate_quantiles";
  const TensorRef input = to_ref(op, "A", A);
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const Stream stream = ctx.stream;
  if (!out) return to_py(without_gil([&] { return estimate_quantiles(input, offset, num_quantiles, stream); }));
  LOWBIT_REQUIRE(num_quantiles == 256, ErrorCode::invalid_argument, op, ": out= needs num_quantiles == 256 (got ",
                 num_quantiles, "); leave out unset for fewer quantiles");
  run_op(EstimateQuantilesArgs{input, to_ref(op, "out", *out), offset}, input.device, stream);
  return nb::none();
}

void histogram_scatter_add_2d_py(const OutArray& histogram, const InArray& index1, const InArray& index2,
                                 const InArray& source, nb::handle stream_arg) {
  const char* op = HistogramScatterAdd2dArgs::kName;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  HistogramScatterAdd2dArgs a;
  a.histogram = to_ref(op, "histogram", histogram);
  a.index1 = to_ref(op, "index1", index1);
  a.index2 = to_ref(op, "index2", index2);
  a.source = to_ref(op, "source", source);
  run_op(a, a.histogram.device, ctx.stream);
}

nb::tuple quantile_map_py(const InArray& A, int total_bits, nb::handle stream_arg) {
  const char* op = "create_quantile_map";
  LOWBIT_REQUIRE(total_bits >= 1 && total_bits <= 8, ErrorCode::invalid_argument, op,
                 ": total_bits must be from 1 to 8 (got ", total_bits, ")");
  const TensorRef input = to_ref(op, "A", A);
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const Stream stream = ctx.stream;
  const Tensor map = without_gil([&] {
    const Tensor q = estimate_quantiles(input, 1.0f / 512.0f, (1 << total_bits) - 1, stream).to(Device::cpu(), stream);
    const std::vector<float> values(q.ptr<const float>(), q.ptr<const float>() + q.numel());
    const std::vector<float> m = quantile_map_from_quantiles(values);
    const TensorRef host =
        TensorRef::contiguous(const_cast<float*>(m.data()), DType::f32, {static_cast<int64_t>(m.size())});
    return Tensor::copy_of(host, input.device, stream);
  });
  return to_py(map);
}

// ---------------------------------------------------------------------- fp8

nb::tuple act_quant_py(const InArray& x, int64_t block_size, bool ue8m0, nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const TensorRef input = to_ref("act_quant", "x", x);
  const Fp8Quantized q = without_gil([&] { return act_quant(input, block_size, ue8m0, ctx.stream); });
  return nb::make_tuple(to_py(q.values, "y"), to_py(q.scale, "s"));
}

nb::tuple weight_quant_py(const InArray& x, int64_t block_size, nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const TensorRef input = to_ref("weight_quant", "x", x);
  const Fp8Quantized q = without_gil([&] { return weight_quant(input, block_size, ctx.stream); });
  return nb::make_tuple(to_py(q.values, "y"), to_py(q.scale, "s"));
}

nb::tuple weight_dequant_py(const InArray& x, const InArray& s, int64_t block_size, const std::string& out_dtype,
                            nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = "weight_dequant";
  const TensorRef wq = to_ref(op, "x", x);
  const TensorRef scale = to_ref(op, "s", s);
  const DType dtype = parse_dtype_arg(op, "dtype", out_dtype);
  return to_py(without_gil([&] { return weight_dequant(wq, scale, block_size, dtype, ctx.stream); }));
}

// --------------------------------------------------------------------- int8

nb::tuple int8_vectorwise_quant_py(const InArray& A, float threshold, nb::handle stream_arg, bool outlier_cols) {
  const char* op = "int8_vectorwise_quant";
  const TensorRef input = to_ref(op, "A", A);
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const Stream stream = ctx.stream;
  const Int8Quantized q =
      without_gil([&] { return int8_vectorwise_quant(input, threshold, stream, outlier_cols); });
  nb::object cols = nb::none();
  if (threshold > 0.0f && outlier_cols) {
    const auto n = static_cast<int64_t>(q.outlier_cols.size());
    const TensorRef host = TensorRef::contiguous(const_cast<int64_t*>(q.outlier_cols.data()), DType::i64, {n});
    cols = to_py(without_gil([&] { return Tensor::copy_of(host, input.device, stream); }), "outlier_cols");
  }
  return nb::make_tuple(to_py(q.values, "out_row"), to_py(q.row_stats, "row_stats"), cols);
}

nb::tuple int8_colwise_quant_py(const InArray& A, float threshold, nb::handle stream_arg) {
  const char* op = "int8_colwise_quant";
  const TensorRef input = to_ref(op, "A", A);
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const Stream stream = ctx.stream;
  const Int8ColwiseQuantized q = without_gil([&] { return int8_colwise_quant(input, threshold, stream); });
  return nb::make_tuple(to_py(q.values, "out_col"), to_py(q.col_stats, "col_stats"));
}

nb::tuple int8_vectorwise_dequant_py(const InArray& A, const InArray& stats, const std::string& out_dtype,
                                     nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = "int8_vectorwise_dequant";
  const TensorRef q = to_ref(op, "A", A);
  const TensorRef row_stats = to_ref(op, "stats", stats);
  const DType dtype = parse_dtype_arg(op, "dtype", out_dtype);
  return to_py(without_gil([&] { return int8_vectorwise_dequant(q, row_stats, dtype, ctx.stream); }));
}

}  // namespace

void bind_quant(nb::module_& m) {
  using nb::arg;
  m.def("quantize_blockwise", &quantize_blockwise_py, arg("A"), arg("code").none(), arg("absmax").none(),
        arg("out").none(), arg("blocksize"), arg("nested"), arg("stream") = 0,
        "8-bit blockwise quantization. Returns a dict: shape and dtype (of A), out, absmax (None for buffers "
        "the caller gave), code (a copy on A's device of a code given elsewhere, else None: the state refers to the "
        "given code, or the shared dynamic map for None) and, when nested, offset, absmax2, blocksize2 (the nested "
        "code is the dynamic map).");
  m.def("dequantize_blockwise", &dequantize_blockwise_py, arg("A"), arg("absmax"), arg("code").none(), arg("blocksize"),
        arg("nested").none(), arg("out").none(), arg("dtype"), arg("stream") = 0,
        "8-bit blockwise dequantization; returns the output (None when out was given).");
  m.def("quantize_4bit", &quantize_4bit_py, arg("A"), arg("absmax").none(), arg("out").none(), arg("blocksize"),
        arg("compress_statistics"), arg("quant_type"), arg("stream") = 0,
        "NF4/FP4 quantization; returns a dict like quantize_blockwise without code (nested blocksize 256).");
  m.def("shared_code", [](const std::string& name, const std::string& type, int index) {
        return to_py(ops::code_map_on(name, to_device(type, index)), "code");
      }, arg("name"), arg("device_type"), arg("device_index"),
        "The code map 'dynamic' or a 4-bit table ('nf4', 'fp4', ...) on a device, one copy shared by every call.");
  m.def("dequantize_4bit", &dequantize_4bit_py, arg("A"), arg("absmax"), arg("quant_type"), arg("blocksize"),
        arg("nested").none(), arg("shape"), arg("out").none(), arg("dtype"), arg("stream") = 0,
        "NF4/FP4 dequantization; returns the output (None when out was given).");
  m.def("estimate_quantiles", &estimate_quantiles_py, arg("A"), arg("out").none(), arg("offset"), arg("num_quantiles"),
        arg("stream") = 0, "Quantiles of A (None when out was given).");
  m.def("histogram_scatter_add_2d", &histogram_scatter_add_2d_py, arg("histogram"), arg("index1"), arg("index2"),
        arg("source"), arg("stream") = 0, "histogram[index1[i], index2[i]] += source[i], in place.");
  m.def("quantile_map", &quantile_map_py, arg("A"), arg("total_bits"), arg("stream") = 0,
        "bitsandbytes create_quantile_map on A's device.");
  m.def("act_quant", &act_quant_py, arg("x"), arg("block_size"), arg("ue8m0"), arg("stream") = 0,
        "DeepSeek 1 x block FP8 activation quantization: (y, s).");
  m.def("weight_quant", &weight_quant_py, arg("x"), arg("block_size"), arg("stream") = 0,
        "DeepSeek block x block FP8 weight quantization: (y, s).");
  m.def("weight_dequant", &weight_dequant_py, arg("x"), arg("s"), arg("block_size"), arg("dtype"), arg("stream") = 0,
        "DeepSeek block x block FP8 weight dequantization.");
  m.def("int8_colwise_quant", &int8_colwise_quant_py, arg("A"), arg("threshold"), arg("stream") = 0,
        "LLM.int8 column-wise quantization: (out_col, col_stats).");
  m.def("int8_vectorwise_quant", &int8_vectorwise_quant_py, arg("A"), arg("threshold"), arg("stream") = 0,
        arg("outlier_cols") = true,
        "LLM.int8 row-wise quantization: (out_row, row_stats, outlier_cols or None); outlier_cols=False "
        "skips reading them back (no wait).");
  m.def("int8_vectorwise_dequant", &int8_vectorwise_dequant_py, arg("A"), arg("stats"), arg("dtype"), arg("stream") = 0,
        "LLM.int8 row-wise dequantization.");

  // Code maps (host values; lowbit/functional.py makes arrays of them).
  m.def("create_dynamic_map", &create_dynamic_map, arg("signed"), arg("max_exponent_bits"), arg("total_bits"));
  m.def("create_linear_map", &create_linear_map, arg("signed"), arg("total_bits"), arg("add_zero"));
  m.def("create_normal_map", &create_normal_map, arg("offset"), arg("use_extra_value"));
  m.def("create_fp8_map", &create_fp8_map, arg("signed"), arg("exponent_bits"), arg("precision_bits"),
        arg("total_bits"));
  m.def(
      "get_4bit_type", [](const std::string& name, int blocksize) { return get_4bit_type(name, blocksize); },
      arg("typename"), arg("blocksize"));
}

}  // namespace lowbit::python
