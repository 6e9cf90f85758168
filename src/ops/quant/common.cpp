#include "ops/quant/common.h"

#include <map>
#include <mutex>
#include <utility>

#include "core/check.h"
#include "lowbit/code_maps.h"

namespace lowbit::ops {

Tensor table_on(const float* values, int64_t n, Device device, Stream stream) {
  const TensorRef host = TensorRef::contiguous(const_cast<float*>(values), DType::f32, {n});
  return Tensor::copy_of(host, device, stream);
}

const Tensor& dynamic_code_on(Device device) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, Tensor> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(static_cast<int>(device.type), device.index);
  auto it = cache.find(key);
  if (it == cache.end()) {
    const std::vector<float> code = create_dynamic_map();
    it = cache.emplace(key, Tensor::constant(code.data(), {static_cast<int64_t>(code.size())}, DType::f32, device))
             .first;
  }
  return it->second;
}

Tensor workspace_on(size_t bytes, Device device, Stream stream) {
  if (bytes == 0) return Tensor();
  return Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, device, stream);
}

void check_absmax_arg(const char* op, const TensorRef& absmax, const NestedAbsmax& nested, int64_t nblocks) {
  core::require_present(op, "absmax", absmax);
  core::require_contiguous(op, "absmax", absmax);
  core::require_numel(op, "absmax", absmax, nblocks);
  if (!nested.present()) {
    LOWBIT_REQUIRE(absmax.dtype == DType::f32, ErrorCode::unsupported_dtype, op,
                   ": absmax dtype must be float32, or uint8 with nested absmax (got ", dtype_name(absmax.dtype),
                   ")");
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

}  // namespace lowbit::ops
