// optimizer_update_8bit_blockwise and optimizer_update_8bit_blockwise_multi
// on CUDA (docs/optim.md, "8-bit blockwise states"): the arithmetic of
// core/optim_blockwise.h, the CPU's.
//
// Work layout:
//   - The tensors of a launch travel in a table (tensor_table.h; one entry
//     for the single-tensor op); a CTA finds its tensor there and strides
//     over that tensor's blocks with the tensor's other CTAs.
//   - A block of 256 elements is one warp's: each lane holds 8 of them, as
//     16-byte words that sit side by side across the warp (fp32: two runs of
//     4 per lane; 16-bit types: one run of 8), so every load and store of
//     the warp is whole sectors. The block's new absmax is a shuffle
//     reduction inside the warp, with no shared memory or barrier.
//   - One kernel per rule (step_rule unrolled without run-time switches) and
//     a path without per-element checks for whole, aligned blocks; the last
//     block of a tensor and misaligned views take the checked path.
//   - Each state's map and its code table (state_code.cuh) are built in
//     shared memory once per CTA.
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
#include "cuda/optim/state_code.cuh"
#include "cuda/optim/tensor_table.h"

namespace lowbit::cuda {
namespace {

using core::optim::RuleTag;
using core::optim::two_states;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kItems = 8;  // elements a lane holds
// CTAs per SM the registers must allow: 24 warps keep enough loads in flight;
// ademamix's third state needs more registers than that leaves.
template <Optimizer R>
constexpr int kMinCtas = R == Optimizer::ademamix ? 2 : 3;
constexpr int64_t kBlock = OptimizerUpdate8bitBlockwiseArgs::kBlocksize;
static_assert(kBlock == 32 * kItems, "a block is one warp's");

// Where a lane's elements sit in its block: runs of kVec (one 16-byte word of
// T), run j of every lane side by side.
template <class T>
struct Layout {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  static constexpr int kRuns = kItems / kVec;
  static_assert(kRuns * kVec == kItems, "a lane's elements are whole words");
  __device__ __forceinline__ static int offset(int lane, int i) { return (i / kVec) * 32 * kVec + lane * kVec + i % kVec; }
};

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
  const float* clip;  // the gradient scale's device factor, or null
  int64_t n, blocks;
  int first_cta;  // this tensor's CTAs: [first_cta, first_cta + ctas)
  int ctas;
  bool vec;  // g, p 16-byte aligned and the codes aligned to a run: whole blocks take the vector path
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

// A lane's 8 codes of one state, as bytes or as the words they move in.
union Codes {
  uint8_t c[kItems];
  uint32_t w[kItems / 4];
};

// The stored codes of a lane's new states, given the block's new absmax.
__device__ __forceinline__ void encode(const float (&s)[kItems], float absmax, const optim::StateCodes& m,
                                       bool keep_sign, Codes& q) {
  uint32_t c[kItems];
  m.encode(s, core::absmax_reciprocal(absmax), keep_sign, c);
#pragma unroll
  for (int i = 0; i < kItems; ++i) q.c[i] = static_cast<uint8_t>(c[i]);
}

// The largest |s| of the block's elements a lane holds (`ok` marks the real
// ones), in every lane: core::absmax_update's value, as fmaxf (one
// instruction) ignores NaN as it does; max is exact and order-free.
__device__ __forceinline__ float block_absmax(const float (&s)[kItems], const bool (&ok)[kItems]) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (ok[i]) m = fmaxf(m, fabsf(s[i]));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  return m;
}

// A state's codes at `at` (block start) in a lane's layout: whole runs, or
// the elements `ok` marks.
template <class T, bool kWhole>
__device__ __forceinline__ void load_codes(Codes& q, const uint8_t* at, int lane, const bool (&ok)[kItems]) {
  using L = Layout<T>;
  if constexpr (kWhole) {
#pragma unroll
    for (int j = 0; j < L::kRuns; ++j) {
      const uint8_t* src = at + L::offset(lane, j * L::kVec);
      if constexpr (L::kVec == 4) {
        q.w[j] = *reinterpret_cast<const uint32_t*>(src);
      } else {
        const uint2 w = *reinterpret_cast<const uint2*>(src);
        q.w[2 * j] = w.x, q.w[2 * j + 1] = w.y;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kItems; ++i) q.c[i] = ok[i] ? at[L::offset(lane, i)] : uint8_t{0};
  }
}

template <class T, bool kWhole>
__device__ __forceinline__ void store_codes(uint8_t* at, const Codes& q, int lane, const bool (&ok)[kItems]) {
  using L = Layout<T>;
  if constexpr (kWhole) {
#pragma unroll
    for (int j = 0; j < L::kRuns; ++j) {
      uint8_t* dst = at + L::offset(lane, j * L::kVec);
      if constexpr (L::kVec == 4) {
        *reinterpret_cast<uint32_t*>(dst) = q.w[j];
      } else {
        *reinterpret_cast<uint2*>(dst) = make_uint2(q.w[2 * j], q.w[2 * j + 1]);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (ok[i]) at[L::offset(lane, i)] = q.c[i];
    }
  }
}

// Block b of tensor x: dequantize, step, re-quantize with the new absmax.
// kWhole: the block is whole and x.vec holds.
template <Optimizer R, class T, bool kWhole>
__device__ __forceinline__ void update_block(const Entry<T>& x, int64_t b, int lane, const optim::StateCodes& map1,
                                             const optim::StateCodes& map2, const core::optim::Step& st, float gnorm_scale) {
  using L = Layout<T>;
  constexpr bool kTwo = two_states(R), kMix = R == Optimizer::ademamix;
  const int64_t start = b * kBlock;
  bool ok[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) ok[i] = kWhole || start + L::offset(lane, i) < x.n;
  Chunk<T, kItems> g, p;
  if constexpr (kWhole) {
#pragma unroll
    for (int j = 0; j < L::kRuns; ++j) {
      const int at = L::offset(lane, j * L::kVec);
      g.word[j] = __ldg(reinterpret_cast<const uint4*>(x.g + start + at));  // read-only for the whole kernel
      p.word[j] = *reinterpret_cast<const uint4*>(x.p + start + at);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int64_t at = start + L::offset(lane, i);
      g.elem[i] = ok[i] ? x.g[at] : core::from_f32<T>(0.0f);
      p.elem[i] = ok[i] ? x.p[at] : core::from_f32<T>(0.0f);
    }
  }
  Codes q1, q2{}, q3{};
  load_codes<T, kWhole>(q1, x.c1 + start, lane, ok);
  if constexpr (kTwo) load_codes<T, kWhole>(q2, x.c2 + start, lane, ok);
  if constexpr (kMix) load_codes<T, kWhole>(q3, x.c3 + start, lane, ok);
  // Read by every lane before lane 0 rewrites them (after the shuffles below).
  const float m1 = x.a1[b], m2 = kTwo ? x.a2[b] : 0.0f, m3 = kMix ? x.a3[b] : 0.0f;
  float s1[kItems], s2[kItems], s3[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    s1[i] = map1.code[q1.c[i]] * m1;
    s2[i] = kTwo ? map2.code[q2.c[i]] * m2 : 0.0f;
    s3[i] = kMix ? map1.code[q3.c[i]] * m3 : 0.0f;
    core::optim::step_rule<R>(st, gnorm_scale, g.elem[i], p.elem[i], s1[i], s2[i], s3[i]);
  }
  const float n1 = block_absmax(s1, ok);
  encode(s1, n1, map1, true, q1);
  store_codes<T, kWhole>(x.c1 + start, q1, lane, ok);
  if constexpr (kTwo) {
    const float n2 = block_absmax(s2, ok);
    encode(s2, n2, map2, false, q2);
    store_codes<T, kWhole>(x.c2 + start, q2, lane, ok);
    if (lane == 0) x.a2[b] = n2;
  }
  if constexpr (kMix) {
    const float n3 = block_absmax(s3, ok);
    encode(s3, n3, map1, true, q3);
    store_codes<T, kWhole>(x.c3 + start, q3, lane, ok);
    if (lane == 0) x.a3[b] = n3;
  }
  if (lane == 0) x.a1[b] = n1;
  if constexpr (kWhole) {
#pragma unroll
    for (int j = 0; j < L::kRuns; ++j) {
      *reinterpret_cast<uint4*>(x.p + start + L::offset(lane, j * L::kVec)) = p.word[j];
    }
  } else {
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (ok[i]) x.p[start + L::offset(lane, i)] = p.elem[i];
    }
  }
}

template <Optimizer R, class T, int kCap>
__global__ void __launch_bounds__(kThreads, kMinCtas<R>)
    update_blocks(const __grid_constant__ optim::Table<Entry<T>, kCap> tab, Maps maps, core::optim::Step st,
                  float gnorm_scale) {
  __shared__ optim::StateCodes map[two_states(R) ? 2 : 1];
  map[0].build(maps.qmap1);
  if constexpr (two_states(R)) map[1].build(maps.qmap2);
  const optim::StateCodes& map2 = map[two_states(R) ? 1 : 0];

  const Entry<T>& x = tab.e[tab.find(blockIdx.x)];
  gnorm_scale = optim::with_clip(gnorm_scale, x.clip);
  const int lane = threadIdx.x & 31;
  const int64_t stride = static_cast<int64_t>(x.ctas) * kWarps;
  const int64_t whole = x.vec ? x.n / kBlock : 0;  // blocks of the vector path
  int64_t b = static_cast<int64_t>(static_cast<int>(blockIdx.x) - x.first_cta) * kWarps + (threadIdx.x >> 5);
  for (; b < whole; b += stride) update_block<R, T, true>(x, b, lane, map[0], map2, st, gnorm_scale);
  for (; b < x.blocks; b += stride) update_block<R, T, false>(x, b, lane, map[0], map2, st, gnorm_scale);
}

template <class T>
Entry<T> make_entry(const OptimizerUpdate8bitBlockwiseArgs& a) {
  const int64_t n = a.g.numel();
  const bool two = two_states(a.optimizer), mix = a.optimizer == Optimizer::ademamix;
  Entry<T> x{};
  x.n = n, x.blocks = ceil_div(n, kBlock);
  x.g = a.g.ptr<const T>(), x.p = a.p.ptr<T>();
  x.c1 = a.state1.ptr<uint8_t>(), x.c2 = two ? a.state2.ptr<uint8_t>() : nullptr, x.c3 = mix ? x.c1 + n : nullptr;
  x.a1 = a.absmax1.ptr<float>(), x.a2 = two ? a.absmax2.ptr<float>() : nullptr;
  x.a3 = mix ? x.a1 + x.blocks : nullptr;
  x.clip = a.clip_scale.present() ? a.clip_scale.ptr<const float>() : nullptr;
  const auto run_aligned = [](const uint8_t* c) {
    return c == nullptr || (reinterpret_cast<uintptr_t>(c) % Layout<T>::kVec) == 0;
  };
  x.vec = aligned16(x.g) && aligned16(x.p) && run_aligned(x.c1) && run_aligned(x.c2) && run_aligned(x.c3);
  return x;
}

// The update of `entries` (all of one step, `first`'s rule and maps): tables
// of up to kCap entries, one launch each.
template <Optimizer R, class T, int kCap>
void launch(const std::vector<Entry<T>>& entries, const OptimizerUpdate8bitBlockwiseArgs& first, cudaStream_t stream,
            const char* op) {
  const Maps maps{first.qmap1.ptr<const float>(), two_states(R) ? first.qmap2.ptr<const float>() : nullptr};
  const core::optim::Step st = core::optim::make_step(first);
  auto* kernel = &update_blocks<R, T, kCap>;
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
    // One tensor: one wave, each CTA building its maps once. A list: more
    // waves, which the block scheduler evens out.
    const std::vector<int32_t> ctas = optim::split_grid(units, (tab.count == 1 ? 1 : optim::kGridWaves) * wave);
    int grid = 0;
    for (int t = 0; t < tab.count; ++t) {
      tab.e[t].first_cta = grid, tab.e[t].ctas = ctas[static_cast<size_t>(t)];
      grid += tab.e[t].ctas;
    }
    kernel<<<grid, kThreads, 0, stream>>>(tab, maps, st, first.gnorm_scale);
    check_launch(op, "update_blocks");
  }
}

template <class T, int kCap>
void launch_rule(const std::vector<Entry<T>>& entries, const OptimizerUpdate8bitBlockwiseArgs& first,
                 cudaStream_t stream, const char* op) {
  core::optim::with_blockwise_rule(first.optimizer, [&](auto r) {
    launch<decltype(r)::kRule, T, kCap>(entries, first, stream, op);
  });
}

}  // namespace

void optimizer_update_8bit_blockwise(const OptimizerUpdate8bitBlockwiseArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = OptimizerUpdate8bitBlockwiseArgs::kName;
  DeviceGuard guard(a.g.device.index, op);
  with_float_type(a.g.dtype, op, "g", [&](auto t) {
    using T = decltype(t);
    launch_rule<T, 1>({make_entry<T>(a)}, a, to_cuda(stream), op);
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
    launch_rule<T, kCapacity<T>>(entries, first, to_cuda(stream), op);
  });
}

}  // namespace lowbit::cuda
