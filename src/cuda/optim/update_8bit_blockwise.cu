// optimizer_update_8bit_blockwise and optimizer_update_8bit_blockwise_multi
// on CUDA (docs/optim.md, "8-bit blockwise states"): the arithmetic of
// core/optim_blockwise.h, the CPU's.
//
// Work layout:
//   - The tensors of a launch travel in a table (tensor_table.h; one entry
//     for the single-tensor op); a CTA finds its tensor there and strides
//     over that tensor's blocks with the tensor's other CTAs.
//   - A block of 256 elements is one warp's: lane l holds its elements
//     [8l, 8l + 8) (g and p as 16-byte words, codes as one 8-byte word where
//     aligned), so the block's new absmax is a shuffle reduction inside the
//     warp, with no shared memory or barrier. A CTA's 8 warps stride over the
//     tensor's blocks, one wave of CTAs in all.
//   - Each state's map and its CodeSearch table (src/cuda/quant/code_search.cuh,
//     the quantize kernels' nearest-code search) are built in shared memory
//     once per CTA.
//   - Compiled with --fmad=false (src/CMakeLists.txt), rounded as on the CPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/float_convert.h"
#include "core/optim_blockwise.h"
#include "core/quant_math.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/vec.cuh"
#include "cuda/optim/access.cuh"
#include "cuda/optim/ops.h"
#include "cuda/optim/tensor_table.h"
#include "cuda/quant/code_search.cuh"

