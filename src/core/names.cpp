#include <string>

#include "lowbit/dtype.h"
#include "lowbit/error.h"

namespace lowbit {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::unsupported_dtype: return "unsupported_dtype";
    case ErrorCode::device_mismatch: return "device_mismatch";
    case ErrorCode::no_backend: return "no_backend";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::device_error: return "device_error";
    case ErrorCode::io_error: return "io_error";
    case ErrorCode::format_error: return "format_error";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

bool parse_dtype(std::string_view name, DType* out) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"f32", DType::f32},         {"fp32", DType::f32},          {"float", DType::f32},
      {"f16", DType::f16},         {"fp16", DType::f16},          {"half", DType::f16},
      {"bf16", DType::bf16},       {"e4m3", DType::f8_e4m3},      {"fp8_e4m3", DType::f8_e4m3},
      {"float8_e4m3", DType::f8_e4m3}, {"e5m2", DType::f8_e5m2},  {"fp8_e5m2", DType::f8_e5m2},
  };
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto d = static_cast<DType>(i);
    if (dtype_name(d) == name) {
      *out = d;
      return true;
    }
  }
  for (const Alias& a : kAliases) {
    if (a.name == name) {
      *out = a.dtype;
      return true;
    }
  }
  return false;
}

}  // namespace lowbit
