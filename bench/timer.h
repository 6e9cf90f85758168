// Timers that run a callable `reps` times and return the median. On the GPU
// each repetition is timed on its own with CUDA events around only the
// callable, after an untimed L2 flush that reads a buffer larger than L2
// (cublasSasum; a cudaMemsetAsync without cuBLAS, see CudaTimer); on the CPU
// with a steady clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#if defined(LOWBIT_WITH_CUDA)
#include <cuda_runtime.h>
#endif
#if defined(LOWBIT_WITH_CUBLAS)
#include <cublas_v2.h>
#endif

namespace lowbit::bench {

double median(std::vector<double> v);

// A device-independent timer.
class Timer {
 public:
  virtual ~Timer() = default;
  // The median milliseconds of `fn` over `reps` runs, after `warmup` untimed runs.
  virtual double time_ms(const std::function<void()>& fn, int reps, int warmup) = 0;
  // The machine's copy bandwidth in GB/s (bytes read + written) for a copy of `bytes`.
  virtual double copy_gbps(int64_t bytes, int reps) = 0;
};

// Steady clock; the copy is a memcpy split over the OpenMP threads.
class CpuTimer : public Timer {
 public:
  double time_ms(const std::function<void()>& fn, int reps, int warmup) override;
  double copy_gbps(int64_t bytes, int reps) override;
};

#if defined(LOWBIT_WITH_CUDA)
// Throws lowbit::Error(device_error) naming `what` when `e` is not cudaSuccess.
void cuda_ok(cudaError_t e, const char* what);
#if defined(LOWBIT_WITH_CUBLAS)
// Throws lowbit::Error(device_error) "<op>: <what> failed: ..." when `s` is not success.
void cublas_ok(cublasStatus_t s, const char* what, const char* op = "bench");
#endif

// CUDA events on `stream`; before each timed repetition an untimed flush of
// `flush_bytes` evicts L2. The copy is a device-to-device cudaMemcpyAsync
// timed the same way.
//
// The flush must leave L2 clean: a memset leaves about L2's size in dirty
// lines, and the next (timed) kernel pays for writing them back to DRAM.
// With cuBLAS (LOWBIT_WITH_CUBLAS) the buffer is zeroed once here and each
// flush only reads it: cublasSasum over it as floats, result to a device
// scalar (CUBLAS_POINTER_MODE_DEVICE), on `stream`, so no host sync. Without
// cuBLAS the flush is a cudaMemsetAsync of the buffer (dirty; flush_text says so).
class CudaTimer : public Timer {
 public:
  static constexpr size_t kDefaultFlushBytes = size_t{256} << 20;  // larger than an H100's or H200's L2
  explicit CudaTimer(cudaStream_t stream, size_t flush_bytes = kDefaultFlushBytes);
  ~CudaTimer() override;
  CudaTimer(const CudaTimer&) = delete;
  CudaTimer& operator=(const CudaTimer&) = delete;

  double time_ms(const std::function<void()>& fn, int reps, int warmup) override;
  double copy_gbps(int64_t bytes, int reps) override;
  size_t flush_bytes() const { return flush_bytes_; }
  // What the flush does, for a bench's header line: "L2 flushed (256 MB ...)".
  std::string flush_text() const;

 private:
  void flush_l2(int rep);  // untimed, enqueued on stream_
  void release() noexcept;

  cudaStream_t stream_;
  size_t flush_bytes_;
  void* flush_ = nullptr;
  cudaEvent_t start_{}, stop_{};
#if defined(LOWBIT_WITH_CUBLAS)
  cublasHandle_t cublas_ = nullptr;
  float* flush_sum_ = nullptr;  // cublasSasum's result, on the device
#endif
};
#endif

}  // namespace lowbit::bench
