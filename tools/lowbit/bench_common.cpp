// Timers and helpers shared by the `lowbit bench` subcommands (bench_common.h).
#include "bench_common.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "lowbit/error.h"

namespace lowbit::cli::bench {

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
    throw Error(ErrorCode::device_error, core::cat("bench: ", what, " failed: ", cudaGetErrorString(e)));
  }
}

CudaTimer::CudaTimer(cudaStream_t stream, size_t flush_bytes) : stream_(stream), flush_bytes_(flush_bytes) {
  cuda_ok(cudaMalloc(&flush_, flush_bytes_), "cudaMalloc(flush buffer)");
  cuda_ok(cudaEventCreate(&start_), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&stop_), "cudaEventCreate");
}

CudaTimer::~CudaTimer() {
  cudaFree(flush_);
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
}

double CudaTimer::time_ms(const std::function<void()>& fn, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  cuda_ok(cudaStreamSynchronize(stream_), "warm-up");
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    cuda_ok(cudaMemsetAsync(flush_, r & 0xff, flush_bytes_, stream_), "L2 flush");
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

}  // namespace lowbit::cli::bench
