// optimizer_update_32bit on CUDA (docs/optim.md): the rules of
// core/optim_rules.h over the elements, the arithmetic the CPU does.
//
// Work layout:
//   - A CTA of kThreads threads takes tiles of kTile = kThreads * kItems
//     consecutive elements, grid-striding; thread t owns kItems consecutive
//     elements of a tile, moved as 16-byte words where its array is 16-byte
//     aligned (the tail and misaligned views element by element).
//   - max_unorm > 0 scales the update by a ratio of two norms over the whole
//     tensor, so that step is two kernels: update_norms writes each CTA's
//     share of the update's squared norm and of |p|^2 (float64, as the CPU
//     sums them) to the workspace; update_elements has every CTA add those
//     partials in one fixed order, so all CTAs and every run (a graph replay
//     too) agree on the ratio bit for bit, then applies the step. No atomics,
//     no memset, no host round trip.
//   - Compiled with --fmad=false (src/CMakeLists.txt): the rules' products
//     and sums are rounded separately, as on the CPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/float_convert.h"
#include "core/optim_rules.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/vec.cuh"
#include "cuda/optim/access.cuh"
#include "cuda/optim/block_sum.cuh"
#include "cuda/optim/ops.h"

namespace lowbit::cuda {
namespace {

using optim::block_sum;
using optim::load_in;
using optim::load_inout;
using optim::store_out;

constexpr int kThreads = 256;
constexpr int kItems = 8;  // a 16-bit chunk is one 16-byte word, an fp32 chunk two
constexpr int kTile = kThreads * kItems;
constexpr int64_t kMaxPartials = 1024;  // update_norms' CTAs: about one full wave of an H100 (132 SMs x 8)

int64_t partial_count(int64_t n) { return std::min(ceil_div(n, kTile), kMaxPartials); }

// The arrays of one update; s2 and s3 are null where the rule keeps none.
template <class T>
struct Arrays {
  const T* g;
  T* p;
  float* s1;
  float* s2;
  float* s3;  // ademamix: its second first moment, state1 + n
  int64_t n;
  bool vec_g, vec_p, vec_s1, vec_s2, vec_s3;  // 16-byte aligned
};

// The trust ratio's inputs: update_norms' partials and where the norm goes.
struct Norms {
  const double* partials;  // [count][2]: update norm^2, |p|^2; null: no trust ratio
  int count;
  float* unorm_vec;
  float max_unorm;
  bool trust;  // the ratio scales the update (every rule but ademamix)
};

template <class T>
__device__ __forceinline__ int chunk_valid(const Arrays<T>& x, int64_t base) {
  const int64_t rem = x.n - base;
  return rem >= kItems ? kItems : (rem > 0 ? static_cast<int>(rem) : 0);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    update_norms(Arrays<T> x, core::optim::Step st, float gnorm_scale, double* partials) {
  double unorm = 0.0, pnorm = 0.0;
  const int64_t tiles = ceil_div(x.n, kTile);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t base = tile * kTile + static_cast<int64_t>(threadIdx.x) * kItems;
    const int valid = chunk_valid(x, base);
    if (valid == 0) continue;
    Chunk<T, kItems> g, p;
    Chunk<float, kItems> s1, s2{};  // s2 stays 0 for the one-state rules
    load_in(g, x.g + base, valid, x.vec_g);
    load_inout(p, x.p + base, valid, x.vec_p);
    load_inout(s1, x.s1 + base, valid, x.vec_s1);
    if (x.s2 != nullptr) load_inout(s2, x.s2 + base, valid, x.vec_s2);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (i < valid) {
        const float gi = core::optim::scaled_grad(g.elem[i], gnorm_scale);
        unorm += core::optim::unorm_term(st, gi, s1.elem[i], s2.elem[i]);
        const double pi = core::to_f32(p.elem[i]);
        pnorm += pi * pi;
      }
    }
  }
  block_sum<kThreads>(unorm, pnorm);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = unorm;
    partials[2 * blockIdx.x + 1] = pnorm;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    update_elements(Arrays<T> x, core::optim::Step st, float gnorm_scale, Norms norms) {
  if (norms.partials != nullptr) {
    __shared__ float s_scale;
    double unorm = 0.0, pnorm = 0.0;
    for (int i = threadIdx.x; i < norms.count; i += kThreads) {
      unorm += norms.partials[2 * i];
      pnorm += norms.partials[2 * i + 1];
    }
    block_sum<kThreads>(unorm, pnorm);
    if (threadIdx.x == 0) {
      const float u = static_cast<float>(unorm);
      s_scale = norms.trust
                    ? core::optim::update_scale(st.rule, u, norms.max_unorm, static_cast<float>(sqrt(pnorm)), st.eps)
                    : 1.0f;
      if (blockIdx.x == 0) *norms.unorm_vec = u;
    }
    __syncthreads();
    st.update_scale = s_scale;
  }
  const bool two = core::optim::two_states(st.rule);
  const int64_t tiles = ceil_div(x.n, kTile);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t base = tile * kTile + static_cast<int64_t>(threadIdx.x) * kItems;
    const int valid = chunk_valid(x, base);
    if (valid == 0) continue;
    Chunk<T, kItems> g, p;
    Chunk<float, kItems> s1, s2, s3{};  // s3 stays 0 for adam and lamb
    load_in(g, x.g + base, valid, x.vec_g);
    load_inout(p, x.p + base, valid, x.vec_p);
    load_inout(s1, x.s1 + base, valid, x.vec_s1);
    if (two) load_inout(s2, x.s2 + base, valid, x.vec_s2);
    if (x.s3 != nullptr) load_inout(s3, x.s3 + base, valid, x.vec_s3);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (i < valid) {
        const float gi = core::optim::scaled_grad(g.elem[i], gnorm_scale);
        if (two) {
          core::optim::update_two(st, gi, p.elem[i], s1.elem[i], s2.elem[i], s3.elem[i]);
        } else {
          core::optim::update_one(st, gi, p.elem[i], s1.elem[i]);
        }
      }
    }
    store_out(x.p + base, p, valid, x.vec_p);
    store_out(x.s1 + base, s1, valid, x.vec_s1);
    if (two) store_out(x.s2 + base, s2, valid, x.vec_s2);
    if (x.s3 != nullptr) store_out(x.s3 + base, s3, valid, x.vec_s3);
  }
}

