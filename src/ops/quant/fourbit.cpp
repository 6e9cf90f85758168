// Front ends of 4-bit NF4 / FP4 quantization (docs/formats.md, "4-bit").
#include <array>

#include "core/check.h"
#include "lowbit/code_maps.h"
#include "ops/common.h"
#include "ops/dispatch.h"
#include "ops/quant/common.h"

namespace lowbit {

void check(const Quantize4bitArgs& a) {
  const char* op = Quantize4bitArgs::kName;
  core::require_present(op, "input", a.input);
  core::require_dtype(op, "input", a.input, core::kFloatDTypes);
  core::require_contiguous(op, "input", a.input);
  core::require_blocksize(op, "blocksize", a.blocksize);
  LOWBIT_REQUIRE(a.type == Quant4Type::nf4 || a.type == Quant4Type::fp4, ErrorCode::invalid_argument, op,
                 ": type must be nf4 or fp4 (got ", static_cast<int>(a.type), ")");
  const int64_t n = a.input.numel();
  core::require_present(op, "out", a.out);
  core::require_dtype(op, "out", a.out, {DType::u8});
  core::require_contiguous(op, "out", a.out);
  core::require_numel(op, "out", a.out, (n + 1) / 2);
  core::require_present(op, "absmax", a.absmax);
  core::require_dtype(op, "absmax", a.absmax, {DType::f32});
  core::require_contiguous(op, "absmax", a.absmax);
  core::require_numel(op, "absmax", a.absmax, ops::ceil_div(n, a.blocksize));
  core::require_same_device(op, {{"input", &a.input}, {"out", &a.out}, {"absmax", &a.absmax}});
}
size_t workspace_size(const Quantize4bitArgs& a) { return ops::backend_workspace(a, a.input.device); }
void run(const Quantize4bitArgs& a, void* ws, Stream s) { ops::dispatch(a, a.input.device, ws, s); }

void check(const Dequantize4bitArgs& a) {
  const char* op = Dequantize4bitArgs::kName;
  core::require_present(op, "out", a.out);
  core::require_dtype(op, "out", a.out, core::kFloatDTypes);
  core::require_contiguous(op, "out", a.out);
  core::require_blocksize(op, "blocksize", a.blocksize);
  LOWBIT_REQUIRE(a.type == Quant4Type::nf4 || a.type == Quant4Type::fp4, ErrorCode::invalid_argument, op,
                 ": type must be nf4 or fp4 (got ", static_cast<int>(a.type), ")");
  const int64_t n = a.out.numel();
  core::require_present(op, "input", a.input);
  core::require_dtype(op, "input", a.input, {DType::u8});
  core::require_contiguous(op, "input", a.input);
  // out's size decides here: say so, for the caller whose out is the wrong one.
  LOWBIT_REQUIRE(a.input.numel() == (n + 1) / 2, ErrorCode::invalid_argument, op, ": input must have ", (n + 1) / 2,
                 " elements, two codes a byte for out's ", n, " (got ", a.input.numel(), ", shape ",
                 core::shape_str(a.input), ")");
  ops::check_absmax_arg(op, a.absmax, a.nested, ops::ceil_div(n, a.blocksize));
  core::require_same_device(op, {{"input", &a.input}, {"out", &a.out}, {"absmax", &a.absmax}});
}
size_t workspace_size(const Dequantize4bitArgs& a) { return ops::backend_workspace(a, a.out.device); }
void run(const Dequantize4bitArgs& a, void* ws, Stream s) { ops::dispatch(a, a.out.device, ws, s); }

namespace {

const char* quant4_name(Quant4Type t) { return t == Quant4Type::nf4 ? "nf4" : "fp4"; }

Quant4Type quant4_from_name(const std::string& name) {
  if (name == "nf4") return Quant4Type::nf4;
  if (name == "fp4") return Quant4Type::fp4;
  core::fail(ErrorCode::invalid_argument,
             core::cat("dequantize_4bit: quant state quant_type must be nf4 or fp4 (got '", name, "')"));
}

}  // namespace

std::pair<Tensor, QuantState> quantize_4bit(const TensorRef& input, int64_t blocksize, Quant4Type type,
                                            bool compress_statistics, Stream stream) {
  const char* op = Quantize4bitArgs::kName;
  core::require_present(op, "input", input);
  core::require_blocksize(op, "blocksize", blocksize);
  const Device device = input.device;
  const int64_t n = input.numel();
  Tensor out = Tensor::empty({(n + 1) / 2, 1}, DType::u8, device, stream);
  Tensor absmax = Tensor::empty({ops::ceil_div(n, blocksize)}, DType::f32, device, stream);
  Quantize4bitArgs args{input, out, absmax, blocksize, type};
  ops::run_with_workspace(args, device, stream);

  QuantState state;
  // The serialized quant_map as bitsandbytes writes it (its fp4 code 8 is +0.0).
  const std::array<float, 16> table = get_4bit_type(type == Quant4Type::nf4 ? "nf4" : "fp4");
  state.code = ops::table_on(table.data(), 16, device, stream);
  state.blocksize = blocksize;
  state.shape.assign(input.sizes().begin(), input.sizes().end());
  state.dtype = input.dtype;
  state.quant_type = quant4_name(type);
  state.absmax = absmax;
  if (compress_statistics && absmax.numel() > 0) ops::compress_absmax(absmax, 256, state, stream);
  return {out, state};
}

Tensor dequantize_4bit(const TensorRef& packed, const QuantState& state, std::optional<DType> out_dtype,
                       Stream stream) {
  const char* op = Dequantize4bitArgs::kName;
  core::require_present(op, "packed", packed);
  LOWBIT_REQUIRE(state.absmax.defined(), ErrorCode::invalid_argument, op,
                 ": quant state must hold absmax (got an empty state)");
  const DType dtype = out_dtype.value_or(state.dtype);
  core::checked_numel(op, "quant state", Shape(state.shape), dtype);
  Tensor out = Tensor::empty(Shape(state.shape), dtype, packed.device, stream);
  Dequantize4bitArgs args{packed, state.absmax, ops::nested_of(state), out, state.blocksize,
                          quant4_from_name(state.quant_type)};
  ops::run_with_workspace(args, packed.device, stream);
  return out;
}

}  // namespace lowbit
