#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "cuda/common/launch.h"

namespace lowbit::cuda {

int device_attribute(cudaDeviceAttr attr, const char* op) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, int> cache;
  int device = 0;
  check(cudaGetDevice(&device), op, "cudaGetDevice");
  const auto key = std::make_pair(device, static_cast<int>(attr));
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int value = 0;
  check(cudaDeviceGetAttribute(&value, attr, device), op, "cudaDeviceGetAttribute");
  cache.emplace(key, value);
  return value;
}

int sm_count(const char* op) { return device_attribute(cudaDevAttrMultiProcessorCount, op); }

bool device_is_sm90(const char* op) {
  return device_attribute(cudaDevAttrComputeCapabilityMajor, op) == 9 &&
         device_attribute(cudaDevAttrComputeCapabilityMinor, op) == 0;
}

int blocks_per_sm(const void* kernel, int threads, size_t smem, const char* op) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int, size_t>, int> cache;
  int device = 0;
  check(cudaGetDevice(&device), op, "cudaGetDevice");
  const auto key = std::make_tuple(kernel, device, threads, smem);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  int blocks = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem), op,
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, blocks);
  return blocks;
}

}  // namespace lowbit::cuda
