// int8_colwise_quant (LLM.int8's column half of int8_double_quant;
// docs/formats.md, "Int8 vector-wise") on CUDA.
//
// The input is [rows, K] (all leading dims flattened). Two launches over the
// same grid of strips (32 x kV columns, kV elements a 16-byte vector where
// rows are whole aligned vectors, else 1) by chunks of rows:
//   1. each thread keeps the absmax of its kV columns over its rows of the
//      chunk (outliers left out), the CTA takes the largest of its 8 row
//      lanes, and one atomicMax a column merges the chunks into col_stats
//      (zeroed first): absmax values are non-negative and never NaN, so
//      their bits order like the values, and the maximum is the same in
//      any order: the CPU's bits;
//   2. each thread turns its columns' absmax into factors once and encodes
//      its rows (outliers as 0), kV codes a store.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/quant_math.h"
#include "cuda/common/check.h"
#include "cuda/common/convert.cuh"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/quant/ops.h"

namespace lowbit::cuda {
namespace {

constexpr int kLanes = 32;    // column lanes of a CTA (a warp across the strip)
constexpr int kRowLanes = 8;  // row lanes (warps)
constexpr int kThreads = kLanes * kRowLanes;
constexpr int kChunkRows = 64;  // the least rows a CTA takes (more when the grid would exceed a few waves)

// The kV elements of row r at this thread's first column c (all in the row when the thread is active).
template <class T, int kV>
__device__ __forceinline__ void load(const T* in, int64_t k, int64_t r, int64_t c, float (&v)[kV]) {
  T x[kV];
  if constexpr (kV > 1) {
    const uint4 bits = *reinterpret_cast<const uint4*>(in + r * k + c);  // 16 bytes: kV elements
    memcpy(x, &bits, sizeof(bits));
  } else {
    x[0] = in[r * k + c];
  }
  to_floats(x, v);
}

// This thread's columns [c, c + kV) of the strip, or c >= k when idle.
__device__ __forceinline__ int64_t first_column(int kV) {
  return (static_cast<int64_t>(blockIdx.x) * kLanes + threadIdx.x % kLanes) * kV;
}

template <class T, int kV>
__global__ void __launch_bounds__(kThreads)
    colwise_absmax(const T* in, int64_t rows, int64_t k, int64_t chunk, float threshold, unsigned* col_bits) {
  __shared__ float part[kRowLanes][kLanes * kV];
  const int lane = threadIdx.x % kLanes, row_lane = threadIdx.x / kLanes;
  const int64_t c = first_column(kV);
  float m[kV] = {};
  if (c < k) {
    const int64_t r1 = min(rows, static_cast<int64_t>(blockIdx.y + 1) * chunk);
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * chunk + row_lane; r < r1; r += kRowLanes) {
      float v[kV];
      load<T, kV>(in, k, r, c, v);
#pragma unroll
      for (int j = 0; j < kV; ++j)
        m[j] = core::int8_is_outlier(v[j], threshold) ? m[j] : core::absmax_update(m[j], v[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < kV; ++j) part[row_lane][lane * kV + j] = m[j];
  __syncthreads();
  for (int i = threadIdx.x; i < kLanes * kV; i += kThreads) {
    float best = 0.0f;
#pragma unroll
    for (int l = 0; l < kRowLanes; ++l) best = core::absmax_update(best, part[l][i]);
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kLanes * kV + i;
    if (col < k && best > 0.0f) atomicMax(col_bits + col, __float_as_uint(best));
  }
}

// kV codes as the bytes of one store.
template <int kV>
__device__ __forceinline__ void store_codes(int8_t* out, const int8_t (&q)[kV]) {
  if constexpr (kV == 8) {
    uint2 bits;
    memcpy(&bits, q, 8);
    *reinterpret_cast<uint2*>(out) = bits;
  } else if constexpr (kV == 4) {
    uint32_t bits;
    memcpy(&bits, q, 4);
    *reinterpret_cast<uint32_t*>(out) = bits;
  } else {
    out[0] = q[0];
  }
}

template <class T, int kV>
__global__ void __launch_bounds__(kThreads) colwise_encode(const T* in, int64_t rows, int64_t k, int64_t chunk,
                                                           float threshold, const float* col_stats, int8_t* out) {
  const int row_lane = threadIdx.x / kLanes;
  const int64_t c = first_column(kV);
  if (c >= k) return;
  float f[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) f[j] = core::int8_row_factor(col_stats[c + j]);
  const int64_t r1 = min(rows, static_cast<int64_t>(blockIdx.y + 1) * chunk);
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * chunk + row_lane; r < r1; r += kRowLanes) {
    float v[kV];
    load<T, kV>(in, k, r, c, v);
    int8_t q[kV];
#pragma unroll
    for (int j = 0; j < kV; ++j)
      q[j] = core::int8_is_outlier(v[j], threshold) ? int8_t{0} : core::int8_encode(v[j], f[j]);
    store_codes<kV>(out + r * k + c, q);
  }
}

template <class T, int kV>
void launch(const Int8ColwiseQuantArgs& a, int64_t rows, int64_t k, cudaStream_t s, const char* op) {
  const int64_t strips = ceil_div(k, static_cast<int64_t>(kLanes) * kV);
  // Chunks of at least kChunkRows rows, as many as keep about four waves of CTAs.
  const int64_t target = std::max<int64_t>(1, 4 * sm_count(op) / strips);
  const int64_t chunk = std::max<int64_t>(kChunkRows, ceil_div(rows, target));
  const int64_t chunks = ceil_div(rows, chunk);
  LOWBIT_REQUIRE(strips <= INT32_MAX && chunks <= 65535, ErrorCode::invalid_argument, op,
                 ": input too large for the cuda kernel's grid (rows ", rows, ", K ", k, ")");
  const dim3 grid(static_cast<unsigned>(strips), static_cast<unsigned>(chunks));
  const T* in = a.input.ptr<const T>();
  colwise_absmax<T, kV><<<grid, kThreads, 0, s>>>(in, rows, k, chunk, a.threshold,
                                                  reinterpret_cast<unsigned*>(a.col_stats.ptr<float>()));
  check_launch(op, "colwise_absmax");
  colwise_encode<T, kV>
      <<<grid, kThreads, 0, s>>>(in, rows, k, chunk, a.threshold, a.col_stats.ptr<const float>(), a.out.ptr<int8_t>());
  check_launch(op, "colwise_encode");
}

}  // namespace

void int8_colwise_quant(const Int8ColwiseQuantArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = Int8ColwiseQuantArgs::kName;
  const int64_t k = a.input.size(-1);
  const int64_t rows = k == 0 ? 0 : a.input.numel() / k;
  if (k == 0) return;
  DeviceGuard guard(a.input.device.index, op);
  const cudaStream_t s = to_cuda(stream);
  // An empty input leaves every column's absmax 0, as on the CPU.
  check(cudaMemsetAsync(a.col_stats.ptr<float>(), 0, static_cast<size_t>(k) * sizeof(float), s), op,
        "cudaMemsetAsync(col_stats)");
  if (rows == 0) return;
  with_float_type(a.input.dtype, op, "input", [&](auto t) {
    using T = decltype(t);
    constexpr int kV = 16 / static_cast<int>(sizeof(T));
    const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
    // Whole aligned 16-byte vectors a row (the common case), else one element a thread.
    if (k % kV == 0 && addr(a.input.data) % 16 == 0 && addr(a.out.data) % kV == 0) {
      launch<T, kV>(a, rows, k, s, op);
    } else {
      launch<T, 1>(a, rows, k, s, op);
    }
  });
}

}  // namespace lowbit::cuda
