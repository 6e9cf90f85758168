// Front ends of 8-bit blockwise quantization (docs/formats.md, "8-bit blockwise") and absmax centering.
#include <cmath>

#include "core/check.h"
#include "ops/common.h"
#include "ops/dispatch.h"
#include "ops/quant/common.h"

namespace lowbit {

// ---------------------------------------------------------- quantize_blockwise
void check(const QuantizeBlockwiseArgs& a) {
  const char* op = QuantizeBlockwiseArgs::kName;
  core::require_present(op, "input", a.input);
  core::require_dtype(op, "input", a.input, core::kFloatDTypes);
  core::require_contiguous(op, "input", a.input);
  core::require_blocksize(op, "blocksize", a.blocksize);
  ops::check_code_map(op, "code", a.code);
  const int64_t n = a.input.numel();
  core::require_present(op, "out", a.out);
  core::require_dtype(op, "out", a.out, {DType::u8});
  core::require_contiguous(op, "out", a.out);
  core::require_numel(op, "out", a.out, n);
  core::require_present(op, "absmax", a.absmax);
  core::require_dtype(op, "absmax", a.absmax, {DType::f32});
  core::require_contiguous(op, "absmax", a.absmax);
  core::require_numel(op, "absmax", a.absmax, ops::ceil_div(n, a.blocksize));
  core::require_same_device(op, {{"input", &a.input}, {"code", &a.code}, {"out", &a.out}, {"absmax", &a.absmax}});
}
size_t workspace_size(const QuantizeBlockwiseArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const QuantizeBlockwiseArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

// -------------------------------------------------------- dequantize_blockwise
void check(const DequantizeBlockwiseArgs& a) {
  const char* op = DequantizeBlockwiseArgs::kName;
  core::require_present(op, "input", a.input);
  core::require_dtype(op, "input", a.input, {DType::u8});
  core::require_contiguous(op, "input", a.input);
  core::require_blocksize(op, "blocksize", a.blocksize);
  ops::check_code_map(op, "code", a.code);
  const int64_t n = a.input.numel();
  core::require_present(op, "out", a.out);
  core::require_dtype(op, "out", a.out, core::kFloatDTypes);
  core::require_contiguous(op, "out", a.out);
  core::require_numel(op, "out", a.out, n);
  ops::check_absmax_arg(op, a.absmax, a.nested, ops::ceil_div(n, a.blocksize));
  core::require_same_device(op, {{"input", &a.input}, {"code", &a.code}, {"out", &a.out}, {"absmax", &a.absmax}});
}
size_t workspace_size(const DequantizeBlockwiseArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const DequantizeBlockwiseArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

// --------------------------------------------------------------- absmax_center
void check(const AbsmaxCenterArgs& a) {
  const char* op = AbsmaxCenterArgs::kName;
  core::require_present(op, "values", a.values);
  core::require_dtype(op, "values", a.values, {DType::f32});
  core::require_contiguous(op, "values", a.values);
  LOWBIT_REQUIRE(a.values.numel() >= 1, ErrorCode::invalid_argument, op,
                 ": values must have at least 1 element (got 0)");
  core::require_present(op, "mean", a.mean);
  core::require_dtype(op, "mean", a.mean, {DType::f32});
  core::require_numel(op, "mean", a.mean, 1);
  core::require_same_device(op, {{"values", &a.values}, {"mean", &a.mean}});
}
size_t workspace_size(const AbsmaxCenterArgs& a) { return ops::backend_workspace(a, a.values.device); }
void run(const AbsmaxCenterArgs& a, void* ws, Stream s) { ops::dispatch(a, a.values.device, ws, s); }

namespace ops {

// Double quantization of an f32 absmax (bitsandbytes): offset = mean,
// absmax -= offset, then 8-bit blockwise with the dynamic map. Fills the
// nested fields of `state`; `absmax` is consumed (centered in place).
void compress_absmax(const Tensor& absmax, int64_t nested_blocksize, QuantState& state, Stream stream) {
  const Device device = absmax.device();
  Tensor offset = Tensor::empty({1}, DType::f32, device, stream);
  AbsmaxCenterArgs center{absmax, offset};
  run_with_workspace(center, device, stream);

  const Tensor& code = code_map_on("dynamic", device);
  const int64_t nb = absmax.numel();
  Tensor qabsmax = Tensor::empty({nb}, DType::u8, device, stream);
  Tensor absmax2 = Tensor::empty({ceil_div(nb, nested_blocksize)}, DType::f32, device, stream);
  QuantizeBlockwiseArgs q{absmax, code, qabsmax, absmax2, nested_blocksize};
  run_with_workspace(q, device, stream);

  auto state2 = std::make_shared<QuantState>();
  state2->absmax = absmax2;
  state2->code = code;
  state2->blocksize = nested_blocksize;
  state2->shape = {nb};
  state2->dtype = DType::f32;
  state.absmax = qabsmax;
  state.offset = offset;
  state.state2 = state2;
}

}  // namespace ops

std::pair<Tensor, QuantState> quantize_blockwise(const TensorRef& input, const TensorRef& code, int64_t blocksize,
                                                 bool nested, Stream stream) {
  const char* op = QuantizeBlockwiseArgs::kName;
  core::require_present(op, "input", input);
  core::require_blocksize(op, "blocksize", blocksize);
  const Device device = input.device;
  Tensor code_t = code.present() ? Tensor() : ops::code_map_on("dynamic", device);
  const TensorRef& code_ref = code.present() ? code : code_t.ref();
  Tensor out = Tensor::empty(input.sizes(), DType::u8, device, stream);
  Tensor absmax = Tensor::empty({ops::ceil_div(input.numel(), blocksize)}, DType::f32, device, stream);
  QuantizeBlockwiseArgs args{input, code_ref, out, absmax, blocksize};
  ops::run_with_workspace(args, device, stream);

  QuantState state;
  state.code = code.present() ? Tensor::copy_of(code, device, stream) : code_t;
  state.blocksize = blocksize;
  state.shape.assign(input.sizes().begin(), input.sizes().end());
  state.dtype = input.dtype;
  state.absmax = absmax;
  if (nested && absmax.numel() > 0) ops::compress_absmax(absmax, blocksize, state, stream);
  return {out, state};
}

Tensor dequantize_blockwise(const TensorRef& q, const QuantState& state, std::optional<DType> out_dtype,
                            Stream stream) {
  const char* op = DequantizeBlockwiseArgs::kName;
  core::require_present(op, "q", q);
  LOWBIT_REQUIRE(state.absmax.defined() && state.code.defined(), ErrorCode::invalid_argument, op,
                 ": quant state must hold absmax and code (got an empty state)");
  Tensor out = Tensor::empty(q.sizes(), out_dtype.value_or(state.dtype), q.device, stream);
  DequantizeBlockwiseArgs args{q, state.code, state.absmax, ops::nested_of(state), out, state.blocksize};
  ops::run_with_workspace(args, q.device, stream);
  return out;
}

}  // namespace lowbit
