// optimizer_update_8bit on CUDA (docs/optim.md, "8-bit tensor-wise states"):
// the arithmetic of core/optim_tensorwise.h, the CPU's.
//
// Work layout:
//   - A CTA of kThreads threads takes tiles of kTile = kThreads * kItems
//     consecutive elements, grid-striding; thread t owns kItems consecutive
//     elements of a tile (16-byte loads and stores of g and p, 8-byte ones of
//     the codes where aligned, element by element otherwise and at the tail).
//   - Every code is stored with the new max |state| over the whole tensor, so
//     a step is two kernels: precondition steps every element on copies and
//     writes each CTA's maxima and float64 norm sums to the workspace;
//     update_elements has every CTA reduce those partials in one fixed order
//     (max is order-free; the sums add in a fixed tree), so all CTAs and
//     every run (a graph replay too) agree on new_max and the trust ratio bit
//     for bit, then steps again and stores. CTA 0 writes new_max1, new_max2
//     and unorm_vec, which no CTA reads. No atomics, no memset, no host round
//     trip.
//   - Each state's map and its code table (state_code.cuh, the blockwise
//     update's) are built in shared memory once per CTA.
//   - Compiled with --fmad=false (src/CMakeLists.txt), rounded as on the CPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/float_convert.h"
#include "core/optim_tensorwise.h"
#include "core/quant_math.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/vec.cuh"
#include "cuda/optim/access.cuh"
#include "cuda/optim/block_sum.cuh"
#include "cuda/optim/ops.h"
#include "cuda/optim/state_code.cuh"

namespace lowbit::cuda {
namespace {

using optim::Codes8;

constexpr int kThreads = 256;
constexpr int kItems = 8;  // elements a thread holds: one 8-byte word of codes
constexpr int64_t kTile = kThreads * kItems;
constexpr int64_t kMaxPartials = 1024;  // CTAs: about one full wave of an H100 (132 SMs x 8)
constexpr int kPartial = 4;             // doubles a CTA writes: max1, max2, unorm, |p|^2

int64_t partial_count(int64_t n) { return std::max<int64_t>(1, std::min(ceil_div(n, kTile), kMaxPartials)); }

template <class T>
struct Params {
  const T* g;
  T* p;
  uint8_t* c1;
  uint8_t* c2;  // null for the one-state rules
  const float* qmap1;
  const float* qmap2;
  const float* max1;
  const float* max2;
  float* new_max1;
  float* new_max2;
  float* unorm_vec;  // null: no norm
  const float* clip;  // the gradient scale's device factor, or null
  float max_unorm;
  int64_t n;
  bool vec_g, vec_p, vec_c1, vec_c2;  // g, p 16-byte aligned; codes 8-byte aligned
};

__device__ __forceinline__ int chunk_valid(int64_t n, int64_t base) {
  const int64_t rem = n - base;
  return rem >= kItems ? kItems : (rem > 0 ? static_cast<int>(rem) : 0);
}

// a and b maximized over the CTA, in thread 0 (exact and order-free).
__device__ void block_max(float& a, float& b) {
  __shared__ float s[2][kThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, off));
    b = fmaxf(b, __shfl_xor_sync(0xffffffffu, b, off));
  }
  if ((threadIdx.x & 31) == 0) {
    s[0][threadIdx.x >> 5] = a;
    s[1][threadIdx.x >> 5] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) {
      a = fmaxf(a, s[0][w]);
      b = fmaxf(b, s[1][w]);
    }
  }
}

// One chunk's inputs: g, p, and the states dequantized.
template <class T>
struct Elements {
  Chunk<T, kItems> g, p;
  Codes8 c1, c2;
  float s1[kItems], s2[kItems];
};

template <class T>
__device__ __forceinline__ int load(const Params<T>& x, int64_t base, const float* code1, const float* code2,
                                    float max1, float max2, Elements<T>& e) {
  const int valid = chunk_valid(x.n, base);
  optim::load_in(e.g, x.g + base, valid, x.vec_g);
  optim::load_inout(e.p, x.p + base, valid, x.vec_p);
  optim::load_codes(e.c1, x.c1 + base, valid, x.vec_c1);
  if (x.c2 != nullptr) optim::load_codes(e.c2, x.c2 + base, valid, x.vec_c2);
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    e.s1[i] = code1[e.c1.c[i]] * max1;
    e.s2[i] = x.c2 != nullptr ? code2[e.c2.c[i]] * max2 : 0.0f;
  }
  return valid;
}