template <class T>
void launch(const OptimizerUpdate32bitArgs& a, void* workspace, cudaStream_t stream) {
  const char* op = OptimizerUpdate32bitArgs::kName;
  const int64_t n = a.g.numel();
  float* s1 = a.state1.ptr<float>();
  float* s2 = a.state2.present() ? a.state2.ptr<float>() : nullptr;
  float* s3 = a.optimizer == Optimizer::ademamix ? s1 + n : nullptr;
  Arrays<T> x{};
  x.g = a.g.ptr<const T>(), x.p = a.p.ptr<T>(), x.s1 = s1, x.s2 = s2, x.s3 = s3, x.n = n;
  x.vec_g = aligned16(x.g), x.vec_p = aligned16(x.p), x.vec_s1 = aligned16(s1);
  x.vec_s2 = aligned16(s2), x.vec_s3 = aligned16(s3);
  const core::optim::Step st = core::optim::make_step(a);
  Norms norms{nullptr, 0, nullptr, a.max_unorm, a.optimizer != Optimizer::ademamix};
  if (a.max_unorm > 0.0f) {
    norms.unorm_vec = a.unorm_vec.ptr<float>();
    if (n == 0) {  // an empty sum
      check(cudaMemsetAsync(norms.unorm_vec, 0, sizeof(float), stream), op, "cudaMemsetAsync of unorm_vec");
      return;
    }
    norms.count = static_cast<int>(partial_count(n));
    auto* partials = static_cast<double*>(workspace);
    norms.partials = partials;
    update_norms<T><<<norms.count, kThreads, 0, stream>>>(x, st, a.gnorm_scale, partials);
    check_launch(op, "update_norms");
  }
  if (n == 0) return;
  auto* kernel = &update_elements<T>;
  const int grid = persistent_grid(kernel, kThreads, 0, ceil_div(n, kTile), op);
  kernel<<<grid, kThreads, 0, stream>>>(x, st, a.gnorm_scale, norms);
  check_launch(op, "update_elements");
}

}  // namespace

size_t optimizer_update_32bit_workspace(const OptimizerUpdate32bitArgs& a) {
  return a.max_unorm > 0.0f ? static_cast<size_t>(partial_count(a.g.numel())) * 2 * sizeof(double) : 0;
}

void optimizer_update_32bit(const OptimizerUpdate32bitArgs& a, void* workspace, Stream stream) {
  const char* op = OptimizerUpdate32bitArgs::kName;
  DeviceGuard guard(a.g.device.index, op);
  with_float_type(a.g.dtype, op, "g", [&](auto t) { launch<decltype(t)>(a, workspace, to_cuda(stream)); });
}

}  // namespace lowbit::cuda
