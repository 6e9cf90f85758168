// int8_vectorwise_quant / int8_vectorwise_dequant (LLM.int8; docs/formats.md, "Int8 vector-wise") on CUDA.
//
// The input is [rows, K] (all leading dims flattened). With threshold > 0 a
// first kernel marks the outlier columns (outlier_mask zeroed, then set by
// every thread that sees |x| >= threshold: equal values, so the races are
// benign; a thread stores only a mark it does not see yet, so few stores
// contend for a byte). Then one warp per row reduces the row's absmax over non-outlier
// entries and encodes the row. Rows of whole 16-byte vectors (the common
// case) take one block each with 16-byte loads: the block reduces the
// absmax, then reads the row again (from L1/L2: it was just read) to encode
// it, storing 16 / sizeof(T) codes per access. Other rows take a warp each
// with scalar accesses. int8_linear's quantization (int8_linear_quant) is
// that vector kernel with the marking folded into its first pass.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/float_convert.h"
#include "core/quant_math.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/host_nan.cuh"
#include "cuda/common/launch.h"
#include "cuda/quant/int8.h"
#include "cuda/quant/ops.h"
#include "cuda/quant/outlier_columns.cuh"

namespace lowbit::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

template <class T>
__global__ void __launch_bounds__(kThreads)
    mark_outlier_columns(const T* in, int64_t n, int64_t k, float threshold, uint8_t* mask) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    if (core::int8_is_outlier(core::to_f32(in[i]), threshold)) {
      uint8_t* mark = mask + i % k;
      if (*mark == 0) *mark = 1;  // most see the mark already: few stores contend for the byte
    }
  }
}

__device__ __forceinline__ float warp_absmax(float m) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = core::absmax_update(m, __shfl_xor_sync(0xffffffffu, m, off));
  return m;
}

// mask: null when threshold == 0 (no outliers).
template <class T>
__global__ void __launch_bounds__(kThreads) int8_quant_rows(const T* in, int64_t rows, int64_t k, float threshold,
                                                            const uint8_t* mask, int8_t* out, float* row_stats) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); row < rows; row += warps) {
    const T* x = in + row * k;
    float m = 0.0f;
    for (int64_t c = lane; c < k; c += 32) {
      const float v = core::to_f32(x[c]);
      if (!core::int8_is_outlier(v, threshold)) m = core::absmax_update(m, v);
    }
    m = warp_absmax(m);
    if (lane == 0) row_stats[row] = m;
    const float f = core::int8_row_factor(m);
    int8_t* q = out + row * k;
    for (int64_t c = lane; c < k; c += 32) {
      q[c] = (mask != nullptr && mask[c] != 0) ? int8_t{0} : core::int8_encode(core::to_f32(x[c]), f);
    }
  }
}

constexpr int kVecThreads = 128;

// kV codes, one per element of a 16-byte vector, as the bytes of one store.
template <int kV>
struct CodeVec;
template <>
struct CodeVec<8> {
  using type = uint2;
};
template <>
struct CodeVec<4> {
  using type = uint32_t;
};

// Rows of whole aligned 16-byte vectors, a CTA a row: the CTA reduces the
// row's absmax, then reads the row again (from L1/L2) to encode it, 16 /
// sizeof(T) codes a store.
//   - int8_vectorwise_quant (!kLinear): the columns marked in mask (by
//     mark_outlier_columns, before) are encoded as 0.
//   - int8_linear (kLinear): the outlier columns are marked as they are seen
//     (one pass over the input, no marking kernel) and encoded like the
//     rest; with a mask, the last CTA to finish lists the marked columns in
//     outliers = {count, columns ascending} and zeroes their codes, which
//     the rows could not know when they were encoded. `done` counts the
//     finished CTAs (zero at launch).
template <class T, bool kLinear>
__global__ void __launch_bounds__(kVecThreads)
    int8_quant_rows_vec(const T* in, int64_t rows, int64_t k, float threshold, uint8_t* mask, int8_t* out,
                        float* row_stats, int32_t* outliers, unsigned* done) {
  constexpr int kV = 16 / static_cast<int>(sizeof(T));
  using Codes = typename CodeVec<kV>::type;
  __shared__ float partial[kVecThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t vectors = k / kV;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const uint4* x = reinterpret_cast<const uint4*>(in + row * k);
    float m = 0.0f;
    for (int64_t v = threadIdx.x; v < vectors; v += kVecThreads) {
      const uint4 w = __ldg(x + v);
      const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const float f = core::to_f32(e[j]);
        if (!core::int8_is_outlier(f, threshold)) {
          m = core::absmax_update(m, f);
        } else if constexpr (kLinear) {
          uint8_t* mark = mask + v * kV + j;
          if (*mark == 0) *mark = 1;  // most see the mark already: few stores contend for the byte
        }
      }
    }
    m = warp_absmax(m);
    if (lane == 0) partial[warp] = m;
    __syncthreads();
    m = partial[0];
#pragma unroll
    for (int w = 1; w < kVecThreads / 32; ++w) m = core::absmax_update(m, partial[w]);
    if (threadIdx.x == 0) row_stats[row] = m;
    const float factor = core::int8_row_factor(m);
    Codes* q = reinterpret_cast<Codes*>(out + row * k);
    for (int64_t v = threadIdx.x; v < vectors; v += kVecThreads) {
      const uint4 w = __ldg(x + v);
      const T* e = reinterpret_cast<const T*>(&w);
      Codes c;
      auto* b = reinterpret_cast<int8_t*>(&c);
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const bool zero = !kLinear && mask != nullptr && mask[v * kV + j] != 0;
        b[j] = zero ? int8_t{0} : core::int8_encode(core::to_f32(e[j]), factor);
      }
      q[v] = c;
    }
    __syncthreads();  // partial is rewritten by the next row
  }
  if constexpr (kLinear) {
    if (threshold <= 0.0f) return;
    __shared__ int warp_counts[kVecThreads / 32 + 1];
    __shared__ bool last;
    __threadfence();  // this thread's marks before the CTA's arrival
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int count = compact_marked_columns<kVecThreads>(mask, k, outliers + 1, outliers, warp_counts);
    __syncthreads();  // the list written to memory by the CTA's threads
    for (int c = 0; c < count; ++c) {
      int8_t* col = out + outliers[1 + c];
      for (int64_t r = threadIdx.x; r < rows; r += kVecThreads) col[r * k] = 0;
    }
  }
}

