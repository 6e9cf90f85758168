#include "ops/common.h"

#include <string>

#include "core/check.h"

namespace lowbit::ops {

void require_shaped(const char* op, const char* name, const TensorRef& t, std::initializer_list<DType> dtypes,
                    const std::vector<int64_t>& shape) {
  core::require_present(op, name, t);
  core::require_dtype(op, name, t, dtypes);
  core::require_contiguous(op, name, t);
  const std::vector<int64_t> got(t.sizes().begin(), t.sizes().end());
  if (got == shape) return;
  std::string want = "[";
  for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
  core::fail(ErrorCode::invalid_argument,
             core::cat(op, ": ", name, " must have shape ", want, "] (got ", core::shape_str(t), ")"));
}

std::vector<int64_t> with_last(const TensorRef& t, int64_t last) {
  std::vector<int64_t> s(t.sizes().begin(), t.sizes().end());
  s.back() = last;
  return s;
}

Tensor workspace_on(size_t bytes, Device device, Stream stream) {
  if (bytes == 0) return Tensor();
  return Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, device, stream);
}

void check_code_map(const char* op, const char* name, const TensorRef& code) {
  core::require_present(op, name, code);
  core::require_dtype(op, name, code, {DType::f32});
  core::require_contiguous(op, name, code);
  core::require_numel(op, name, code, 256);
  if (!code.device.is_cpu()) return;  // sortedness is checked where the values are readable
  const float* c = code.ptr<const float>();
  for (int i = 0; i + 1 < 256; ++i) {
    LOWBIT_REQUIRE(c[i] <= c[i + 1], ErrorCode::invalid_argument, op, ": ", name, " must be sorted ascending (got ",
                   name, "[", i, "] = ", c[i], " > ", name, "[", i + 1, "] = ", c[i + 1], ")");
  }
}

void check_absmax_arg(const char* op, const TensorRef& absmax, const NestedAbsmax& nested, int64_t nblocks) {
  core::require_present(op, "absmax", absmax);
  core::require_contiguous(op, "absmax", absmax);
  core::require_numel(op, "absmax", absmax, nblocks);
  if (!nested.present()) {
    LOWBIT_REQUIRE(absmax.dtype == DType::f32, ErrorCode::unsupported_dtype, op,
                   ": absmax dtype must be float32, or uint8 with nested absmax (got ", dtype_name(absmax.dtype), ")");
    return;
  }
  core::require_dtype(op, "absmax (nested)", absmax, {DType::u8});
  core::require_blocksize(op, "nested.blocksize", nested.blocksize);
  core::require_present(op, "nested.code", nested.code);
  core::require_dtype(op, "nested.code", nested.code, {DType::f32});
  core::require_contiguous(op, "nested.code", nested.code);
  core::require_numel(op, "nested.code", nested.code, 256);
  core::require_present(op, "nested.absmax", nested.absmax);
  core::require_dtype(op, "nested.absmax", nested.absmax, {DType::f32});
  core::require_contiguous(op, "nested.absmax", nested.absmax);
  core::require_numel(op, "nested.absmax", nested.absmax, ceil_div(nblocks, nested.blocksize));
  core::require_present(op, "nested.offset", nested.offset);
  core::require_dtype(op, "nested.offset", nested.offset, {DType::f32});
  core::require_numel(op, "nested.offset", nested.offset, 1);
  core::require_same_device(op, {{"absmax", &absmax},
                                 {"nested.code", &nested.code},
                                 {"nested.absmax", &nested.absmax},
                                 {"nested.offset", &nested.offset}});
}

NestedAbsmax nested_of(const QuantState& state) {
  if (!state.nested()) return {};
  return NestedAbsmax{state.state2->code, state.state2->absmax, state.offset, state.state2->blocksize};
}

}  // namespace lowbit::ops
