// Typed access for the CPU quantization kernels: dispatch an op body on the
// float dtype of a tensor.
#pragma once

#include <utility>

#include "core/check.h"
#include "core/float_convert.h"
#include "lowbit/dtype.h"

namespace lowbit::core::cpu {

// Calls fn(T{}) with T the storage type of a float dtype (float, Half, BFloat16).
template <class Fn>
decltype(auto) with_float_type(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return std::forward<Fn>(fn)(float{});
    case DType::f16: return std::forward<Fn>(fn)(Half{});
    case DType::bf16: return std::forward<Fn>(fn)(BFloat16{});
    default: break;
  }
  fail(ErrorCode::unsupported_dtype, cat(op, ": dtype must be one of float32, float16, bfloat16 (got ",
                                         dtype_name(dtype), ")"));
}

}  // namespace lowbit::core::cpu
