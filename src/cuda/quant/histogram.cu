// histogram_scatter_add_2d on CUDA: one thread an element (grid-striding),
// atomicAdd into the histogram. The atomics land in no fixed order, so sums
// agree with the CPU's within fp32 rounding. An index outside the histogram
// is skipped: raising it would need the host to wait for the device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/quant/ops.h"

namespace lowbit::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride beyond: enough CTAs to fill any GPU

__global__ void __launch_bounds__(kThreads)
    scatter_add_2d(float* histogram, int64_t rows, int64_t cols, const int32_t* index1, const int32_t* index2,
                   const float* source, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const int32_t r = index1[i], c = index2[i];
    if (r < 0 || r >= rows || c < 0 || c >= cols) continue;
    atomicAdd(histogram + r * cols + c, source[i]);
  }
}

}  // namespace

void histogram_scatter_add_2d(const HistogramScatterAdd2dArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = HistogramScatterAdd2dArgs::kName;
  const int64_t n = a.source.numel();
  if (n == 0) return;
  DeviceGuard guard(a.histogram.device.index, op);
  const int grid = static_cast<int>(std::min(ceil_div(n, int64_t{kThreads}), kMaxBlocks));
  scatter_add_2d<<<grid, kThreads, 0, to_cuda(stream)>>>(a.histogram.ptr<float>(), a.histogram.size(0),
                                                          a.histogram.size(1), a.index1.ptr<const int32_t>(),
                                                          a.index2.ptr<const int32_t>(), a.source.ptr<const float>(), n);
  check_launch(op, "scatter_add_2d");
}

}  // namespace lowbit::cuda
