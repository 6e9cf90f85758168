// CUDA error handling for the CUDA backend: every runtime call and every
// launch is checked, and a failure becomes lowbit::Error(device_error) whose
// message names the op, what failed and the runtime's reason:
//   "quantize_blockwise: launch of quantize_blocks failed: invalid argument"
#pragma once

#include <cuda_runtime.h>

#include "core/check.h"
#include "lowbit/error.h"
#include "lowbit/stream.h"

namespace lowbit::cuda {

inline cudaStream_t to_cuda(Stream stream) { return static_cast<cudaStream_t>(stream.handle); }

// Throws device_error "<op>: <what> failed: <reason>" unless `e` is success.
inline void check(cudaError_t e, const char* op, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so later launch checks do not report it again
  core::fail(ErrorCode::device_error, core::cat(op, ": ", what, " failed: ", cudaGetErrorString(e)));
}

// After a <<<...>>> launch: reports a bad configuration or an earlier sticky error.
inline void check_launch(const char* op, const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return;
  core::fail(ErrorCode::device_error, core::cat(op, ": launch of ", kernel, " failed: ", cudaGetErrorString(e)));
}

// Makes `index` the current device for the scope (kernels must be launched on
// the device that owns the tensors and the stream).
class DeviceGuard {
 public:
  // A device that is not there (no GPU, no driver, index too large) is
  // no_backend, like a build without CUDA; other failures are device_error.
  DeviceGuard(int index, const char* op) {
    int current = 0;
    cudaError_t e = cudaGetDevice(&current);
    if (e == cudaSuccess && current != index) {
      e = cudaSetDevice(index);
      if (e == cudaSuccess) previous_ = current;
    }
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice) {
      (void)cudaGetLastError();
      core::fail(ErrorCode::no_backend,
                 core::cat(op, ": no CUDA device cuda:", index, " on this machine (", cudaGetErrorString(e), ")"));
    }
    check(e, op, "cudaSetDevice");
  }
  ~DeviceGuard() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace lowbit::cuda
