#include <map>
#include <mutex>
#include <utility>

#include "cuda/common/launch.h"

namespace lowbit::cuda {

int sm_count(const char* op) {
  static std::mutex mutex;
  static std::map<int, int> cache;
  int device = 0;
  check(cudaGetDevice(&device), op, "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  int count = 0;
  check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device), op,
        "cudaDeviceGetAttribute(multiProcessorCount)");
  cache.emplace(device, count);
  return count;
}

int blocks_per_sm(const void* kernel, int threads, size_t smem, const char* op) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> cache;
  int device = 0;
  check(cudaGetDevice(&device), op, "cudaGetDevice");
  const auto key = std::make_pair(kernel, device * 4096 + threads);
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
