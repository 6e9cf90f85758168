#include "lowbit/tensor.h"

#include <algorithm>
#include <utility>

#include "core/allocation.h"
#include "core/check.h"
#include "core/registry.h"

namespace lowbit {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

int cuda_device_count() {
  if (!core::has_device_backend(DeviceType::cuda)) return 0;
  return core::device_backend(DeviceType::cuda).device_count();
}

void synchronize(Stream stream) {
  if (core::has_device_backend(DeviceType::cuda)) core::device_backend(DeviceType::cuda).synchronize(stream);
}

TensorRef TensorRef::contiguous(void* data, DType dtype, Shape shape, Device device) {
  LOWBIT_REQUIRE(shape.size() <= static_cast<size_t>(kMaxDims), ErrorCode::invalid_argument,
                 "TensorRef: at most ", kMaxDims, " dimensions are supported (got ", shape.size(), ")");
  core::checked_numel("TensorRef", "tensor", shape, dtype);
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int>(shape.size());
  t.device = device;
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    const auto u = static_cast<size_t>(i);
    t.shape[u] = shape[u];
    t.strides[u] = stride;
    stride *= std::max<int64_t>(shape[u], 1);
  }
  return t;
}

int64_t TensorRef::numel() const {
  // Checked here too: a TensorRef filled in field by field never went through contiguous().
  if (ndim < 0) return 0;
  LOWBIT_REQUIRE(ndim <= kMaxDims, ErrorCode::invalid_argument, "TensorRef: at most ", kMaxDims,
                 " dimensions are supported (got ", ndim, ")");
  return core::checked_numel("TensorRef", "tensor", sizes(), dtype);
}

bool TensorRef::is_contiguous() const {
  if (numel() == 0) return true;  // no element is out of place; exporters give empty arrays any strides
  int64_t expected = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    const auto u = static_cast<size_t>(i);
    if (shape[u] != 1 && strides[u] != expected) return false;
    expected *= shape[u];
  }
  return true;
}

std::string TensorRef::str() const {
  return core::cat(dtype_name(dtype), core::shape_str(*this), " ", device.str());
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device, Stream stream) {
  Tensor t;
  t.ref_ = TensorRef::contiguous(nullptr, dtype, shape, device);
  const size_t bytes = std::max<size_t>(t.ref_.nbytes(), 1);
  const core::AllocationScope* scope = device.is_cuda() ? core::AllocationScope::current() : nullptr;
  t.storage_ = scope != nullptr ? scope->allocate(t.ref_, bytes, stream)
                                : core::device_backend(device.type).alloc(bytes, device.index, stream);
  t.ref_.data = t.storage_.get();
  return t;
}

Tensor Tensor::adopt(std::shared_ptr<void> storage, const TensorRef& view) {
  Tensor t;
  t.ref_ = view;
  t.storage_ = std::move(storage);
  t.ref_.data = t.storage_.get();
  return t;
}

Tensor Tensor::constant(const void* values, Shape shape, DType dtype, Device device) {
  Tensor t;
  t.ref_ = TensorRef::contiguous(nullptr, dtype, shape, device);
  t.storage_ = core::device_backend(device.type).constant(values, t.ref_.nbytes(), device.index);
  t.ref_.data = t.storage_.get();
  return t;
}

void copy(const TensorRef& dst, const TensorRef& src, Stream stream) {
  LOWBIT_REQUIRE(dst.dtype == src.dtype, ErrorCode::invalid_argument, "copy: dst dtype must equal src dtype ",
                 dtype_name(src.dtype), " (got ", dtype_name(dst.dtype), ")");
  core::require_numel("copy", "dst", dst, src.numel());
  core::require_contiguous("copy", "src", src);
  core::require_contiguous("copy", "dst", dst);
  if (src.nbytes() == 0) return;
  const DeviceType owner = dst.device.is_cuda() ? DeviceType::cuda : src.device.type;
  core::device_backend(owner).copy(dst.data, dst.device, src.data, src.device, src.nbytes(), stream);
}

Tensor Tensor::copy_of(const TensorRef& src, Device device, Stream stream) {
  Tensor t = empty(src.sizes(), src.dtype, device, stream);
  copy(t.ref_, src, stream);
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  t.ref_ = TensorRef::contiguous(ref_.data, ref_.dtype, shape, ref_.device);
  LOWBIT_REQUIRE(t.ref_.numel() == ref_.numel(), ErrorCode::invalid_argument, "Tensor::reshaped: shape ",
                 core::shape_str(t.ref_), " must have ", ref_.numel(), " elements like ", core::shape_str(ref_));
  return t;
}

}  // namespace lowbit
