// Argument checking for op front ends. Every message names the op, the
// argument, what was expected and what was given:
//   "quantize_4bit: blocksize must be one of 32, 64, ..., 4096 (got 48)"
#pragma once

#include <charconv>
#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "lowbit/error.h"
#include "lowbit/tensor.h"

namespace lowbit::core {

// Appends one part of a message. Numbers go through std::to_chars, not
// iostreams: messages are built where a host process may hold another copy of
// the C++ runtime's locale machinery (seen: a Python extension built by a
// toolchain that links libstdc++ statically, loaded next to torch), and
// to_chars needs no locale. Other types fall back to operator<<.
inline void append_part(std::string& s, std::string_view v) { s += v; }
inline void append_part(std::string& s, const char* v) { s += v ? v : "(null)"; }
inline void append_part(std::string& s, char v) { s += v; }
inline void append_part(std::string& s, bool v) { s += v ? "true" : "false"; }
template <class T>
void append_part(std::string& s, const T& v) {
  if constexpr (std::is_arithmetic_v<T>) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof(buf), v);
    s.append(buf, r.ptr);
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    s += std::string_view(v);
  } else {
    std::ostringstream os;
    os << v;
    s += os.str();
  }
}

template <class... T>
std::string cat(T&&... parts) {
  std::string s;
  (append_part(s, parts), ...);
  return s;
}

[[noreturn]] void fail(ErrorCode code, const std::string& message);

#define LOWBIT_REQUIRE(cond, code, ...)                                 \
  do {                                                                  \
    if (!(cond)) ::lowbit::core::fail((code), ::lowbit::core::cat(__VA_ARGS__)); \
  } while (0)

std::string shape_str(Shape shape);
std::string shape_str(const TensorRef& t);

// The element count of a tensor of `shape` and `dtype`, checked: every extent
// >= 0, and the product of the extents (empty ones counted as 1, so that no
// partial product a kernel forms can wrap either) and its size in bytes fit in
// int64_t. Every conversion to a TensorRef and every op argument goes through
// it; throws invalid_argument naming op, argument and shape.
int64_t checked_numel(const char* op, const char* name, Shape shape, DType dtype);
std::string dtypes_str(std::initializer_list<DType> dtypes);

void require_present(const char* op, const char* name, const TensorRef& t);
void require_dtype(const char* op, const char* name, const TensorRef& t, std::initializer_list<DType> allowed);
void require_contiguous(const char* op, const char* name, const TensorRef& t);
void require_numel(const char* op, const char* name, const TensorRef& t, int64_t expected);
void require_shape(const char* op, const char* name, const TensorRef& t, std::initializer_list<int64_t> expected);
// All present tensors on the device of the first one.
void require_same_device(const char* op, std::initializer_list<std::pair<const char*, const TensorRef*>> tensors);
// blocksize in {32, 64, ..., 4096}
void require_blocksize(const char* op, const char* name, int64_t blocksize, int64_t min = 32, int64_t max = 4096);

inline constexpr std::initializer_list<DType> kFloatDTypes = {DType::f32, DType::f16, DType::bf16};

}  // namespace lowbit::core