template <class T>
__device__ __forceinline__ void step(const core::optim::Step& st, float gnorm_scale, bool two, Elements<T>& e,
                                     int valid) {
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (i < valid) {
      if (two) {
        core::optim::tensorwise_two(st, gnorm_scale, e.g.elem[i], e.p.elem[i], e.s1[i], e.s2[i]);
      } else {
        core::optim::tensorwise_one(st, gnorm_scale, e.g.elem[i], e.p.elem[i], e.s1[i]);
      }
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    precondition(Params<T> x, core::optim::Step st, float gnorm_scale, double* partials) {
  __shared__ float code1[256], code2[256];
  gnorm_scale = optim::with_clip(gnorm_scale, x.clip);
  const bool two = x.c2 != nullptr, norms = x.unorm_vec != nullptr, trust = x.max_unorm > 0.0f;
  code1[threadIdx.x] = x.qmap1[threadIdx.x];  // kThreads == 256
  if (two) code2[threadIdx.x] = x.qmap2[threadIdx.x];
  __syncthreads();
  const float max1 = *x.max1, max2 = two ? *x.max2 : 0.0f;
  float m1 = 0.0f, m2 = 0.0f;
  double unorm = 0.0, pnorm = 0.0;
  for (int64_t base = blockIdx.x * kTile + threadIdx.x * kItems; base < x.n; base += gridDim.x * kTile) {
    Elements<T> e;
    const int valid = load(x, base, code1, code2, max1, max2, e);
    if (trust) {
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const double v = core::to_f32(e.p.elem[i]);  // 0 past the tail
        pnorm += v * v;
      }
    }
    step(st, gnorm_scale, two, e, valid);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (i < valid) {
        m1 = core::absmax_update(m1, e.s1[i]);
        m2 = core::absmax_update(m2, e.s2[i]);
        if (norms) unorm += core::optim::tensorwise_unorm_term(st, e.s1[i], e.s2[i]);
      }
    }
  }
  block_max(m1, m2);
  optim::block_sum<kThreads>(unorm, pnorm);
  if (threadIdx.x == 0) {
    double* out = partials + kPartial * blockIdx.x;
    out[0] = m1, out[1] = m2, out[2] = unorm, out[3] = pnorm;
  }
}

// The stored codes of a thread's new states, with r = 1 / new max.
__device__ __forceinline__ void encode(const float (&s)[kItems], float r, const optim::StateCodes& m, bool keep_sign,
                                       Codes8& q) {
  uint32_t c[kItems];
  m.encode(s, r, keep_sign, c);
#pragma unroll
  for (int i = 0; i < kItems; ++i) q.c[i] = static_cast<uint8_t>(c[i]);
}

// What every CTA takes from the partials.
struct Reduced {
  float r1, r2;  // 1 / new max
  float update_scale;
};

