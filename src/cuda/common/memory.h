// Device memory services of the CUDA backend: stream-ordered allocation (the
// user's CudaAllocator, else a pool per device), copies that never wait
// unless the host reads the result, and the pool's trim.
#pragma once

#include <cstddef>
#include <memory>

#include "lowbit/device.h"
#include "lowbit/stream.h"

namespace lowbit::cuda {

std::shared_ptr<void> allocate(size_t bytes, int index, Stream stream);
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream stream);
void empty_cache(int index);
std::shared_ptr<void> constant(const void* src, size_t bytes, int index);
// Managed memory and its prefetch (include/lowbit/managed.h; managed.cu).
std::shared_ptr<void> managed(size_t bytes, int index);
void prefetch(const void* data, size_t bytes, Device target, Stream stream);

}  // namespace lowbit::cuda
