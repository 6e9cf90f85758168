#include "core/allocation.h"

#include <mutex>

#include "core/registry.h"

namespace lowbit {
namespace {

thread_local const core::AllocationScope* t_scope = nullptr;

std::mutex& allocator_mutex() {
  static std::mutex m;
  return m;
}

CudaAllocator& user_allocator() {
  static CudaAllocator a;
  return a;
}

}  // namespace

namespace core {

AllocationScope::AllocationScope(AllocateFn fn, void* ctx) : fn_(fn), ctx_(ctx), previous_(t_scope) {
  t_scope = this;
}
AllocationScope::~AllocationScope() { t_scope = previous_; }
const AllocationScope* AllocationScope::current() { return t_scope; }

CudaAllocator user_cuda_allocator() {
  std::lock_guard<std::mutex> lock(allocator_mutex());
  return user_allocator();
}

}  // namespace core

void set_cuda_allocator(const CudaAllocator& allocator) {
  std::lock_guard<std::mutex> lock(allocator_mutex());
  user_allocator() = allocator.present() ? allocator : CudaAllocator{};
}

CudaAllocator cuda_allocator() { return core::user_cuda_allocator(); }

void empty_cuda_cache(int device) {
  if (!core::has_device_backend(DeviceType::cuda)) return;
  core::device_backend(DeviceType::cuda).empty_cache(device);
}

}  // namespace lowbit
