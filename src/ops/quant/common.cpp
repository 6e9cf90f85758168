#include "ops/quant/common.h"

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "lowbit/code_maps.h"

namespace lowbit::ops {

Tensor table_on(const float* values, int64_t n, Device device, Stream stream) {
  const TensorRef host = TensorRef::contiguous(const_cast<float*>(values), DType::f32, {n});
  return Tensor::copy_of(host, device, stream);
}

const Tensor& code_map_on(std::string_view name, Device device) {
  static std::mutex mutex;
  // Never destroyed: at exit the CUDA runtime may be gone before statics are.
  static auto* cache = new std::map<std::tuple<std::string, int, int>, Tensor>();
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(std::string(name), static_cast<int>(device.type), device.index);
  auto it = cache->find(key);
  if (it == cache->end()) {
    std::vector<float> values;
    if (name == "dynamic") {
      values = create_dynamic_map();
    } else {
      const std::array<float, 16> table = get_4bit_type(name);
      values.assign(table.begin(), table.end());
    }
    it = cache->emplace(key, Tensor::constant(values.data(), {static_cast<int64_t>(values.size())}, DType::f32, device))
             .first;
  }
  return it->second;
}

}  // namespace lowbit::ops
