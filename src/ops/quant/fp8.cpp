// Front ends of FP8 block scaling (DeepSeek-V3; docs/formats.md, "FP8 block scaling").
#include <vector>

#include "core/check.h"
#include "ops/common.h"
#include "ops/dispatch.h"

namespace lowbit {
namespace {

void require_block(const char* op, int64_t block) {
  const bool pow2 = block > 0 && (block & (block - 1)) == 0;
  LOWBIT_REQUIRE(pow2 && block >= 16 && block <= 1024, ErrorCode::invalid_argument, op,
                 ": block must be a power of two from 16 to 1024 (got ", block, ")");
}

void require_2d(const char* op, const char* name, const TensorRef& t) {
  LOWBIT_REQUIRE(t.ndim == 2, ErrorCode::invalid_argument, op, ": ", name, " must be 2-D [N, K] (got ", t.ndim,
                 "-D ", core::shape_str(t), ")");
}

}  // namespace

void check(const ActQuantArgs& a) {
  const char* op = ActQuantArgs::kName;
  core::require_present(op, "input", a.input);
  core::require_dtype(op, "input", a.input, core::kFloatDTypes);
  core::require_contiguous(op, "input", a.input);
  require_block(op, a.block);
  LOWBIT_REQUIRE(a.input.ndim >= 1, ErrorCode::invalid_argument, op,
                 ": input must have at least 1 dimension (got a scalar)");
  const int64_t k = a.input.size(-1);
  LOWBIT_REQUIRE(k % a.block == 0, ErrorCode::invalid_argument, op, ": last dimension of input (", k,
                 ") must be divisible by block ", a.block);
  core::require_present(op, "out", a.out);
  core::require_dtype(op, "out", a.out, {DType::f8_e4m3});
  core::require_contiguous(op, "out", a.out);
  core::require_numel(op, "out", a.out, a.input.numel());
  core::require_present(op, "scale", a.scale);
  core::require_dtype(op, "scale", a.scale, {DType::f32});
  core::require_contiguous(op, "scale", a.scale);
  core::require_numel(op, "scale", a.scale, k == 0 ? 0 : a.input.numel() / a.block);
  core::require_same_device(op, {{"input", &a.input}, {"out", &a.out}, {"scale", &a.scale}});
}
size_t workspace_size(const ActQuantArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const ActQuantArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

void check(const WeightQuantArgs& a) {
  const char* op = WeightQuantArgs::kName;
  core::require_present(op, "input", a.input);
  core::require_dtype(op, "input", a.input, core::kFloatDTypes);
  core::require_contiguous(op, "input", a.input);
  require_2d(op, "input", a.input);
  require_block(op, a.block);
  const int64_t n = a.input.shape[0], k = a.input.shape[1];
  core::require_present(op, "out", a.out);
  core::require_dtype(op, "out", a.out, {DType::f8_e4m3});
  core::require_contiguous(op, "out", a.out);
  core::require_shape(op, "out", a.out, {n, k});
  core::require_present(op, "scale", a.scale);
  core::require_dtype(op, "scale", a.scale, {DType::f32});
  core::require_contiguous(op, "scale", a.scale);
  core::require_shape(op, "scale", a.scale, {ops::ceil_div(n, a.block), ops::ceil_div(k, a.block)});
  core::require_same_device(op, {{"input", &a.input}, {"out", &a.out}, {"scale", &a.scale}});
}
size_t workspace_size(const WeightQuantArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const WeightQuantArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

void check(const WeightDequantArgs& a) {
  const char* op = WeightDequantArgs::kName;
  core::require_present(op, "input", a.input);
  core::require_dtype(op, "input", a.input, {DType::f8_e4m3});
  core::require_contiguous(op, "input", a.input);
  require_2d(op, "input", a.input);
  require_block(op, a.block);
  const int64_t n = a.input.shape[0], k = a.input.shape[1];
  core::require_present(op, "scale", a.scale);
  core::require_dtype(op, "scale", a.scale, {DType::f32});
  core::require_contiguous(op, "scale", a.scale);
  core::require_shape(op, "scale", a.scale, {ops::ceil_div(n, a.block), ops::ceil_div(k, a.block)});
  core::require_present(op, "out", a.out);
  core::require_dtype(op, "out", a.out, core::kFloatDTypes);
  core::require_contiguous(op, "out", a.out);
  core::require_shape(op, "out", a.out, {n, k});
  core::require_same_device(op, {{"input", &a.input}, {"scale", &a.scale}, {"out", &a.out}});
}
size_t workspace_size(const WeightDequantArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const WeightDequantArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

Fp8Quantized act_quant(const TensorRef& x, int64_t block, bool ue8m0, Stream stream) {
  core::require_present(ActQuantArgs::kName, "input", x);
  LOWBIT_REQUIRE(x.ndim >= 1, ErrorCode::invalid_argument, ActQuantArgs::kName,
                 ": input must have at least 1 dimension (got a scalar)");
  require_block(ActQuantArgs::kName, block);
  std::vector<int64_t> sshape(x.sizes().begin(), x.sizes().end());
  sshape.back() /= block;
  Fp8Quantized r{Tensor::empty(x.sizes(), DType::f8_e4m3, x.device, stream),
                 Tensor::empty(Shape(sshape), DType::f32, x.device, stream)};
  ActQuantArgs args{x, r.values, r.scale, block, ue8m0};
  ops::run_with_workspace(args, x.device, stream);
  return r;
}

Fp8Quantized weight_quant(const TensorRef& w, int64_t block, Stream stream) {
  core::require_present(WeightQuantArgs::kName, "input", w);
  require_2d(WeightQuantArgs::kName, "input", w);
  require_block(WeightQuantArgs::kName, block);
  const int64_t n = w.shape[0], k = w.shape[1];
  Fp8Quantized r{Tensor::empty({n, k}, DType::f8_e4m3, w.device, stream),
                 Tensor::empty({ops::ceil_div(n, block), ops::ceil_div(k, block)}, DType::f32, w.device, stream)};
  WeightQuantArgs args{w, r.values, r.scale, block};
  ops::run_with_workspace(args, w.device, stream);
  return r;
}

Tensor weight_dequant(const TensorRef& wq, const TensorRef& scale, int64_t block, DType out_dtype, Stream stream) {
  core::require_present(WeightDequantArgs::kName, "input", wq);
  require_2d(WeightDequantArgs::kName, "input", wq);
  Tensor out = Tensor::empty(wq.sizes(), out_dtype, wq.device, stream);
  WeightDequantArgs args{wq, scale, out, block};
  ops::run_with_workspace(args, wq.device, stream);
  return out;
}

}  // namespace lowbit