namespace lowbit::cuda {
namespace {

using optim::Codes8;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kItems = 8;  // elements a lane holds
constexpr int64_t kBlock = OptimizerUpdate8bitBlockwiseArgs::kBlocksize;
static_assert(kBlock == 32 * kItems, "a block is one warp's");

// One tensor of a launch.
template <class T>
struct Entry {
  const T* g;
  T* p;
  uint8_t* c1;  // state1's codes (ademamix: m1's)
  uint8_t* c2;  // state2's; null for the one-state rules
  uint8_t* c3;  // ademamix's m2, state1 + n; null otherwise
  float* a1;    // the absmax of c1's blocks, of c2's, of c3's (absmax1 + blocks)
  float* a2;
  float* a3;
  int64_t n, blocks;
  int first_cta;  // this tensor's CTAs: [first_cta, first_cta + ctas)
  int ctas;
  bool vec_g, vec_p, vec_c1, vec_c2, vec_c3;  // g, p 16-byte aligned; codes 8-byte aligned
};

template <class T>
constexpr int kCapacity = optim::kTableCapacity<Entry<T>>;
static_assert(sizeof(optim::Table<Entry<float>, kCapacity<float>>) + sizeof(core::optim::Step) + 64 <=
                  optim::kMaxParamBytes,
              "update_blocks' parameters must fit the kernel parameter limit");

// What every tensor of a launch shares: the maps.
struct Maps {
  const float* qmap1;
  const float* qmap2;  // null for the one-state rules
};

// A state's map in shared memory: its values (dequantization, the sign
// rule) and its search table.
struct SharedMap {
  float code[256];
  CodeSearch search;
};

// The stored codes of a lane's new states, with the block's new absmax.
__device__ __forceinline__ void encode(const float (&s)[kItems], float absmax, const SharedMap& m, bool keep_sign,
                                       Codes8& q) {
  const float r = core::absmax_reciprocal(absmax);
  float y[kItems];
  uint32_t below[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) y[i] = s[i] * r;
  m.search.encode_n(y, below);
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    q.c[i] = static_cast<uint8_t>(core::optim::state_code(s[i], y[i], below[i], m.code, m.search.mid, keep_sign));
  }
}

// The largest |s| of the block's real elements, in every lane (max is exact
// and order-free on these non-negative, NaN-free partials).
__device__ __forceinline__ float block_absmax(const float (&s)[kItems], int valid) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (i < valid) m = core::absmax_update(m, s[i]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = core::absmax_update(m, __shfl_xor_sync(0xffffffffu, m, off));
  return m;
}

template <class T, int kCap>
__global__ void __launch_bounds__(kThreads)
    update_blocks(const __grid_constant__ optim::Table<Entry<T>, kCap> tab, Maps maps, core::optim::Step st,
                  float gnorm_scale) {
  __shared__ SharedMap map1, map2;
  const Entry<T>& x = tab.e[tab.find(blockIdx.x)];
  const bool two = maps.qmap2 != nullptr, mix = x.c3 != nullptr;
  for (int i = threadIdx.x; i < 256; i += kThreads) {
    map1.code[i] = maps.qmap1[i];
    if (two) map2.code[i] = maps.qmap2[i];
  }
  map1.search.build_mid(maps.qmap1);
  if (two) map2.search.build_mid(maps.qmap2);
  __syncthreads();
  map1.search.build_entries();
  if (two) map2.search.build_entries();
  __syncthreads();

  const int lane = threadIdx.x & 31;
  const int64_t first = static_cast<int64_t>(static_cast<int>(blockIdx.x) - x.first_cta) * kWarps + (threadIdx.x >> 5);
  for (int64_t b = first; b < x.blocks; b += static_cast<int64_t>(x.ctas) * kWarps) {
    const int64_t base = b * kBlock + lane * kItems;
    const int64_t rem = x.n - base;
    const int valid = rem >= kItems ? kItems : (rem > 0 ? static_cast<int>(rem) : 0);
    Chunk<T, kItems> g, p;
    Codes8 q1, q2{}, q3{};
    optim::load_in(g, x.g + base, valid, x.vec_g);
    optim::load_inout(p, x.p + base, valid, x.vec_p);
    optim::load_codes(q1, x.c1 + base, valid, x.vec_c1);
    if (two) optim::load_codes(q2, x.c2 + base, valid, x.vec_c2);
    if (mix) optim::load_codes(q3, x.c3 + base, valid, x.vec_c3);
    // Read by every lane before lane 0 rewrites them (after the shuffles below).
    const float m1 = x.a1[b], m2 = two ? x.a2[b] : 0.0f, m3 = mix ? x.a3[b] : 0.0f;
    float s1[kItems], s2[kItems], s3[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      s1[i] = map1.code[q1.c[i]] * m1;
      s2[i] = two ? map2.code[q2.c[i]] * m2 : 0.0f;
      s3[i] = mix ? map1.code[q3.c[i]] * m3 : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (i < valid) {
        if (two) {
          core::optim::step_two(st, gnorm_scale, g.elem[i], p.elem[i], s1[i], s2[i], s3[i]);
        } else {
          core::optim::step_one(st, gnorm_scale, g.elem[i], p.elem[i], s1[i]);
        }
      }
    }
    const float n1 = block_absmax(s1, valid);
    encode(s1, n1, map1, true, q1);
    optim::store_codes(x.c1 + base, q1, valid, x.vec_c1);
    if (two) {
      const float n2 = block_absmax(s2, valid);
      encode(s2, n2, map2, false, q2);
      optim::store_codes(x.c2 + base, q2, valid, x.vec_c2);
      if (lane == 0) x.a2[b] = n2;
    }
    if (mix) {
      const float n3 = block_absmax(s3, valid);
      encode(s3, n3, map1, true, q3);
      optim::store_codes(x.c3 + base, q3, valid, x.vec_c3);
      if (lane == 0) x.a3[b] = n3;
    }
    if (lane == 0) x.a1[b] = n1;
    optim::store_out(x.p + base, p, valid, x.vec_p);
  }
}

template <class T>
Entry<T> make_entry(const OptimizerUpdate8bitBlockwiseArgs& a) {
  const int64_t n = a.g.numel();
  const bool two = core::optim::two_states(a.optimizer), mix = a.optimizer == Optimizer::ademamix;
  Entry<T> x{};
  x.n = n, x.blocks = ceil_div(n, kBlock);
  x.g = a.g.ptr<const T>(), x.p = a.p.ptr<T>();
  x.c1 = a.state1.ptr<uint8_t>(), x.c2 = two ? a.state2.ptr<uint8_t>() : nullptr, x.c3 = mix ? x.c1 + n : nullptr;
  x.a1 = a.absmax1.ptr<float>(), x.a2 = two ? a.absmax2.ptr<float>() : nullptr;
  x.a3 = mix ? x.a1 + x.blocks : nullptr;
  x.vec_g = aligned16(x.g), x.vec_p = aligned16(x.p);
  x.vec_c1 = aligned8(x.c1), x.vec_c2 = aligned8(x.c2), x.vec_c3 = aligned8(x.c3);
  return x;
}

// The update of `entries` (all of one step, `first`'s rule and maps): tables
// of up to kCap entries, one launch each.
template <class T, int kCap>
void launch(const std::vector<Entry<T>>& entries, const OptimizerUpdate8bitBlockwiseArgs& first, cudaStream_t stream,
            const char* op) {
  const bool two = core::optim::two_states(first.optimizer);
  const Maps maps{first.qmap1.ptr<const float>(), two ? first.qmap2.ptr<const float>() : nullptr};
  const core::optim::Step st = core::optim::make_step(first);
  auto* kernel = &update_blocks<T, kCap>;
  const int64_t wave = persistent_grid(kernel, kThreads, 0, INT64_MAX, op);
  size_t next = 0;
  while (next < entries.size()) {
    optim::Table<Entry<T>, kCap> tab;
    std::vector<int64_t> units;  // a CTA's pass: kWarps blocks
    for (; next < entries.size() && tab.count < kCap; ++next) {
      if (entries[next].n == 0) continue;
      tab.e[tab.count++] = entries[next];
      units.push_back(ceil_div(entries[next].blocks, kWarps));
    }
    if (tab.count == 0) break;
    const std::vector<int32_t> ctas = optim::split_grid(units, optim::kGridWaves * wave);
    int grid = 0;
    for (int t = 0; t < tab.count; ++t) {
      tab.e[t].first_cta = grid, tab.e[t].ctas = ctas[static_cast<size_t>(t)];
      grid += tab.e[t].ctas;
    }
    kernel<<<grid, kThreads, 0, stream>>>(tab, maps, st, first.gnorm_scale);
    check_launch(op, "update_blocks");
  }
}

}  // namespace

void optimizer_update_8bit_blockwise(const OptimizerUpdate8bitBlockwiseArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = OptimizerUpdate8bitBlockwiseArgs::kName;
  DeviceGuard guard(a.g.device.index, op);
  with_float_type(a.g.dtype, op, "g", [&](auto t) {
    using T = decltype(t);
    launch<T, 1>({make_entry<T>(a)}, a, to_cuda(stream), op);
  });
}

void optimizer_update_8bit_blockwise_multi(const OptimizerUpdate8bitBlockwiseMultiArgs& a, void* /*workspace*/,
                                           Stream stream) {
  const char* op = OptimizerUpdate8bitBlockwiseMultiArgs::kName;
  if (a.params.empty()) return;
  const OptimizerUpdate8bitBlockwiseArgs first = a.entry(0);
  DeviceGuard guard(first.g.device.index, op);
  with_float_type(first.g.dtype, op, "g", [&](auto t) {
    using T = decltype(t);
    std::vector<Entry<T>> entries;
    entries.reserve(a.params.size());
    for (size_t i = 0; i < a.params.size(); ++i) entries.push_back(make_entry<T>(a.entry(i)));
    launch<T, kCapacity<T>>(entries, first, to_cuda(stream), op);
  });
}

}  // namespace lowbit::cuda
