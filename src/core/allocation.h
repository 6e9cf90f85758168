// Where a tensor's memory comes from: the thread's allocation scope when one
// is open (the Python package allocates a call's CUDA results and scratch
// with the caller's framework), else the device backend (for CUDA the
// process-wide CudaAllocator of include/lowbit/allocator.h).
#pragma once

#include <cstddef>
#include <memory>

#include "lowbit/allocator.h"
#include "lowbit/tensor.h"

namespace lowbit::core {

// The storage of one tensor: `spec` carries its shape, dtype and device (data
// null); the returned pointer owns `bytes` usable on `stream`, its deleter
// gives them back. Throws lowbit::Error (out_of_memory) on failure.
using AllocateFn = std::shared_ptr<void> (*)(void* ctx, const TensorRef& spec, size_t bytes, Stream stream);

// Routes the CUDA allocations of this thread to `fn` while alive; scopes nest.
class AllocationScope {
 public:
  AllocationScope(AllocateFn fn, void* ctx);
  ~AllocationScope();
  AllocationScope(const AllocationScope&) = delete;
  AllocationScope& operator=(const AllocationScope&) = delete;

  // The innermost open scope of this thread, or null.
  static const AllocationScope* current();
  std::shared_ptr<void> allocate(const TensorRef& spec, size_t bytes, Stream stream) const {
    return fn_(ctx_, spec, bytes, stream);
  }

 private:
  AllocateFn fn_;
  void* ctx_;
  const AllocationScope* previous_;
};

// The user's CUDA allocator, or one without functions when the default pool serves.
CudaAllocator user_cuda_allocator();

}  // namespace lowbit::core
