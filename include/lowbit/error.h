// lowbit::Error: every failure of the library is one of these (C++), or a
// status code with a thread-local message (C ABI).
#pragma once

#include <stdexcept>
#include <string>

namespace lowbit {

// Values are shared with the C ABI's lowbit_status (include/lowbit/c/lowbit.h).
enum class ErrorCode : int {
  ok = 0,
  invalid_argument = 1,   // a shape, size, option or layout the op does not accept
  unsupported_dtype = 2,  // a dtype the op (or this backend) does not handle
  device_mismatch = 3,    // tensors of one call on different devices
  no_backend = 4,         // no backend built or registered for the device / op
  out_of_memory = 5,
  device_error = 6,       // the CUDA runtime reported a failure
  io_error = 7,           // a file could not be read or written
  format_error = 8,       // a file or serialized state is malformed
  internal = 9,
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace lowbit
