// absmax_center on CUDA: mean = (float)(deterministic_sum(values) / n) in the
// tree order of src/core/reduce.h, then values -= mean (fp32), in place.
//
// One launch per tree level: a CTA of 256 threads reduces a chunk of
// kTreeChunk = 1024 values exactly as tree_sum_chunk does (zero-padded):
// thread t forms (x[t] + x[t+512]) + (x[t+256] + x[t+768]) (the s = 512 and
// s = 256 steps), shared memory halves down to 64 values, and warp 0 does
// s = 32 from shared memory and s = 16..1 with __shfl_down_sync. Level sums
// (double) live in the workspace; the last launch subtracts the mean.
#include <cuda_runtime.h>

#include "core/reduce.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/quant/ops.h"

namespace lowbit::cuda {
namespace {

constexpr int kThreads = 256;
static_assert(core::kTreeChunk == 4 * kThreads, "a thread folds 4 values of a chunk");

// sums[c] = tree sum of x[c * 1024, +1024) (zero-padded past count).
template <class In>
__global__ void __launch_bounds__(kThreads) tree_level(const In* x, int64_t count, double* sums, int64_t chunks) {
  __shared__ double s[kThreads];
  const int t = threadIdx.x;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int64_t base = c * core::kTreeChunk;
    double v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = base + t + j * kThreads;
      v[j] = i < count ? static_cast<double>(x[i]) : 0.0;
    }
    s[t] = (v[0] + v[2]) + (v[1] + v[3]);  // s = 512 then s = 256
    __syncthreads();
    for (int h = kThreads / 2; h >= 64; h >>= 1) {
      if (t < h) s[t] = s[t] + s[t + h];
      __syncthreads();
    }
    if (t < 32) {
      double w = s[t] + s[t + 32];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) w = w + __shfl_down_sync(0xffffffffu, w, off);
      if (t == 0) sums[c] = w;
    }
    __syncthreads();  // s is rewritten by the next chunk
  }
}

// mean = (float)(total / n); values -= mean; block 0 stores the mean.
__global__ void __launch_bounds__(kThreads)
    subtract_mean(float* values, int64_t n, const double* total, float* mean_out) {
  const float mean = static_cast<float>(*total / static_cast<double>(n));
  if (blockIdx.x == 0 && threadIdx.x == 0) *mean_out = mean;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    values[i] = values[i] - mean;
  }
}

int64_t chunks_of(int64_t count) { return ceil_div(count, core::kTreeChunk); }

}  // namespace

// The partial sums of every level, as doubles: ceil(n/1024) + ceil(that/1024) + ... + 1.
size_t absmax_center_workspace(const AbsmaxCenterArgs& a) {
  int64_t count = a.values.numel(), total = 0;
  if (count <= 0) return 0;
  do {
    count = chunks_of(count);
    total += count;
  } while (count > 1);
  return static_cast<size_t>(total) * sizeof(double);
}

void absmax_center(const AbsmaxCenterArgs& a, void* workspace, Stream stream) {
  const char* op = AbsmaxCenterArgs::kName;
  const int64_t n = a.values.numel();
  if (n == 0) return;
  DeviceGuard guard(a.values.device.index, op);
  const cudaStream_t s = to_cuda(stream);
  float* values = a.values.ptr<float>();
  double* level = static_cast<double*>(workspace);

  int64_t chunks = chunks_of(n);
  {
    auto* kernel = &tree_level<float>;
    const int grid = persistent_grid(kernel, kThreads, 0, chunks, op);
    kernel<<<grid, kThreads, 0, s>>>(values, n, level, chunks);
    check_launch(op, "tree_level");
  }
  while (chunks > 1) {
    const int64_t next = chunks_of(chunks);
    auto* kernel = &tree_level<double>;
    const int grid = persistent_grid(kernel, kThreads, 0, next, op);
    kernel<<<grid, kThreads, 0, s>>>(level, chunks, level + chunks, next);
    check_launch(op, "tree_level");
    level += chunks;
    chunks = next;
  }
  auto* kernel = &subtract_mean;
  const int grid = persistent_grid(kernel, kThreads, 0, ceil_div(n, kThreads), op);
  kernel<<<grid, kThreads, 0, s>>>(values, n, level, a.mean.ptr<float>());
  check_launch(op, "subtract_mean");
}

}  // namespace lowbit::cuda
