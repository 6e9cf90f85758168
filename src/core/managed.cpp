#include "lowbit/managed.h"

#include <algorithm>

#include "core/check.h"
#include "core/registry.h"

namespace lowbit {

Tensor empty_managed(Shape shape, DType dtype, Device device) {
  LOWBIT_REQUIRE(device.is_cuda(), ErrorCode::invalid_argument,
                 "empty_managed: device must be a CUDA device (got ", device.str(), ")");
  const core::DeviceBackend& backend = core::device_backend(DeviceType::cuda);
  LOWBIT_REQUIRE(backend.managed != nullptr, ErrorCode::no_backend, "empty_managed: the CUDA backend has no managed memory");
  const TensorRef view = TensorRef::contiguous(nullptr, dtype, shape, device);
  return Tensor::adopt(backend.managed(std::max<size_t>(view.nbytes(), 1), device.index), view);
}

void prefetch(const TensorRef& t, Device target, Stream stream) {
  core::require_present("prefetch", "t", t);
  core::require_contiguous("prefetch", "t", t);
  LOWBIT_REQUIRE(t.device.is_cuda(), ErrorCode::invalid_argument,
                 "prefetch: t must be managed memory, a CUDA tensor (got a tensor on ", t.device.str(), ")");
  const core::DeviceBackend& backend = core::device_backend(DeviceType::cuda);
  LOWBIT_REQUIRE(backend.prefetch != nullptr, ErrorCode::no_backend, "prefetch: the CUDA backend has no managed memory");
  backend.prefetch(t.data, t.nbytes(), target, stream);
}

}  // namespace lowbit
