#include "cuda/common/memory.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/allocation.h"
#include "core/check.h"
#include "cuda/common/check.h"

namespace lowbit::cuda {
namespace {

using core::cat;

constexpr int kMaxDevices = 64;

// One pool per device, made at its first allocation and kept for the
// process; it keeps freed memory for reuse until empty_cache.
cudaMemPool_t pool_of(int index) {
  static std::mutex mutex;
  static std::array<cudaMemPool_t, kMaxDevices> pools{};
  LOWBIT_REQUIRE(index >= 0 && index < kMaxDevices, ErrorCode::invalid_argument, "cuda: device index ", index,
                 " out of range [0, ", kMaxDevices, ")");
  std::lock_guard<std::mutex> lock(mutex);
  cudaMemPool_t& pool = pools[static_cast<size_t>(index)];
  if (pool == nullptr) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = index;
    cudaMemPool_t made = nullptr;
    check(cudaMemPoolCreate(&made, &props), "cuda", "cudaMemPoolCreate");
    uint64_t keep_all = UINT64_MAX;
    check(cudaMemPoolSetAttribute(made, cudaMemPoolAttrReleaseThreshold, &keep_all), "cuda",
          "cudaMemPoolSetAttribute(release threshold)");
    pool = made;
  }
  return pool;
}

[[noreturn]] void out_of_memory(size_t bytes, int index, cudaError_t e) {
  (void)cudaGetLastError();  // not sticky: the device stays usable
  core::fail(e == cudaErrorMemoryAllocation || e == cudaSuccess ? ErrorCode::out_of_memory : ErrorCode::device_error,
             cat("cuda: allocation of ", bytes, " bytes on cuda:", index, " failed: ",
                 e == cudaSuccess ? "the allocator returned no memory" : cudaGetErrorString(e)));
}

// Runs `give_back` with device `index` current, then restores the caller's;
// deleters run from Tensor destructors, so nothing here throws.
template <class F>
void on_device(int index, F&& give_back) noexcept {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) current = -1;
  if (current != index) (void)cudaSetDevice(index);
  give_back();
  if (current >= 0 && current != index) (void)cudaSetDevice(current);
  (void)cudaGetLastError();
}

struct PoolFree {
  int index;
  cudaStream_t stream;
  void operator()(void* p) const noexcept {
    on_device(index, [&] { (void)cudaFreeAsync(p, stream); });
  }
};

struct UserFree {
  CudaAllocator allocator;
  size_t bytes;
  int index;
  void* stream;
  void operator()(void* p) const noexcept {
    on_device(index, [&] { allocator.deallocate(allocator.ctx, p, bytes, index, stream); });
  }
};

// Host bytes travel to the device as kernel parameters: no staging copy, so
// nothing waits, and the launch can be captured in a CUDA graph.
constexpr size_t kParamChunk = 2048;
struct ParamBytes {
  unsigned char b[kParamChunk];
};

__global__ void store_param_bytes(unsigned char* dst, ParamBytes src, unsigned n) {
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src.b[i];
}

// Host sources up to this size go through kernel parameters.
constexpr size_t kParamUploadMax = 16 * kParamChunk;

void upload(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  for (size_t done = 0; done < bytes; done += kParamChunk) {
    const size_t n = std::min(kParamChunk, bytes - done);
    ParamBytes chunk;
    std::memcpy(chunk.b, static_cast<const unsigned char*>(src) + done, n);
    store_param_bytes<<<1, 256, 0, stream>>>(static_cast<unsigned char*>(dst) + done, chunk, static_cast<unsigned>(n));
    check_launch("copy", "store_param_bytes");
  }
}

}  // namespace

std::shared_ptr<void> allocate(size_t bytes, int index, Stream stream) {
  DeviceGuard guard(index, "cuda");
  const CudaAllocator user = core::user_cuda_allocator();
  if (user.present()) {
    void* p = user.allocate(user.ctx, bytes, index, stream.handle);
    if (p == nullptr) out_of_memory(bytes, index, cudaSuccess);
    return std::shared_ptr<void>(p, UserFree{user, bytes, index, stream.handle});
  }
  void* p = nullptr;
  const cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, pool_of(index), to_cuda(stream));
  if (e != cudaSuccess) out_of_memory(bytes, index, e);
  return std::shared_ptr<void>(p, PoolFree{index, to_cuda(stream)});
}

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  const int index = dst_device.is_cuda() ? dst_device.index : src_device.index;
  DeviceGuard guard(index, "copy");
  const cudaStream_t s = to_cuda(stream);
  if (src_device.is_cpu() && dst_device.is_cuda() && bytes <= kParamUploadMax) {
    upload(dst, src, bytes, s);
    return;
  }
  // The message is built only on failure: copies are on hot paths.
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
  if (e != cudaSuccess) {
    check(e, "copy",
          cat("cudaMemcpyAsync of ", bytes, " bytes from ", src_device.str(), " to ", dst_device.str()).c_str());
  }
  // The host reads a host destination next; a pageable host source is
  // consumed before cudaMemcpyAsync returns.
  if (dst_device.is_cpu()) check(cudaStreamSynchronize(s), "copy", "cudaStreamSynchronize");
}

namespace {

// This thread's stream-capture mode set to relaxed while alive: work on a
// stream no capture records (a constant's upload and its wait) may then run
// while another stream is being captured in global mode.
class RelaxedCapture {
 public:
  RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace

// On a stream of its own, so a CUDA graph being captured on another stream
// neither records the upload nor is disturbed by the wait.
std::shared_ptr<void> constant(const void* src, size_t bytes, int index) {
  DeviceGuard guard(index, "cuda");
  const RelaxedCapture relaxed;
  static std::mutex mutex;
  static std::array<cudaStream_t, kMaxDevices> streams{};
  std::lock_guard<std::mutex> lock(mutex);
  cudaStream_t& s = streams[static_cast<size_t>(index)];
  if (s == nullptr) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cuda", "cudaStreamCreateWithFlags");
  void* p = nullptr;
  const size_t n = std::max<size_t>(bytes, 1);
  const cudaError_t e = cudaMallocFromPoolAsync(&p, n, pool_of(index), s);
  if (e != cudaSuccess) out_of_memory(n, index, e);
  std::shared_ptr<void> owned(p, PoolFree{index, s});
  if (bytes > kParamUploadMax) {
    check(cudaMemcpyAsync(p, src, bytes, cudaMemcpyHostToDevice, s), "cuda", "cudaMemcpyAsync(constant upload)");
  } else if (bytes > 0) {
    upload(p, src, bytes, s);
  }
  check(cudaStreamSynchronize(s), "cuda", "cudaStreamSynchronize(constant upload)");
  return owned;
}

void empty_cache(int index) {
  DeviceGuard guard(index, "empty_cuda_cache");
  check(cudaMemPoolTrimTo(pool_of(index), 0), "empty_cuda_cache", "cudaMemPoolTrimTo");
}

}  // namespace lowbit::cuda
