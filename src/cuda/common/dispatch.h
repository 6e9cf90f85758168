// Dtype dispatch for CUDA launchers: a ladder that throws when it falls through.
#pragma once

#include <utility>

#include "core/check.h"
#include "core/float_convert.h"
#include "lowbit/dtype.h"

namespace lowbit::cuda {

// Calls fn(T{}) with T the storage type of a float dtype (float, core::Half,
// core::BFloat16); throws unsupported_dtype for any other dtype.
template <class Fn>
void with_float_type(DType dtype, const char* op, const char* arg, Fn&& fn) {
  switch (dtype) {
    case DType::f32: std::forward<Fn>(fn)(float{}); return;
    case DType::f16: std::forward<Fn>(fn)(core::Half{}); return;
    case DType::bf16: std::forward<Fn>(fn)(core::BFloat16{}); return;
    default: break;
  }
  core::fail(ErrorCode::unsupported_dtype,
             core::cat(op, ": ", arg, " dtype must be one of float32, float16, bfloat16 on cuda (got ",
                       dtype_name(dtype), ")"));
}

// The 16 values of a 4-bit table, passed to kernels by value.
struct Table16 {
  float v[16];
};

}  // namespace lowbit::cuda
