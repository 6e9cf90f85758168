// int8_vectorwise_quant / int8_vectorwise_dequant (LLM.int8; docs/formats.md, "Int8 vector-wise") on CUDA.
//
// The input is [rows, K] (all leading dims flattened). With threshold > 0 a
// first kernel marks the outlier columns (outlier_mask zeroed, then set by
// every thread that sees |x| >= threshold: equal values, so the races are
// benign; a thread stores only a mark it does not see yet, so few stores
// contend for a byte). Rows of whole 16-byte vectors (the common case) then
// take a CTA each, every thread holding its vectors of the row in registers
// while the CTA reduces the absmax, then encoding them: one read of the row,
// 16 / sizeof(T) codes a store. Other rows take a warp each with scalar
// accesses. int8_linear's quantization (int8_linear_quant,
// int8_linear_quant_bits) is that row kernel with the marking folded in.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/float_convert.h"
#include "core/quant_math.h"
#include "cuda/common/check.h"
#include "cuda/common/convert.cuh"
#include "cuda/common/dispatch.h"
#include "cuda/common/host_nan.cuh"
#include "cuda/common/launch.h"
#include "cuda/common/ptx/sync.cuh"
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

// What the row kernel does with the outlier columns (|x| >= threshold):
enum class RowMode {
  masked,  // int8_vectorwise_quant: encodes the columns marked in mask (beforehand) as 0
  listed,  // int8_linear: marks mask as it reads; the last CTA lists the marked columns and zeroes their codes
  bits,    // int8_linear, few rows: each row's outliers as bits (row_bits), codes left as encoded
};

// Bit j of `bits` (element j of this lane's vector v, one of kV) into the
// 32-column word of row_bits holding it: the lanes of a word OR their bits
// together and the first stores the word. Every lane of the warp calls it.
template <int kV>
__device__ __forceinline__ void store_row_bits(uint32_t* row_bits, int64_t v, int64_t vectors, uint32_t bits,
                                               int lane) {
  constexpr int kLanesPerWord = 32 / kV;
  uint32_t word = bits << (lane % kLanesPerWord * kV);
#pragma unroll
  for (int off = 1; off < kLanesPerWord; off <<= 1) word |= __shfl_xor_sync(0xffffffffu, word, off);
  if (lane % kLanesPerWord == 0 && v < vectors) row_bits[v * kV / 32] = word;
}

// The row kernel's threads: 512 for the few rows of the bits mode (a CTA
// a row, so more threads share each row), 256 otherwise.
constexpr int row_threads(RowMode mode) { return mode == RowMode::bits ? 512 : kThreads; }

// Rows of whole aligned 16-byte vectors, a CTA a row at a time (a grid of
// at most one wave, each CTA taking rows gridDim.x apart): each thread
// loads its kPer vectors of the row at once and keeps them in registers
// while the CTA reduces the absmax, then encodes them (16 / sizeof(T) codes
// a store): one read of the row. With kPer <= 4 the next row's vectors are
// loaded before this row's reduction, so a CTA's rows overlap their DRAM
// latency. Rows longer than kPer x threads vectors go by segments of that
// many, read again (from L2) to encode.
//   listed: outliers = {count, columns ascending} from the last CTA to
//   finish (`done` counts the finished CTAs, zero at launch, as mask is).
//   bits: row_bits [rows, ceil(K / 32)] written whole (no zeroing first).
template <class T, int kPer, RowMode kMode>
__global__ void __launch_bounds__(row_threads(kMode))
    int8_quant_rows_vec(const T* in, int64_t rows, int64_t k, float threshold, uint8_t* mask, int8_t* out,
                        float* row_stats, uint32_t* row_bits, int32_t* outliers, unsigned* done) {
  ptx::griddepcontrol_launch_dependents();  // a dependent launched early waits for this grid before reading it
  constexpr int kT = row_threads(kMode), kW = kT / 32;
  constexpr int kV = 16 / static_cast<int>(sizeof(T));
  constexpr int64_t kSeg = int64_t{kPer} * kT;
  constexpr bool kPrefetch = kPer <= 4;  // registers for a second row's vectors
  using Codes = typename CodeVec<kV>::type;
  __shared__ float partial[kW];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t vectors = k / kV, words = (k + 31) / 32;
  const bool held = vectors <= kSeg;  // one segment: encoded from the registers of the first pass
  const bool marks = threshold > 0.0f;
  // Segment s of row `row` into r (zeros past the row: no outliers, no absmax).
  const auto load = [&](int64_t row, int64_t s, uint4(&r)[kPer]) {
    const uint4* x = reinterpret_cast<const uint4*>(in + row * k);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int64_t v = s + threadIdx.x + i * kT;
      r[i] = v < vectors ? __ldg(x + v) : uint4{};
    }
  };
  uint4 w[kPer];
  if (held && blockIdx.x < rows) load(blockIdx.x, 0, w);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float m = 0.0f;
    for (int64_t s = 0; s < vectors; s += kSeg) {
      if (!held) load(row, s, w);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int64_t v = s + threadIdx.x + i * kT;
        float f[kV];
        to_floats(*reinterpret_cast<const T(*)[kV]>(&w[i]), f);
        uint32_t bits = 0;
#pragma unroll
        for (int j = 0; j < kV; ++j) {
          if (!core::int8_is_outlier(f[j], threshold)) {
            m = core::absmax_update(m, f[j]);
          } else {
            bits |= 1u << j;
            if constexpr (kMode == RowMode::listed) {
              uint8_t* mark = mask + v * kV + j;
              if (*mark == 0) *mark = 1;  // most see the mark already: few stores contend for the byte
            }
          }
        }
        if constexpr (kMode == RowMode::bits) {
          if (marks) store_row_bits<kV>(row_bits + row * words, v, vectors, bits, lane);
        }
      }
    }
    uint4 next[kPrefetch ? kPer : 1];
    if constexpr (kPrefetch) {
      if (held && row + gridDim.x < rows) load(row + gridDim.x, 0, next);
    }
    m = warp_absmax(m);
    if (lane == 0) partial[warp] = m;
    __syncthreads();
    m = partial[0];
