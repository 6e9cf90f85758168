// percentile_clipping on CUDA (docs/optim.md, "Percentile clipping"): the
// gradient's squared norm in float64, deterministic, then recorded in
// gnorm_vec.
//
// Two kernels: norm_partials has each CTA sum its grid-strided tiles (8
// consecutive elements a thread, 16-byte loads where aligned) and write its
// partial to the workspace; record_norm, one CTA, adds the partials in one
// fixed order, writes the slots and, where asked, the step's scale (one slot's
// sorted rank a thread). No atomics, no memset, no host round
// trip: every run and every graph replay gives the same bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/float_convert.h"
#include "core/optim_percentile.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/vec.cuh"
#include "cuda/optim/access.cuh"
#include "cuda/optim/block_sum.cuh"
#include "cuda/optim/ops.h"

namespace lowbit::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kItems = 8;  // a 16-bit chunk is one 16-byte word, an fp32 chunk two
constexpr int kTile = kThreads * kItems;
constexpr int64_t kMaxPartials = 1024;  // about one full wave of an H100 (132 SMs x 8)

int64_t partial_count(int64_t n) { return std::min(ceil_div(n, kTile), kMaxPartials); }

template <class T>
__global__ void __launch_bounds__(kThreads) norm_partials(const T* g, int64_t n, bool vec, double* partials) {
  double sum = 0.0, unused = 0.0;
  const int64_t tiles = ceil_div(n, kTile);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t base = tile * kTile + static_cast<int64_t>(threadIdx.x) * kItems;
    const int64_t rem = n - base;
    const int valid = rem >= kItems ? kItems : (rem > 0 ? static_cast<int>(rem) : 0);
    if (valid == 0) continue;
    Chunk<T, kItems> c;
    optim::load_in(c, g + base, valid, vec);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (i < valid) sum += core::optim::squared_term(core::to_f32(c.elem[i]));
    }
  }
  optim::block_sum<kThreads>(sum, unused);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void __launch_bounds__(kThreads)
    record_norm(const double* partials, int count, int64_t step, float* gnorm_vec, float* scale, int64_t percentile) {
  constexpr int64_t kHistory = PercentileClippingArgs::kHistory;
  static_assert(kHistory <= kThreads, "one slot a thread");
  __shared__ float s_vec[kHistory];
  __shared__ float s_norm, s_clip;
  double sum = 0.0, unused = 0.0;
  for (int i = threadIdx.x; i < count; i += kThreads) sum += partials[i];
  optim::block_sum<kThreads>(sum, unused);
  if (threadIdx.x == 0) {
    s_norm = static_cast<float>(sum);
    core::optim::record_gnorm(gnorm_vec, step, s_norm);
  }
  if (scale == nullptr) return;
  __syncthreads();
  const int i = static_cast<int>(threadIdx.x);
  if (i < kHistory) s_vec[i] = step == 1 || i == step % kHistory ? s_norm : gnorm_vec[i];  // slots not rewritten
  __syncthreads();
  if (i < kHistory && core::optim::sorted_rank(s_vec, i) == percentile) s_clip = s_vec[i];
  __syncthreads();
  if (i == 0) *scale = core::optim::clip_scale(s_vec[step % kHistory], s_clip);
}

template <class T>
void launch(const PercentileClippingArgs& a, void* workspace, cudaStream_t stream) {
  const char* op = PercentileClippingArgs::kName;
  const int64_t n = a.grad.numel();
  const int count = static_cast<int>(partial_count(n));
  auto* partials = static_cast<double*>(workspace);
  if (count > 0) {
    const T* g = a.grad.ptr<const T>();
    norm_partials<T><<<count, kThreads, 0, stream>>>(g, n, aligned16(g), partials);
    check_launch(op, "norm_partials");
  }
  float* scale = a.scale.present() ? a.scale.ptr<float>() : nullptr;
  record_norm<<<1, kThreads, 0, stream>>>(partials, count, a.step, a.gnorm_vec.ptr<float>(), scale, a.percentile);
  check_launch(op, "record_norm");
}

}  // namespace

size_t percentile_clipping_workspace(const PercentileClippingArgs& a) {
  return static_cast<size_t>(partial_count(a.grad.numel())) * sizeof(double);
}

void percentile_clipping(const PercentileClippingArgs& a, void* workspace, Stream stream) {
  const char* op = PercentileClippingArgs::kName;
  DeviceGuard guard(a.grad.device.index, op);
  with_float_type(a.grad.dtype, op, "grad", [&](auto t) { launch<decltype(t)>(a, workspace, to_cuda(stream)); });
}

}  // namespace lowbit::cuda
