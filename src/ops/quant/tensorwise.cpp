// Front ends of tensor-wise 8-bit quantization (docs/formats.md, "8-bit
// tensor-wise"): bitsandbytes' quantize_no_absmax, dequantize_no_absmax,
// quantize and dequantize.
#include "core/check.h"
#include "ops/common.h"
#include "ops/dispatch.h"

namespace lowbit {
namespace {

// A present, contiguous tensor of one of `dtypes` and `numel` elements.
void require_array(const char* op, const char* name, const TensorRef& t, std::initializer_list<DType> dtypes,
                   int64_t numel) {
  core::require_present(op, name, t);
  core::require_dtype(op, name, t, dtypes);
  core::require_contiguous(op, name, t);
  core::require_numel(op, name, t, numel);
}

// The checks of a quantize (float input, u8 out) and of a dequantize (u8
// input, float out); n comes from the input.
void check_quantize(const char* op, const TensorRef& input, const TensorRef& out, const TensorRef& code) {
  core::require_present(op, "input", input);
  core::require_dtype(op, "input", input, core::kFloatDTypes);
  core::require_contiguous(op, "input", input);
  require_array(op, "out", out, {DType::u8}, input.numel());
  ops::check_code_map(op, "code", code);
}
void check_dequantize(const char* op, const TensorRef& input, const TensorRef& out, const TensorRef& code) {
  core::require_present(op, "input", input);
  core::require_dtype(op, "input", input, {DType::u8});
  core::require_contiguous(op, "input", input);
  require_array(op, "out", out, core::kFloatDTypes, input.numel());
  ops::check_code_map(op, "code", code);
}

}  // namespace

void check(const QuantizeNoAbsmaxArgs& a) {
  const char* op = QuantizeNoAbsmaxArgs::kName;
  check_quantize(op, a.input, a.out, a.code);
  core::require_same_device(op, {{"input", &a.input}, {"code", &a.code}, {"out", &a.out}});
}
size_t workspace_size(const QuantizeNoAbsmaxArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const QuantizeNoAbsmaxArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

void check(const DequantizeNoAbsmaxArgs& a) {
  const char* op = DequantizeNoAbsmaxArgs::kName;
  check_dequantize(op, a.input, a.out, a.code);
  core::require_same_device(op, {{"input", &a.input}, {"code", &a.code}, {"out", &a.out}});
}
size_t workspace_size(const DequantizeNoAbsmaxArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const DequantizeNoAbsmaxArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

void check(const QuantizeTensorwiseArgs& a) {
  const char* op = QuantizeTensorwiseArgs::kName;
  check_quantize(op, a.input, a.out, a.code);
  require_array(op, "absmax", a.absmax, {DType::f32}, 1);
  core::require_same_device(op, {{"input", &a.input}, {"code", &a.code}, {"out", &a.out}, {"absmax", &a.absmax}});
}
size_t workspace_size(const QuantizeTensorwiseArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const QuantizeTensorwiseArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

void check(const DequantizeTensorwiseArgs& a) {
  const char* op = DequantizeTensorwiseArgs::kName;
  check_dequantize(op, a.input, a.out, a.code);
  require_array(op, "absmax", a.absmax, {DType::f32}, 1);
  core::require_same_device(op, {{"input", &a.input}, {"code", &a.code}, {"absmax", &a.absmax}, {"out", &a.out}});
}
size_t workspace_size(const DequantizeTensorwiseArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const DequantizeTensorwiseArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

}  // namespace lowbit
