// Tensor-wise 8-bit quantization on CUDA (docs/formats.md, "8-bit
// tensor-wise"): quantize_no_absmax, dequantize_no_absmax,
// quantize_tensorwise and dequantize_tensorwise.
//
// Work layout:
//   - A CTA of kThreads threads takes tiles of kTile consecutive elements,
//     grid-striding; thread t owns kItems consecutive elements of a tile (16-
//     or 32-byte loads of the input, one 8-byte store of the codes where
//     aligned, element by element otherwise and at the tail).
//   - quantize_tensorwise needs max|x| over the whole tensor before the first
//     code: absmax_partials writes each CTA's maximum to the workspace, and
//     every CTA of encode_elements takes the maximum of those partials first
//     (order-free, so every CTA agrees), CTA 0 also storing it to `absmax`.
//     No atomics, no memset, no host round trip: capturable in a CUDA graph.
//   - Codes through CodeSearch (code_search.cuh), the blockwise quantize's
//     search, built in shared memory once per CTA.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/float_convert.h"
#include "core/quant_math.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/host_nan.cuh"
#include "cuda/common/launch.h"
#include "cuda/common/vec.cuh"
#include "cuda/quant/code_search.cuh"
#include "cuda/quant/ops.h"

namespace lowbit::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kItems = 8;  // one 8-byte word of codes a thread
constexpr int64_t kTile = kThreads * kItems;
constexpr int64_t kMaxPartials = 1024;  // absmax_partials' CTAs: about one full wave of an H100

int64_t partial_count(int64_t n) { return std::max<int64_t>(1, std::min(ceil_div(n, kTile), kMaxPartials)); }

__device__ __forceinline__ int chunk_valid(int64_t n, int64_t base) {
  const int64_t rem = n - base;
  return rem >= kItems ? kItems : (rem > 0 ? static_cast<int>(rem) : 0);
}

template <class T>
__device__ __forceinline__ void load_floats(const T* x, int64_t base, int valid, bool vec, float (&v)[kItems]) {
  Chunk<T, kItems> c;
  if (valid == kItems && vec) {
    load_chunk(c, x + base);
  } else {
    load_chunk_partial(c, x + base, valid);
  }
#pragma unroll
  for (int i = 0; i < kItems; ++i) v[i] = core::to_f32(c.elem[i]);
}

// The largest of every thread's m, in thread 0 (max is exact and order-free).
__device__ float cta_max(float m) {
  __shared__ float warp_max[kThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
  }
  return m;
}

template <class T>
__global__ void __launch_bounds__(kThreads) absmax_partials(const T* x, int64_t n, bool vec, float* partials) {
  float m = 0.0f;
  for (int64_t base = (blockIdx.x * kTile) + threadIdx.x * kItems; base < n; base += gridDim.x * kTile) {
    float v[kItems];
    load_floats(x, base, chunk_valid(n, base), vec, v);
#pragma unroll
    for (int i = 0; i < kItems; ++i) m = core::absmax_update(m, v[i]);  // the zeros past the tail change nothing
  }
  m = cta_max(m);
  if (threadIdx.x == 0) partials[blockIdx.x] = m;
}

// The codes of x (x / absmax where partials are given).
template <class T>
struct EncodeParams {
  const T* x;
  uint8_t* q;
  int64_t n;
  const float* code;      // [256]
  const float* partials;  // absmax_partials' maxima, or null: no absmax
  int count;              // of partials
  float* absmax;          // written by CTA 0 (with partials)
  bool vec_x, vec_q;
};

template <class T>
__global__ void __launch_bounds__(kThreads) encode_elements(EncodeParams<T> p) {
  __shared__ CodeSearch search;
  __shared__ float s_absmax;
  search.build_mid(p.code);
  if (p.partials != nullptr) {
    float m = 0.0f;
    for (int i = threadIdx.x; i < p.count; i += kThreads) m = fmaxf(m, p.partials[i]);
    m = cta_max(m);
    if (threadIdx.x == 0) {
      s_absmax = m;
      if (blockIdx.x == 0) *p.absmax = m;
    }
  }
  __syncthreads();
  search.build_entries();
  __syncthreads();
  const float absmax = p.partials != nullptr ? s_absmax : 0.0f;
  for (int64_t base = (blockIdx.x * kTile) + threadIdx.x * kItems; base < p.n; base += gridDim.x * kTile) {
    const int valid = chunk_valid(p.n, base);
    float y[kItems];
    load_floats(p.x, base, valid, p.vec_x, y);
    if (p.partials != nullptr) {
#pragma unroll
      for (int i = 0; i < kItems; ++i) y[i] = core::tensorwise_normalize(y[i], absmax);
    }
    uint32_t codes[kItems];
    search.encode_n(y, codes);
    union {
      uint2 word;
      uint8_t c[kItems];
    } out;
#pragma unroll
    for (int i = 0; i < kItems; ++i) out.c[i] = static_cast<uint8_t>(codes[i]);
    if (valid == kItems && p.vec_q) {
      *reinterpret_cast<uint2*>(p.q + base) = out.word;
    } else {
      for (int i = 0; i < valid; ++i) p.q[base + i] = out.c[i];
    }
  }
}

