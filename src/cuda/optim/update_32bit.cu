// optimizer_update_32bit and optimizer_update_32bit_multi on CUDA
// (docs/optim.md): the rules of core/optim_rules.h over the elements, the
// arithmetic the CPU does.
//
// Work layout:
//   - The tensors of a launch travel in a table (tensor_table.h; one entry
//     for the single-tensor op). A CTA finds its tensor in it, then takes
//     that tensor's tiles of kTile = kThreads * kItems consecutive elements,
//     striding by the tensor's CTA count; thread t owns kItems consecutive
//     elements of a tile, moved as 16-byte words where its array is 16-byte
//     aligned (the tail and misaligned views element by element).
//   - max_unorm > 0 scales each tensor's update by a ratio of two norms over
//     that tensor, so that step is two kernels: update_norms writes each of a
//     tensor's partial_count(n) CTAs' share of the update's squared norm and
//     of |p|^2 (float64, as the CPU sums them) to the workspace;
//     update_elements has every CTA of the tensor add those partials in one
//     fixed order, so all CTAs and every run (a graph replay too) agree on
//     the ratio bit for bit, then applies the step. The partition depends
//     only on the tensor's size: a tensor in a list gets the bits it gets
//     alone. No atomics, no memset, no host round trip.
//   - Compiled with --fmad=false (src/CMakeLists.txt): the rules' products
//     and sums are rounded separately, as on the CPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/float_convert.h"
#include "core/optim_rules.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/vec.cuh"
#include "cuda/optim/access.cuh"
#include "cuda/optim/block_sum.cuh"
#include "cuda/optim/ops.h"
#include "cuda/optim/tensor_table.h"

