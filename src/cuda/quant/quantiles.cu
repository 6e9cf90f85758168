// estimate_quantiles on CUDA: exact, identical to the CPU. Keys
// float_order_key(to_f32(x)) are radix-sorted (cub), turned back into floats,
// and quantile_interpolate picks the 256 quantiles (src/core/quant_math.h).
//
// Workspace: keys [n] u32, sorted keys [n] u32, then cub's temporary storage,
// each 256-byte aligned.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include "core/float_convert.h"
#include "core/quant_math.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/quant/ops.h"

namespace lowbit::cuda {
namespace {

constexpr int kThreads = 256;

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

template <class T>
__global__ void __launch_bounds__(kThreads) order_keys(const T* in, int64_t n, uint32_t* keys) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    keys[i] = core::float_order_key(core::to_f32(in[i]));
  }
}

// In place: the float whose float_order_key is keys[i] (the key's inverse).
__global__ void __launch_bounds__(kThreads) keys_to_floats(uint32_t* keys, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    keys[i] = core::float_bits(core::float_from_order_key(keys[i]));
  }
}

__global__ void __launch_bounds__(core::kNumQuantiles)
    pick_quantiles(const float* sorted, int64_t n, float offset, float* out) {
  const int j = threadIdx.x;
  out[j] = core::quantile_interpolate(sorted, n, core::quantile_probability(j, offset));
}

size_t sort_temp_bytes(int64_t n, const char* op) {
  size_t bytes = 0;
  check(cub::DeviceRadixSort::SortKeys(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                       static_cast<uint32_t*>(nullptr), n),
        op, "cub::DeviceRadixSort::SortKeys (size query)");
  return bytes;
}

}  // namespace

size_t estimate_quantiles_workspace(const EstimateQuantilesArgs& a) {
  const int64_t n = a.input.numel();
  if (n == 0) return 0;
  const char* op = EstimateQuantilesArgs::kName;
  DeviceGuard guard(a.input.device.index, op);
  const size_t keys = align256(static_cast<size_t>(n) * sizeof(uint32_t));
  return 2 * keys + align256(sort_temp_bytes(n, op));
}

void estimate_quantiles(const EstimateQuantilesArgs& a, void* workspace, Stream stream) {
  const char* op = EstimateQuantilesArgs::kName;
  const int64_t n = a.input.numel();
  if (n == 0) return;
  DeviceGuard guard(a.input.device.index, op);
  const cudaStream_t s = to_cuda(stream);
  const size_t keys_bytes = align256(static_cast<size_t>(n) * sizeof(uint32_t));
  auto* keys = static_cast<uint32_t*>(workspace);
  auto* sorted = reinterpret_cast<uint32_t*>(static_cast<char*>(workspace) + keys_bytes);
  void* temp = static_cast<char*>(workspace) + 2 * keys_bytes;
  size_t temp_bytes = sort_temp_bytes(n, op);

  with_float_type(a.input.dtype, op, "input", [&](auto t) {
    using T = decltype(t);
    auto* kernel = &order_keys<T>;
    const int grid = persistent_grid(kernel, kThreads, 0, ceil_div(n, kThreads), op);
    kernel<<<grid, kThreads, 0, s>>>(a.input.ptr<const T>(), n, keys);
    check_launch(op, "order_keys");
  });
  check(cub::DeviceRadixSort::SortKeys(temp, temp_bytes, keys, sorted, n, 0, 32, s), op,
        "cub::DeviceRadixSort::SortKeys");
  {
    auto* kernel = &keys_to_floats;
    const int grid = persistent_grid(kernel, kThreads, 0, ceil_div(n, kThreads), op);
    kernel<<<grid, kThreads, 0, s>>>(sorted, n);
    check_launch(op, "keys_to_floats");
  }
  pick_quantiles<<<1, core::kNumQuantiles, 0, s>>>(reinterpret_cast<const float*>(sorted), n, a.offset,
                                                   a.out.ptr<float>());
  check_launch(op, "pick_quantiles");
}

}  // namespace lowbit::cuda
