// TensorRef (non-owning view) and Tensor (owning) — the currency of every op.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "lowbit/device.h"
#include "lowbit/dtype.h"
#include "lowbit/stream.h"

namespace lowbit {

inline constexpr int kMaxDims = 8;
using Shape = std::span<const int64_t>;

// A view of memory that someone else owns. Strides count elements. Tensors of
// packed sub-byte dtypes must be contiguous (strides are not meaningful within
// a byte). A default-constructed TensorRef is "absent" (data == nullptr,
// ndim == -1) and stands for an optional argument left out.
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::f32;
  int ndim = -1;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};
  Device device{};

  // A contiguous row-major view. Throws lowbit::Error for ndim > kMaxDims,
  // negative extents, or a shape whose element count or byte size does not
  // fit in 64 bits.
  static TensorRef contiguous(void* data, DType dtype, Shape shape, Device device = Device::cpu());
  static TensorRef contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                              Device device = Device::cpu()) {
    return contiguous(data, dtype, Shape(shape.begin(), shape.size()), device);
  }

  bool present() const { return ndim >= 0; }
  int64_t numel() const;  // throws lowbit::Error where the count would not fit (see contiguous)
  size_t nbytes() const { return dtype_storage_bytes(dtype, numel()); }
  bool is_contiguous() const;
  int64_t size(int dim) const { return shape[static_cast<size_t>(dim < 0 ? dim + ndim : dim)]; }
  Shape sizes() const { return Shape(shape.data(), static_cast<size_t>(ndim < 0 ? 0 : ndim)); }
  template <class T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  std::string str() const;  // "float32[4, 128] cuda:0"
};

// An owning tensor: contiguous memory allocated on its device, freed when the
// last copy goes away. CUDA memory is stream-ordered (lowbit/allocator.h): it
// is allocated for `stream` and given back on that stream, without waiting.
class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(Shape shape, DType dtype, Device device = Device::cpu(), Stream stream = {});
  static Tensor empty(std::initializer_list<int64_t> shape, DType dtype, Device device = Device::cpu(),
                      Stream stream = {}) {
    return empty(Shape(shape.begin(), shape.size()), dtype, device, stream);
  }
  // A tensor on `device` holding a copy of host `values`, complete on return
  // and usable from any stream (for tables made once and kept; the upload
  // waits for itself, so don't call it per op).
  static Tensor constant(const void* values, Shape shape, DType dtype, Device device);
  static Tensor constant(const void* values, std::initializer_list<int64_t> shape, DType dtype, Device device) {
    return constant(values, Shape(shape.begin(), shape.size()), dtype, device);
  }
  // A copy of `src` (any device, contiguous) on `device`, ordered on `stream`:
  // complete when this returns for a host destination, enqueued otherwise.
  static Tensor copy_of(const TensorRef& src, Device device, Stream stream = {});

  const TensorRef& ref() const { return ref_; }
  operator const TensorRef&() const { return ref_; }  // NOLINT: a Tensor is usable wherever a view is
  bool defined() const { return storage_ != nullptr || ref_.present(); }
  void* data() const { return ref_.data; }
  template <class T>
  T* ptr() const {
    return static_cast<T*>(ref_.data);
  }
  DType dtype() const { return ref_.dtype; }
  Device device() const { return ref_.device; }
  int ndim() const { return ref_.ndim; }
  int64_t numel() const { return ref_.numel(); }
  size_t nbytes() const { return ref_.nbytes(); }
  Shape sizes() const { return ref_.sizes(); }
  int64_t size(int dim) const { return ref_.size(dim); }
  Tensor to(Device device, Stream stream = {}) const { return copy_of(ref_, device, stream); }
  // The same memory seen with another shape of equal element count.
  Tensor reshaped(Shape shape) const;
  // The owner of the memory (its deleter tells who allocated it).
  const std::shared_ptr<void>& storage() const { return storage_; }
  // A tensor over `storage`, laid out as `view` (contiguous, data at storage's start).
  static Tensor adopt(std::shared_ptr<void> storage, const TensorRef& view);

 private:
  std::shared_ptr<void> storage_;
  TensorRef ref_;
};

// Copies src into dst (same dtype and element count, both contiguous, any
// devices), ordered on `stream`: complete on return when dst is host memory,
// enqueued only otherwise (a host source may be reused on return).
void copy(const TensorRef& dst, const TensorRef& src, Stream stream = {});

}  // namespace lowbit
