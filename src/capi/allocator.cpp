// C entry points of the CUDA allocator hook: lowbit_cuda_allocator is
// lowbit::CudaAllocator field for field.
#include "lowbit/allocator.h"

#include "capi/capi.h"
#include "core/check.h"
#include "lowbit/device.h"

using lowbit::ErrorCode;
using lowbit::capi::guarded;

extern "C" {

lowbit_status lowbit_set_cuda_allocator(const lowbit_cuda_allocator* allocator) {
  constexpr const char* op = "set_cuda_allocator";
  return guarded(op, [&] {
    lowbit::CudaAllocator a;
    if (allocator != nullptr) {
      // Half an allocator is a mistake to report, not a request for the default pool.
      LOWBIT_REQUIRE(
          (allocator->allocate == nullptr) == (allocator->deallocate == nullptr), ErrorCode::invalid_argument, op,
          ": allocator->allocate and allocator->deallocate must both be set, or both NULL to restore the "
          "default pool (got allocate ",
          allocator->allocate ? "set" : "NULL", ", deallocate ", allocator->deallocate ? "set" : "NULL", ")");
      a.allocate = allocator->allocate;
      a.deallocate = allocator->deallocate;
      a.ctx = allocator->ctx;
    }
    lowbit::set_cuda_allocator(a);
  });
}

lowbit_status lowbit_get_cuda_allocator(lowbit_cuda_allocator* allocator) {
  constexpr const char* op = "get_cuda_allocator";
  return guarded(op, [&] {
    lowbit::capi::require_not_null(op, "allocator", allocator);
    const lowbit::CudaAllocator a = lowbit::cuda_allocator();
    allocator->allocate = a.allocate;
    allocator->deallocate = a.deallocate;
    allocator->ctx = a.ctx;
  });
}

lowbit_status lowbit_empty_cuda_cache(int device) {
  constexpr const char* op = "empty_cuda_cache";
  return guarded(op, [&] {
    LOWBIT_REQUIRE(device >= 0, ErrorCode::invalid_argument, op, ": device must be >= 0 (got ", device, ")");
    const int count = lowbit::cuda_device_count();
    if (count == 0) return;  // nothing cached without a CUDA device
    LOWBIT_REQUIRE(device < count, ErrorCode::invalid_argument, op, ": device must be below the CUDA device count ",
                   count, " (got ", device, ")");
    lowbit::empty_cuda_cache(device);
  });
}

}  // extern "C"
