// The timers of the benchmarks (timer.h).
#include "timer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "internals.h"
#include "lowbit/error.h"

namespace lowbit::bench {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double CpuTimer::time_ms(const std::function<void()>& fn, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();  // first-touch of outputs, thread pool start
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

double CpuTimer::copy_gbps(int64_t bytes, int reps) {
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(static_cast<size_t>(bytes), 2);
  const double ms = time_ms(
      [&] {
#pragma omp parallel
        {
          const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
          const int64_t lo = bytes * t / nt, hi = bytes * (t + 1) / nt;
          std::memcpy(b.data() + lo, a.data() + lo, static_cast<size_t>(hi - lo));
        }
      },
      reps, 1);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e6);
}

#if defined(LOWBIT_WITH_CUDA)
void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(ErrorCode::device_error, cat("bench: ", what, " failed: ", cudaGetErrorString(e)));
  }
}

#if defined(LOWBIT_WITH_CUBLAS)
void cublas_ok(cublasStatus_t s, const char* what, const char* op) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw Error(ErrorCode::device_error, cat(op, ": ", what, " failed: ", cublasGetStatusString(s)));
  }
}
#endif

CudaTimer::CudaTimer(cudaStream_t stream, size_t flush_bytes) : stream_(stream), flush_bytes_(flush_bytes) {
  try {
    cuda_ok(cudaMalloc(&flush_, flush_bytes_), "cudaMalloc(flush buffer)");
    cuda_ok(cudaEventCreate(&start_), "cudaEventCreate");
    cuda_ok(cudaEventCreate(&stop_), "cudaEventCreate");
#if defined(LOWBIT_WITH_CUBLAS)
    // Zeroed once (the only write); each flush then reads it as floats.
    cuda_ok(cudaMemsetAsync(flush_, 0, flush_bytes_, stream_), "cudaMemsetAsync(flush buffer)");
    cuda_ok(cudaMalloc(reinterpret_cast<void**>(&flush_sum_), sizeof(float)), "cudaMalloc(flush result)");
    cublas_ok(cublasCreate(&cublas_), "cublasCreate");
    cublas_ok(cublasSetStream(cublas_, stream_), "cublasSetStream");
    cublas_ok(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_DEVICE), "cublasSetPointerMode");
    cuda_ok(cudaStreamSynchronize(stream_), "flush buffer setup");
#endif
  } catch (...) {
    release();
    throw;
  }
}

CudaTimer::~CudaTimer() { release(); }

void CudaTimer::release() noexcept {
#if defined(LOWBIT_WITH_CUBLAS)
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  cudaFree(flush_sum_);
  cublas_ = nullptr;
  flush_sum_ = nullptr;
#endif
  cudaFree(flush_);
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (stop_ != nullptr) cudaEventDestroy(stop_);
  flush_ = nullptr;
  start_ = stop_ = nullptr;
}

std::string CudaTimer::flush_text() const {
#if defined(LOWBIT_WITH_CUBLAS)
  return cat("L2 flushed (", flush_bytes_ >> 20, " MB read by cublasSasum: leaves L2 clean)");
#else
  return cat("L2 flushed (", flush_bytes_ >> 20,
             " MB memset: no cuBLAS in this build, so L2 is left dirty and small ops read slow)");
#endif
}

void CudaTimer::flush_l2([[maybe_unused]] int rep) {
#if defined(LOWBIT_WITH_CUBLAS)
  // A read-only pass over the whole buffer evicts what the last op left in L2
  // (dirty lines included: their write-back happens here, untimed) and leaves
  // only clean lines behind. cuBLAS takes an int count: long buffers go in chunks.
  const auto* data = static_cast<const float*>(flush_);
  const size_t total = flush_bytes_ / sizeof(float);
  constexpr size_t kChunk = size_t{1} << 30;
  for (size_t at = 0; at < total; at += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, total - at));
    cublas_ok(cublasSasum(cublas_, n, data + at, 1, flush_sum_), "L2 flush (cublasSasum)");
  }
#else
  cuda_ok(cudaMemsetAsync(flush_, rep & 0xff, flush_bytes_, stream_), "L2 flush");
#endif
}

double CudaTimer::time_ms(const std::function<void()>& fn, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  cuda_ok(cudaStreamSynchronize(stream_), "warm-up");
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    flush_l2(r);
    cuda_ok(cudaEventRecord(start_, stream_), "cudaEventRecord");
    fn();
    cuda_ok(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float t = 0.0f;
    cuda_ok(cudaEventElapsedTime(&t, start_, stop_), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  return median(ms);
}

double CudaTimer::copy_gbps(int64_t bytes, int reps) {
  void *a = nullptr, *b = nullptr;
  cuda_ok(cudaMalloc(&a, static_cast<size_t>(bytes)), "cudaMalloc(copy source)");
  cuda_ok(cudaMalloc(&b, static_cast<size_t>(bytes)), "cudaMalloc(copy destination)");
  cuda_ok(cudaMemsetAsync(a, 0x5a, static_cast<size_t>(bytes), stream_), "cudaMemset");
  double ms = 0.0;
  try {
    ms = time_ms(
        [&] { cuda_ok(cudaMemcpyAsync(b, a, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_), "copy"); },
        reps, 2);
  } catch (...) {
    cudaFree(a);
    cudaFree(b);
    throw;
  }
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e6);
}
#endif

}  // namespace lowbit::bench