template <class T>
__global__ void __launch_bounds__(kThreads)
    update_elements(Params<T> x, core::optim::Step st, float gnorm_scale, const double* partials, int count) {
  __shared__ optim::StateCodes map1, map2;
  gnorm_scale = optim::with_clip(gnorm_scale, x.clip);
  __shared__ Reduced red;
  const bool two = x.c2 != nullptr;
  map1.build(x.qmap1);
  if (two) map2.build(x.qmap2);

  float m1 = 0.0f, m2 = 0.0f;
  double unorm = 0.0, pnorm = 0.0;
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const double* in = partials + kPartial * i;
    m1 = fmaxf(m1, static_cast<float>(in[0]));
    m2 = fmaxf(m2, static_cast<float>(in[1]));
    unorm += in[2];
    pnorm += in[3];
  }
  block_max(m1, m2);
  optim::block_sum<kThreads>(unorm, pnorm);
  if (threadIdx.x == 0) {
    const float u = static_cast<float>(unorm);
    red.r1 = core::absmax_reciprocal(m1);
    red.r2 = core::absmax_reciprocal(m2);
    red.update_scale = core::optim::tensorwise_update_scale(u, x.max_unorm, static_cast<float>(sqrt(pnorm)));
    if (blockIdx.x == 0) {
      *x.new_max1 = m1;
      if (two) *x.new_max2 = m2;
      if (x.unorm_vec != nullptr) *x.unorm_vec = u;
    }
  }
  __syncthreads();
  if (x.max_unorm > 0.0f) st.update_scale = red.update_scale;
  const float r1 = red.r1, r2 = red.r2, max1 = *x.max1, max2 = two ? *x.max2 : 0.0f;

  for (int64_t base = blockIdx.x * kTile + threadIdx.x * kItems; base < x.n; base += gridDim.x * kTile) {
    Elements<T> e;
    const int valid = load(x, base, map1.code, map2.code, max1, max2, e);
    step(st, gnorm_scale, two, e, valid);
    encode(e.s1, r1, map1, true, e.c1);
    optim::store_codes(x.c1 + base, e.c1, valid, x.vec_c1);
    if (two) {
      encode(e.s2, r2, map2, false, e.c2);
      optim::store_codes(x.c2 + base, e.c2, valid, x.vec_c2);
    }
    optim::store_out(x.p + base, e.p, valid, x.vec_p);
  }
}
static_assert(kThreads == 256, "the maps load with one thread an entry");

template <class T>
void launch(const OptimizerUpdate8bitArgs& a, void* workspace, cudaStream_t stream) {
  const char* op = OptimizerUpdate8bitArgs::kName;
  const bool two = core::optim::two_states(a.optimizer);
  Params<T> x{};
  x.g = a.g.ptr<const T>(), x.p = a.p.ptr<T>(), x.n = a.g.numel();
  x.c1 = a.state1.ptr<uint8_t>(), x.c2 = two ? a.state2.ptr<uint8_t>() : nullptr;
  x.qmap1 = a.qmap1.ptr<const float>(), x.qmap2 = two ? a.qmap2.ptr<const float>() : nullptr;
  x.max1 = a.max1.ptr<const float>(), x.max2 = two ? a.max2.ptr<const float>() : nullptr;
  x.new_max1 = a.new_max1.ptr<float>(), x.new_max2 = two ? a.new_max2.ptr<float>() : nullptr;
  x.unorm_vec = a.unorm_vec.present() ? a.unorm_vec.ptr<float>() : nullptr;
  x.clip = a.clip_scale.present() ? a.clip_scale.ptr<const float>() : nullptr;
  x.max_unorm = a.max_unorm;
  x.vec_g = aligned16(x.g), x.vec_p = aligned16(x.p), x.vec_c1 = aligned8(x.c1), x.vec_c2 = aligned8(x.c2);
  const core::optim::Step st = core::optim::make_tensorwise_step(a);
  const int count = static_cast<int>(partial_count(x.n));
  auto* partials = static_cast<double*>(workspace);
  precondition<T><<<count, kThreads, 0, stream>>>(x, st, a.gnorm_scale, partials);
  check_launch(op, "precondition");
  // With n == 0 both still run: new_max and unorm_vec become 0.
  update_elements<T><<<count, kThreads, 0, stream>>>(x, st, a.gnorm_scale, partials, count);
  check_launch(op, "update_elements");
}

}  // namespace

size_t optimizer_update_8bit_workspace(const OptimizerUpdate8bitArgs& a) {
  return static_cast<size_t>(partial_count(a.g.numel())) * kPartial * sizeof(double);
}

void optimizer_update_8bit(const OptimizerUpdate8bitArgs& a, void* workspace, Stream stream) {
  const char* op = OptimizerUpdate8bitArgs::kName;
  DeviceGuard guard(a.g.device.index, op);
  with_float_type(a.g.dtype, op, "g", [&](auto t) { launch<decltype(t)>(a, workspace, to_cuda(stream)); });
}

}  // namespace lowbit::cuda