// Whether rows of `k` elements are whole 16-byte vectors at aligned addresses.
template <class T>
bool vector_rows(const T* in, int64_t k, const int8_t* out) {
  constexpr int64_t kV = 16 / static_cast<int64_t>(sizeof(T));
  const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  return k % kV == 0 && addr(in) % 16 == 0 && addr(out) % static_cast<uintptr_t>(kV) == 0;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    int8_dequant_rows(const int8_t* in, int64_t rows, int64_t k, const float* row_stats, T* out) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); row < rows; row += warps) {
    const float s = row_stats[row];
    for (int64_t c = lane; c < k; c += 32) {
      const int8_t q = in[row * k + c];
      float v = core::int8_decode(q, s);
      if (v != v) v = host_nan(static_cast<float>(q), s);  // the NaN of q * s, carried through the 1/127 product
      out[row * k + c] = core::from_f32<T>(v);
    }
  }
}

}  // namespace

void int8_vectorwise_quant(const Int8VectorwiseQuantArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = Int8VectorwiseQuantArgs::kName;
  const int64_t k = a.input.size(-1);
  const int64_t rows = k == 0 ? 0 : a.input.numel() / k;
  DeviceGuard guard(a.input.device.index, op);
  const cudaStream_t s = to_cuda(stream);
  uint8_t* mask = a.threshold > 0.0f ? a.outlier_mask.ptr<uint8_t>() : nullptr;
  if (mask != nullptr && k > 0)
    check(cudaMemsetAsync(mask, 0, static_cast<size_t>(k), s), op, "cudaMemsetAsync(outlier_mask)");
  if (rows == 0) return;
  with_float_type(a.input.dtype, op, "input", [&](auto t) {
    using T = decltype(t);
    const T* in = a.input.ptr<const T>();
    if (mask != nullptr) {
      auto* kernel = &mark_outlier_columns<T>;
      const int grid = persistent_grid(kernel, kThreads, 0, ceil_div(a.input.numel(), kThreads), op);
      kernel<<<grid, kThreads, 0, s>>>(in, a.input.numel(), k, a.threshold, mask);
      check_launch(op, "mark_outlier_columns");
    }
    int8_t* out = a.out.ptr<int8_t>();
    if (vector_rows(in, k, out)) {
      auto* kernel = &int8_quant_rows_vec<T, false>;
      const int grid = persistent_grid(kernel, kVecThreads, 0, rows, op);
      kernel<<<grid, kVecThreads, 0, s>>>(in, rows, k, a.threshold, mask, out, a.row_stats.ptr<float>(), nullptr,
                                          nullptr);
      check_launch(op, "int8_quant_rows_vec");
      return;
    }
    auto* kernel = &int8_quant_rows<T>;
    const int grid = persistent_grid(kernel, kThreads, 0, ceil_div(rows, kWarps), op);
    kernel<<<grid, kThreads, 0, s>>>(in, rows, k, a.threshold, mask, out, a.row_stats.ptr<float>());
    check_launch(op, "int8_quant_rows");
  });
}

void int8_vectorwise_dequant(const Int8VectorwiseDequantArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = Int8VectorwiseDequantArgs::kName;
  const int64_t k = a.input.size(-1);
  const int64_t rows = k == 0 ? 0 : a.input.numel() / k;
  if (rows == 0) return;
  DeviceGuard guard(a.input.device.index, op);
  with_float_type(a.out.dtype, op, "out", [&](auto t) {
    using T = decltype(t);
    auto* kernel = &int8_dequant_rows<T>;
    const int grid = persistent_grid(kernel, kThreads, 0, ceil_div(rows, kWarps), op);
    kernel<<<grid, kThreads, 0, to_cuda(stream)>>>(a.input.ptr<const int8_t>(), rows, k, a.row_stats.ptr<const float>(),
                                                   a.out.ptr<T>());
    check_launch(op, "int8_dequant_rows");
  });
}

bool int8_linear_quant_fits(const TensorRef& input, const int8_t* out) {
  bool fits = false;
  with_float_type(input.dtype, "int8_linear", "a",
                  [&](auto t) { fits = vector_rows(input.ptr<const decltype(t)>(), input.size(-1), out); });
  return fits;
}

void int8_linear_quant(const TensorRef& input, float threshold, int8_t* out, float* row_stats, uint8_t* mask,
                       int32_t* outliers, unsigned* done, cudaStream_t stream) {
  const char* op = "int8_linear";
  const int64_t k = input.size(-1), rows = input.numel() / k;
  with_float_type(input.dtype, op, "a", [&](auto t) {
    using T = decltype(t);
    auto* kernel = &int8_quant_rows_vec<T, true>;
    const int grid = persistent_grid(kernel, kVecThreads, 0, rows, op);
    kernel<<<grid, kVecThreads, 0, stream>>>(input.ptr<const T>(), rows, k, threshold, mask, out, row_stats, outliers,
                                             done);
    check_launch(op, "int8_quant_rows_vec");
  });
}

}  // namespace lowbit::cuda
