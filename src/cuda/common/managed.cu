#include <cuda_runtime.h>

#include <algorithm>
#include <memory>

#include "core/check.h"
#include "cuda/common/check.h"
#include "cuda/common/memory.h"

namespace lowbit::cuda {
namespace {

using core::cat;

cudaMemLocation location_of(Device target) {
  cudaMemLocation where{};
  if (target.is_cuda()) {
    where.type = cudaMemLocationTypeDevice;
    where.id = target.index;
  } else {
    where.type = cudaMemLocationTypeHost;
    where.id = 0;
  }
  return where;
}

struct ManagedFree {
  void operator()(void* p) const noexcept { (void)cudaFree(p); }
};

}  // namespace

std::shared_ptr<void> managed(size_t bytes, int index) {
  DeviceGuard guard(index, "empty_managed");
  int supported = 0;
  check(cudaDeviceGetAttribute(&supported, cudaDevAttrManagedMemory, index), "empty_managed",
        "cudaDeviceGetAttribute(managed memory)");
  LOWBIT_REQUIRE(supported != 0, ErrorCode::no_backend, "empty_managed: cuda:", index,
                 " does not support managed memory");
  void* p = nullptr;
  const size_t n = std::max<size_t>(bytes, 1);
  const cudaError_t e = cudaMallocManaged(&p, n, cudaMemAttachGlobal);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    core::fail(e == cudaErrorMemoryAllocation ? ErrorCode::out_of_memory : ErrorCode::device_error,
               cat("empty_managed: allocation of ", n, " managed bytes for cuda:", index,
                   " failed: ", cudaGetErrorString(e)));
  }
  std::shared_ptr<void> owned(p, ManagedFree{});
  // The pages live on the GPU while they fit; the driver evicts them to the host under pressure.
  check(cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, location_of(Device::cuda(index))), "empty_managed",
        "cudaMemAdvise(preferred location)");
  return owned;
}

void prefetch(const void* data, size_t bytes, Device target, Stream stream) {
  if (bytes == 0) return;
  cudaPointerAttributes attributes{};
  check(cudaPointerGetAttributes(&attributes, data), "prefetch", "cudaPointerGetAttributes");
  LOWBIT_REQUIRE(attributes.type == cudaMemoryTypeManaged, ErrorCode::invalid_argument,
                 "prefetch: the tensor must be managed memory (from empty_managed / get_paged)");
  DeviceGuard guard(target.is_cuda() ? target.index : std::max(attributes.device, 0), "prefetch");
  check(cudaMemPrefetchAsync(data, bytes, location_of(target), 0, to_cuda(stream)), "prefetch",
        "cudaMemPrefetchAsync");
}

}  // namespace lowbit::cuda