// out[i] = code[q[i]] (* *absmax where given), with the CPU's NaN bits.
template <class T>
__global__ void __launch_bounds__(kThreads)
    decode_elements(const uint8_t* q, int64_t n, const float* code, const float* absmax, T* out, bool vec_q,
                    bool vec_out) {
  __shared__ float s_code[256];
  s_code[threadIdx.x] = code[threadIdx.x];  // kThreads == 256
  __syncthreads();
  const float m = absmax != nullptr ? *absmax : 1.0f;
  for (int64_t base = (blockIdx.x * kTile) + threadIdx.x * kItems; base < n; base += gridDim.x * kTile) {
    const int valid = chunk_valid(n, base);
    union {
      uint2 word;
      uint8_t c[kItems];
    } in;
    if (valid == kItems && vec_q) {
      in.word = __ldg(reinterpret_cast<const uint2*>(q + base));
    } else {
      in.word = make_uint2(0u, 0u);
      for (int i = 0; i < valid; ++i) in.c[i] = q[base + i];
    }
    float v[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) v[i] = mul_host_nan(s_code[in.c[i]], m);
    Chunk<T, kItems> o;
#pragma unroll
    for (int i = 0; i < kItems; ++i) o.elem[i] = core::from_f32<T>(v[i]);
    if (valid == kItems && vec_out) {
      store_chunk(out + base, o);
    } else {
      store_chunk_partial(out + base, o, valid);
    }
  }
}
static_assert(kThreads == 256, "decode_elements loads the map with one thread an entry");

template <class T>
void encode(const char* op, const TensorRef& input, const TensorRef& code, const TensorRef& out, float* absmax,
            void* workspace, cudaStream_t stream) {
  EncodeParams<T> p{};
  p.x = input.ptr<const T>(), p.q = out.ptr<uint8_t>(), p.n = input.numel(), p.code = code.ptr<const float>();
  p.vec_x = aligned16(p.x), p.vec_q = aligned8(p.q);
  const int grid = static_cast<int>(partial_count(p.n));
  if (absmax != nullptr) {
    auto* partials = static_cast<float*>(workspace);
    absmax_partials<T><<<grid, kThreads, 0, stream>>>(p.x, p.n, p.vec_x, partials);
    check_launch(op, "absmax_partials");
    p.partials = partials, p.count = grid, p.absmax = absmax;
  } else if (p.n == 0) {
    return;
  }
  encode_elements<T><<<grid, kThreads, 0, stream>>>(p);  // with n == 0 it still stores absmax = 0
  check_launch(op, "encode_elements");
}

template <class T>
void decode(const char* op, const TensorRef& input, const TensorRef& code, const float* absmax, const TensorRef& out,
            cudaStream_t stream) {
  const int64_t n = input.numel();
  if (n == 0) return;
  const uint8_t* q = input.ptr<const uint8_t>();
  T* o = out.ptr<T>();
  auto* kernel = &decode_elements<T>;
  const int grid = persistent_grid(kernel, kThreads, 0, ceil_div(n, kTile), op);
  kernel<<<grid, kThreads, 0, stream>>>(q, n, code.ptr<const float>(), absmax, o, aligned8(q), aligned16(o));
  check_launch(op, "decode_elements");
}

}  // namespace

void quantize_no_absmax(const QuantizeNoAbsmaxArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = QuantizeNoAbsmaxArgs::kName;
  DeviceGuard guard(a.input.device.index, op);
  with_float_type(a.input.dtype, op, "input", [&](auto t) {
    encode<decltype(t)>(op, a.input, a.code, a.out, nullptr, nullptr, to_cuda(stream));
  });
}

void dequantize_no_absmax(const DequantizeNoAbsmaxArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = DequantizeNoAbsmaxArgs::kName;
  DeviceGuard guard(a.input.device.index, op);
  with_float_type(a.out.dtype, op, "out",
                  [&](auto t) { decode<decltype(t)>(op, a.input, a.code, nullptr, a.out, to_cuda(stream)); });
}

size_t quantize_tensorwise_workspace(const QuantizeTensorwiseArgs& a) {
  return static_cast<size_t>(partial_count(a.input.numel())) * sizeof(float);
}

void quantize_tensorwise(const QuantizeTensorwiseArgs& a, void* workspace, Stream stream) {
  const char* op = QuantizeTensorwiseArgs::kName;
  DeviceGuard guard(a.input.device.index, op);
  with_float_type(a.input.dtype, op, "input", [&](auto t) {
    encode<decltype(t)>(op, a.input, a.code, a.out, a.absmax.ptr<float>(), workspace, to_cuda(stream));
  });
}

void dequantize_tensorwise(const DequantizeTensorwiseArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = DequantizeTensorwiseArgs::kName;
  DeviceGuard guard(a.input.device.index, op);
  with_float_type(a.out.dtype, op, "out", [&](auto t) {
    decode<decltype(t)>(op, a.input, a.code, a.absmax.ptr<const float>(), a.out, to_cuda(stream));
  });
}

}  // namespace lowbit::cuda
