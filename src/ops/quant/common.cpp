#include "ops/quant/common.h"

#include <map>
#include <mutex>
#include <utility>

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

}  // namespace lowbit::ops
