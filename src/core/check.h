// Argument checking for op front ends. Every message names the op, the
// argument, what was expected and what was given:
//   "quantize_4bit: blocksize must be one of 32, 64, ..., 4096 (got 48)"
#pragma once

#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "lowbit/error.h"
#include "lowbit/tensor.h"

namespace lowbit::core {

template <class... T>
std::string cat(T&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<T>(parts));
  return os.str();
}

[[noreturn]] void fail(ErrorCode code, const std::string& message);

#define LOWBIT_REQUIRE(cond, code, ...)                                 \
  do {                                                                  \
    if (!(cond)) ::lowbit::core::fail((code), ::lowbit::core::cat(__VA_ARGS__)); \
  } while (0)

std::string shape_str(const TensorRef& t);
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