namespace lowbit::cuda {
namespace {

using optim::block_sum;
using optim::load_in;
using optim::load_inout;
using optim::store_out;
using optim::Table;

constexpr int kThreads = 256;
constexpr int kItems = 8;  // a 16-bit chunk is one 16-byte word, an fp32 chunk two
constexpr int kTile = kThreads * kItems;
constexpr int64_t kMaxPartials = 1024;  // update_norms' CTAs a tensor: about one full wave of an H100 (132 SMs x 8)

int64_t partial_count(int64_t n) { return std::min(ceil_div(n, kTile), kMaxPartials); }

// One tensor of a launch; s2 and s3 are null where the rule keeps none.
template <class T>
struct Entry {
  const T* g;
  T* p;
  float* s1;
  float* s2;
  float* s3;         // ademamix: its second first moment, state1 + n
  float* unorm_vec;  // where the update norm goes (max_unorm > 0)
  const float* clip;  // the gradient scale's device factor, or null
  int64_t n;
  int first_cta;      // update_elements' CTAs of this tensor: [first_cta, first_cta + ctas)
  int ctas;
  int first_partial;  // update_norms' CTAs, and their partials in the workspace: [first_partial, + partials)
  int partials;
  bool vec_g, vec_p, vec_s1, vec_s2, vec_s3;  // 16-byte aligned
};

template <class T>
constexpr int kCapacity = optim::kTableCapacity<Entry<T>>;
static_assert(sizeof(Table<Entry<float>, kCapacity<float>>) + sizeof(core::optim::Step) + 64 <= optim::kMaxParamBytes,
              "update_elements' parameters must fit the kernel parameter limit");

// The trust ratio's inputs, for every tensor of the launch.
struct Norms {
  const double* partials;  // [partials][2]: update norm^2, |p|^2 of each update_norms CTA
  bool on;                 // max_unorm > 0 (partials may be null then: every tensor empty)
  float max_unorm;
  bool trust;  // the ratio scales the update (every rule but ademamix)
};

template <class T>
__device__ __forceinline__ int chunk_valid(const Entry<T>& x, int64_t base) {
  const int64_t rem = x.n - base;
  return rem >= kItems ? kItems : (rem > 0 ? static_cast<int>(rem) : 0);
}

// The entry whose update_norms CTAs hold CTA `cta`.
template <class T, int kCap>
__device__ __forceinline__ int find_partial(const Table<Entry<T>, kCap>& tab, int cta) {
  int lo = 0, hi = tab.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tab.e[mid].first_partial <= cta) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

template <class T, int kCap>
__global__ void __launch_bounds__(kThreads)
    update_norms(const __grid_constant__ Table<Entry<T>, kCap> tab, core::optim::Step st, float gnorm_scale,
                 double* partials) {
  const Entry<T>& x = tab.e[find_partial(tab, blockIdx.x)];
  gnorm_scale = optim::with_clip(gnorm_scale, x.clip);
  double unorm = 0.0, pnorm = 0.0;
  const int64_t tiles = ceil_div(x.n, kTile);
  for (int64_t tile = blockIdx.x - x.first_partial; tile < tiles; tile += x.partials) {
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

template <class T, int kCap>
__global__ void __launch_bounds__(kThreads)
    update_elements(const __grid_constant__ Table<Entry<T>, kCap> tab, core::optim::Step st, float gnorm_scale,
                    Norms norms) {
  const Entry<T>& x = tab.e[tab.find(blockIdx.x)];
  const int cta = static_cast<int>(blockIdx.x) - x.first_cta;
  gnorm_scale = optim::with_clip(gnorm_scale, x.clip);
  if (norms.on) {
    __shared__ float s_scale;
    double unorm = 0.0, pnorm = 0.0;
    const double* own = norms.partials + 2 * static_cast<int64_t>(x.first_partial);
    for (int i = threadIdx.x; i < x.partials; i += kThreads) {
      unorm += own[2 * i];
      pnorm += own[2 * i + 1];
    }
    block_sum<kThreads>(unorm, pnorm);
    if (threadIdx.x == 0) {
      const float u = static_cast<float>(unorm);
      s_scale = norms.trust
                    ? core::optim::update_scale(st.rule, u, norms.max_unorm, static_cast<float>(sqrt(pnorm)), st.eps)
                    : 1.0f;
      if (cta == 0) *x.unorm_vec = u;
    }
    __syncthreads();
    st.update_scale = s_scale;
  }
  const bool two = core::optim::two_states(st.rule);
  const int64_t tiles = ceil_div(x.n, kTile);
  for (int64_t tile = cta; tile < tiles; tile += x.ctas) {
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
Entry<T> make_entry(const OptimizerUpdate32bitArgs& a) {
  const int64_t n = a.g.numel();
  Entry<T> x{};
  x.g = a.g.ptr<const T>(), x.p = a.p.ptr<T>(), x.s1 = a.state1.ptr<float>(), x.n = n;
  x.s2 = a.state2.present() ? a.state2.ptr<float>() : nullptr;
  x.s3 = a.optimizer == Optimizer::ademamix ? x.s1 + n : nullptr;
  x.unorm_vec = a.max_unorm > 0.0f ? a.unorm_vec.ptr<float>() : nullptr;
  x.clip = a.clip_scale.present() ? a.clip_scale.ptr<const float>() : nullptr;
  x.vec_g = aligned16(x.g), x.vec_p = aligned16(x.p), x.vec_s1 = aligned16(x.s1);
  x.vec_s2 = aligned16(x.s2), x.vec_s3 = aligned16(x.s3);
  return x;
}

// The update of `entries` (all of one step): tables of up to kCap entries,
// each one launch (two with norms). The workspace holds every tensor's partials.
template <class T, int kCap>
void launch(const std::vector<Entry<T>>& entries, const OptimizerUpdate32bitArgs& first, void* workspace,
            cudaStream_t stream, const char* op) {
  const core::optim::Step st = core::optim::make_step(first);
  const bool norms = first.max_unorm > 0.0f;
  auto* kernel = &update_elements<T, kCap>;
  const int64_t wave = persistent_grid(kernel, kThreads, 0, INT64_MAX, op);
  auto* partials = static_cast<double*>(workspace);
  size_t next = 0;
  while (next < entries.size()) {
    Table<Entry<T>, kCap> tab;
    std::vector<int64_t> units;
    for (; next < entries.size() && tab.count < kCap; ++next) {
      const Entry<T>& x = entries[next];
      if (x.n == 0 && !norms) continue;  // nothing to write; with norms, one CTA writes its zero norm
      tab.e[tab.count++] = x;
      units.push_back(ceil_div(x.n, kTile));
    }
    if (tab.count == 0) break;
    const std::vector<int32_t> ctas = optim::split_grid(units, optim::kGridWaves * wave);
    int grid = 0, norm_grid = 0;
    for (int t = 0; t < tab.count; ++t) {
      Entry<T>& x = tab.e[t];
      x.first_cta = grid, x.ctas = ctas[static_cast<size_t>(t)], grid += x.ctas;
      x.first_partial = norm_grid, x.partials = norms ? static_cast<int>(partial_count(x.n)) : 0;
      norm_grid += x.partials;
    }
    const Norms nm{partials, norms, first.max_unorm, first.optimizer != Optimizer::ademamix};
    if (norm_grid > 0) {
      update_norms<T, kCap><<<norm_grid, kThreads, 0, stream>>>(tab, st, first.gnorm_scale, partials);
      check_launch(op, "update_norms");
    }
    kernel<<<grid, kThreads, 0, stream>>>(tab, st, first.gnorm_scale, nm);
    check_launch(op, "update_elements");
    if (norms) partials += 2 * static_cast<int64_t>(norm_grid);
  }
}

size_t norm_workspace(const OptimizerUpdate32bitArgs& a) {
  return a.max_unorm > 0.0f ? static_cast<size_t>(partial_count(a.g.numel())) * 2 * sizeof(double) : 0;
}

}  // namespace

size_t optimizer_update_32bit_workspace(const OptimizerUpdate32bitArgs& a) { return norm_workspace(a); }

size_t optimizer_update_32bit_multi_workspace(const OptimizerUpdate32bitMultiArgs& a) {
  size_t bytes = 0;
  for (size_t i = 0; i < a.params.size(); ++i) bytes += norm_workspace(a.entry(i));
  return bytes;
}

void optimizer_update_32bit(const OptimizerUpdate32bitArgs& a, void* workspace, Stream stream) {
  const char* op = OptimizerUpdate32bitArgs::kName;
  DeviceGuard guard(a.g.device.index, op);
  with_float_type(a.g.dtype, op, "g", [&](auto t) {
    using T = decltype(t);
    launch<T, 1>({make_entry<T>(a)}, a, workspace, to_cuda(stream), op);
  });
}

void optimizer_update_32bit_multi(const OptimizerUpdate32bitMultiArgs& a, void* workspace, Stream stream) {
  const char* op = OptimizerUpdate32bitMultiArgs::kName;
  if (a.params.empty()) return;
  const OptimizerUpdate32bitArgs first = a.entry(0);
  DeviceGuard guard(first.g.device.index, op);
  with_float_type(first.g.dtype, op, "g", [&](auto t) {
    using T = decltype(t);
    std::vector<Entry<T>> entries;
    entries.reserve(a.params.size());
    for (size_t i = 0; i < a.params.size(); ++i) entries.push_back(make_entry<T>(a.entry(i)));
    launch<T, kCapacity<T>>(entries, first, workspace, to_cuda(stream), op);
  });
}

}  // namespace lowbit::cuda
