#include "core/check.h"

#include <limits>

namespace lowbit::core {

void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

std::string shape_str(Shape shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string shape_str(const TensorRef& t) { return shape_str(t.sizes()); }

int64_t checked_numel(const char* op, const char* name, Shape shape, DType dtype) {
  // At most this many elements, so that their bytes (dtype_storage_bytes) fit
  // in int64_t; packed kinds take fewer bytes than elements.
  const int64_t max = std::numeric_limits<int64_t>::max();
  const int64_t limit = dtype_bits(dtype) >= 8 ? max / dtype_bits(dtype) * 8 : max;
  int64_t product = 1;  // of the non-zero extents
  bool empty = false, fits = true;
  for (size_t i = 0; i < shape.size(); ++i) {
    LOWBIT_REQUIRE(shape[i] >= 0, ErrorCode::invalid_argument, op, ": ", name, " extent ", i, " must be >= 0 (got ",
                   shape[i], ", shape ", shape_str(shape), ")");
    if (shape[i] == 0) {
      empty = true;
    } else if (fits && product <= limit / shape[i]) {
      product *= shape[i];
    } else {
      fits = false;
    }
  }
  LOWBIT_REQUIRE(fits, ErrorCode::invalid_argument, op, ": ", name, " shape ", shape_str(shape),
                 " is too large: the product of its non-zero extents must be at most ", limit, " for ",
                 dtype_name(dtype), " (its size in bytes must fit in int64)");
  return empty ? 0 : product;
}

std::string dtypes_str(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType d : dtypes) s += (s.empty() ? "" : ", ") + std::string(dtype_name(d));
  return s;
}

void require_present(const char* op, const char* name, const TensorRef& t) {
  LOWBIT_REQUIRE(t.present(), ErrorCode::invalid_argument, op, ": ", name, " is required (got none)");
  LOWBIT_REQUIRE(t.ndim <= kMaxDims, ErrorCode::invalid_argument, op, ": ", name, " must have at most ", kMaxDims,
                 " dimensions (got ", t.ndim, ")");
  checked_numel(op, name, t.sizes(), t.dtype);
  LOWBIT_REQUIRE(t.data != nullptr || t.numel() == 0, ErrorCode::invalid_argument, op, ": ", name,
                 " has a null data pointer for ", t.numel(), " elements");
}

void require_dtype(const char* op, const char* name, const TensorRef& t, std::initializer_list<DType> allowed) {
  for (DType d : allowed) {
    if (t.dtype == d) return;
  }
  fail(ErrorCode::unsupported_dtype, cat(op, ": ", name, " dtype must be ",
                                         allowed.size() == 1 ? "" : "one of ", dtypes_str(allowed), " (got ",
                                         dtype_name(t.dtype), ")"));
}

void require_contiguous(const char* op, const char* name, const TensorRef& t) {
  LOWBIT_REQUIRE(t.is_contiguous(), ErrorCode::invalid_argument, op, ": ", name,
                 " must be contiguous (got a strided view of shape ", shape_str(t), ")");
}

void require_numel(const char* op, const char* name, const TensorRef& t, int64_t expected) {
  LOWBIT_REQUIRE(t.numel() == expected, ErrorCode::invalid_argument, op, ": ", name, " must have ", expected,
                 " elements (got ", t.numel(), ", shape ", shape_str(t), ")");
}

void require_shape(const char* op, const char* name, const TensorRef& t, std::initializer_list<int64_t> expected) {
  bool ok = t.ndim == static_cast<int>(expected.size());
  int i = 0;
  for (int64_t e : expected) ok = ok && t.shape[static_cast<size_t>(i++)] == e;
  if (ok) return;
  std::string want = "[";
  i = 0;
  for (int64_t e : expected) want += (i++ ? ", " : "") + std::to_string(e);
  fail(ErrorCode::invalid_argument, cat(op, ": ", name, " must have shape ", want, "] (got ", shape_str(t), ")"));
}

void require_same_device(const char* op, std::initializer_list<std::pair<const char*, const TensorRef*>> tensors) {
  const std::pair<const char*, const TensorRef*>* first = nullptr;
  for (const auto& p : tensors) {
    if (!p.second->present()) continue;
    if (!first) {
      first = &p;
      continue;
    }
    LOWBIT_REQUIRE(p.second->device == first->second->device, ErrorCode::device_mismatch, op, ": ", p.first,
                   " must be on ", first->second->device.str(), " like ", first->first, " (got ",
                   p.second->device.str(), ")");
  }
}

void require_blocksize(const char* op, const char* name, int64_t blocksize, int64_t min, int64_t max) {
  const bool pow2 = blocksize > 0 && (blocksize & (blocksize - 1)) == 0;
  LOWBIT_REQUIRE(pow2 && blocksize >= min && blocksize <= max, ErrorCode::invalid_argument, op, ": ", name,
                 " must be a power of two from ", min, " to ", max, " (got ", blocksize, ")");
}

}  // namespace lowbit::core