#pragma unroll
    for (int i = 1; i < kW; ++i) m = core::absmax_update(m, partial[i]);
    if (threadIdx.x == 0) row_stats[row] = m;
    const float factor = core::int8_row_factor(m);
    Codes* q = reinterpret_cast<Codes*>(out + row * k);
    for (int64_t s = 0; s < vectors; s += kSeg) {
      if (!held) load(row, s, w);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int64_t v = s + threadIdx.x + i * kT;
        if (v >= vectors) continue;
        float f[kV];
        to_floats(*reinterpret_cast<const T(*)[kV]>(&w[i]), f);
        Codes c;
        auto* b = reinterpret_cast<int8_t*>(&c);
#pragma unroll
        for (int j = 0; j < kV; ++j) {
          const bool zero = kMode == RowMode::masked && mask != nullptr && mask[v * kV + j] != 0;
          b[j] = zero ? int8_t{0} : core::int8_encode(f[j], factor);
        }
        q[v] = c;
      }
    }
    if (held) {
      if constexpr (kPrefetch) {
#pragma unroll
        for (int i = 0; i < kPer; ++i) w[i] = next[i];
      } else if (row + gridDim.x < rows) {
        load(row + gridDim.x, 0, w);
      }
    }
    __syncthreads();  // partial is rewritten by the next row
  }
  if constexpr (kMode == RowMode::listed) {
    if (!marks) return;
    __shared__ int warp_counts[kW + 1];
    __shared__ bool last;
    __syncthreads();  // the CTA's marks stored before its arrival
    if (threadIdx.x == 0) {
      __threadfence();  // cumulative: the marks the barrier ordered before it
      last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int count = compact_marked_columns<kT>(mask, k, outliers + 1, outliers, warp_counts);
    __syncthreads();  // the list written to memory by the CTA's threads
    for (int c = 0; c < count; ++c) {
      int8_t* col = out + __ldcg(outliers + 1 + c);
      for (int64_t r = threadIdx.x; r < rows; r += kT) col[r * k] = 0;
    }
  }
}

// Launches the row kernel with the fewest vectors a thread that hold a row
// (8 at most), on at most one wave of CTAs.
template <class T, RowMode kMode>
void launch_rows_vec(const T* in, int64_t rows, int64_t k, float threshold, uint8_t* mask, int8_t* out,
                     float* row_stats, uint32_t* row_bits, int32_t* outliers, unsigned* done, cudaStream_t stream,
                     const char* op) {
  constexpr int kT = row_threads(kMode);
  const int64_t vectors = k / (16 / static_cast<int64_t>(sizeof(T)));
  const auto run = [&](auto* kernel) {
    const int grid = persistent_grid(kernel, kT, 0, rows, op);
    kernel<<<grid, kT, 0, stream>>>(in, rows, k, threshold, mask, out, row_stats, row_bits, outliers, done);
    check_launch(op, "int8_quant_rows_vec");
  };
  if (vectors <= kT) return run(&int8_quant_rows_vec<T, 1, kMode>);
  if (vectors <= 2 * kT) return run(&int8_quant_rows_vec<T, 2, kMode>);
  if (vectors <= 4 * kT) return run(&int8_quant_rows_vec<T, 4, kMode>);
  run(&int8_quant_rows_vec<T, 8, kMode>);
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
      launch_rows_vec<T, RowMode::masked>(in, rows, k, a.threshold, mask, out, a.row_stats.ptr<float>(), nullptr,
                                          nullptr, nullptr, s, op);
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

namespace {

// int8_linear's quantization of input's rows in mode kMode.
template <RowMode kMode>
void linear_rows(const TensorRef& input, float threshold, uint8_t* mask, int8_t* out, float* row_stats,
                 uint32_t* row_bits, int32_t* outliers, unsigned* done, cudaStream_t stream) {
  const char* op = "int8_linear";
  const int64_t k = input.size(-1), rows = input.numel() / k;
  with_float_type(input.dtype, op, "a", [&](auto t) {
    using T = decltype(t);
    launch_rows_vec<T, kMode>(input.ptr<const T>(), rows, k, threshold, mask, out, row_stats, row_bits, outliers,
                              done, stream, op);
  });
}

}  // namespace

void int8_linear_quant(const TensorRef& input, float threshold, int8_t* out, float* row_stats, uint8_t* mask,
                       int32_t* outliers, unsigned* done, cudaStream_t stream) {
  linear_rows<RowMode::listed>(input, threshold, mask, out, row_stats, nullptr, outliers, done, stream);
}

void int8_linear_quant_bits(const TensorRef& input, float threshold, int8_t* out, float* row_stats, uint32_t* row_bits,
                            cudaStream_t stream) {
  linear_rows<RowMode::bits>(input, threshold, nullptr, out, row_stats, row_bits, nullptr, nullptr, stream);
}

}  // namespace lowbit::cuda
