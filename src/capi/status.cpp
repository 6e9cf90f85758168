// Library-level C entry points: errors, status names, version, devices.
#include <string>

#include "capi/capi.h"
#include "lowbit/device.h"

namespace lowbit::capi {
namespace {

// The C enum mirrors ErrorCode value for value; guarded() casts between them.
#define LOWBIT_SAME_CODE(c, e) static_assert(static_cast<int>(c) == static_cast<int>(ErrorCode::e))
LOWBIT_SAME_CODE(LOWBIT_OK, ok);
LOWBIT_SAME_CODE(LOWBIT_INVALID_ARGUMENT, invalid_argument);
LOWBIT_SAME_CODE(LOWBIT_UNSUPPORTED_DTYPE, unsupported_dtype);
LOWBIT_SAME_CODE(LOWBIT_DEVICE_MISMATCH, device_mismatch);
LOWBIT_SAME_CODE(LOWBIT_NO_BACKEND, no_backend);
LOWBIT_SAME_CODE(LOWBIT_OUT_OF_MEMORY, out_of_memory);
LOWBIT_SAME_CODE(LOWBIT_DEVICE_ERROR, device_error);
LOWBIT_SAME_CODE(LOWBIT_IO_ERROR, io_error);
LOWBIT_SAME_CODE(LOWBIT_FORMAT_ERROR, format_error);
LOWBIT_SAME_CODE(LOWBIT_INTERNAL, internal);
#undef LOWBIT_SAME_CODE

thread_local std::string t_message;
// Set instead of t_message when the message itself could not be allocated.
thread_local const char* t_fixed_message = nullptr;

}  // namespace

void set_last_error(std::initializer_list<const char*> parts) noexcept {
  t_fixed_message = nullptr;
  try {
    t_message.clear();
    for (const char* p : parts) t_message += p ? p : "";
  } catch (...) {
    t_fixed_message = "lowbit: out of memory while recording an error message";
  }
}

void clear_last_error() noexcept {
  t_fixed_message = nullptr;
  t_message.clear();
}

const char* last_error() noexcept { return t_fixed_message ? t_fixed_message : t_message.c_str(); }

}  // namespace lowbit::capi

extern "C" {

const char* lowbit_last_error(void) { return lowbit::capi::last_error(); }

const char* lowbit_status_name(lowbit_status status) {
  const int v = lowbit::capi::c_enum_value(status);
  if (v < LOWBIT_OK || v > LOWBIT_INTERNAL) return "unknown";
  return lowbit::error_code_name(static_cast<lowbit::ErrorCode>(v));
}

const char* lowbit_version(void) { return LOWBIT_VERSION_STRING; }

int lowbit_cuda_device_count(void) {
  int count = 0;
  const lowbit_status s =
      lowbit::capi::guarded("lowbit_cuda_device_count", [&] { count = lowbit::cuda_device_count(); });
  return s == LOWBIT_OK ? count : 0;
}

}  // extern "C"
