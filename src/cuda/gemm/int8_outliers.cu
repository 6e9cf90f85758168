// int8_linear_outliers on CUDA (LLM.int8's fp32 part for the outlier columns,
// docs/int8.md): two launches, nothing read on the host (int8_linear, whose
// quantization lists the columns itself, runs the second alone).
//   1. One CTA compacts outlier_mask into the ascending list of marked
//      columns and their count (the workspace).
//   2. 64 x 64 tiles of out: each CTA reads the count (and returns at once
//      when it is zero, leaving out as it is), then takes the marked columns
//      32 at a time: a's and b's values there gathered into shared memory
//      (b dequantized), each thread adding them into its 4 x 4 sums in
//      ascending column order, the same steps as the CPU's; out is read,
//      the sums added, and written back (4 columns a vector access).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/float_convert.h"
#include "core/hd.h"
#include "core/quant_math.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/gemm/ops.h"
#include "cuda/quant/outlier_columns.cuh"

namespace lowbit::cuda {
namespace {

constexpr int kCompactThreads = 1024;

// idx[0, count) = the marked columns, ascending; *count their number.
__global__ void __launch_bounds__(kCompactThreads)
    compact_outlier_columns(const uint8_t* mask, int64_t K, int32_t* idx, int32_t* count) {
  __shared__ int warp_counts[kCompactThreads / 32 + 1];
  compact_marked_columns<kCompactThreads>(mask, K, idx, count, warp_counts);
}

constexpr int kTile = 64, kChunk = 32, kThreads = 256;

// Four elements of T as one load or store.
template <class T>
struct Vec4 {
  using type = uint2;  // 16-bit types
};
template <>
struct Vec4<float> {
  using type = float4;
};

template <class T>
__global__ void __launch_bounds__(kThreads)
    outlier_tiles(const T* a, const int32_t* idx, const int32_t* count, const int8_t* b, const float* b_stats,
                  T* out, int64_t rows, int64_t N, int64_t K, bool vec) {
  const int C = *count;
  if (C == 0) return;
  __shared__ float as[kChunk][kTile];
  __shared__ float ws[kChunk][kTile];
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTile, n0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  float acc[4][4] = {};
  for (int c0 = 0; c0 < C; c0 += kChunk) {
    const int len = min(kChunk, C - c0);
    __syncthreads();  // the previous chunk read by every thread
    for (int i = threadIdx.x; i < kChunk * kTile; i += kThreads) {
      const int j = i / kTile, r = i % kTile;
      float av = 0.0f, wv = 0.0f;
      if (j < len) {
        const int64_t k = idx[c0 + j];
        if (m0 + r < rows) av = core::to_f32(a[(m0 + r) * K + k]);
        if (n0 + r < N) wv = core::int8_decode(b[(n0 + r) * K + k], __ldg(b_stats + n0 + r));
      }
      as[j][r] = av;
      ws[j][r] = wv;
    }
    __syncthreads();
    for (int j = 0; j < len; ++j) {
      float av[4], wv[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        av[q] = as[j][4 * ty + q];
        wv[q] = ws[j][4 * tx + q];
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = core::int8_fp32_step(acc[r][c], av[r], wv[c]);
      }
    }
  }
  // out += the sums: 4 consecutive columns of a row as one vector where they fit (vec: N % 4 == 0, out aligned).
  const int64_t n = n0 + 4 * tx;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t m = m0 + 4 * ty + r;
    if (m >= rows || n >= N) continue;
    T* o = out + m * N + n;
    if (vec && n + 4 <= N) {
      using V = typename Vec4<T>::type;
      V v = *reinterpret_cast<const V*>(o);
      T* e = reinterpret_cast<T*>(&v);
#pragma unroll
      for (int c = 0; c < 4; ++c) e[c] = core::from_f32<T>(core::add_rn(core::to_f32(e[c]), acc[r][c]));
      *reinterpret_cast<V*>(o) = v;
      continue;
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (n + c < N) o[c] = core::from_f32<T>(core::add_rn(core::to_f32(o[c]), acc[r][c]));
    }
  }
}

}  // namespace

size_t int8_linear_outliers_workspace(const Int8LinearOutliersArgs& a) {
  return static_cast<size_t>(a.a.size(-1) + 1) * sizeof(int32_t);
}

void int8_linear_outlier_terms(const Int8LinearOutliersArgs& a, const int32_t* outliers, Stream stream) {
  const char* op = Int8LinearOutliersArgs::kName;
  const int64_t K = a.a.size(-1), rows = a.a.numel() / K, N = a.b.shape[0];
  if (rows == 0 || N == 0) return;
  LOWBIT_REQUIRE(ceil_div(N, kTile) <= 65535 && K <= INT32_MAX, ErrorCode::invalid_argument, op,
                 ": shape too large for the cuda kernel's grid (N ", N, ", K ", K, ")");
  DeviceGuard guard(a.a.device.index, op);
  const cudaStream_t s = to_cuda(stream);
  with_float_type(a.a.dtype, op, "a", [&](auto t) {
    using T = decltype(t);
    const dim3 grid(static_cast<unsigned>(ceil_div(rows, kTile)), static_cast<unsigned>(ceil_div(N, kTile)));
    const bool vec = N % 4 == 0 && reinterpret_cast<uintptr_t>(a.out.data) % (4 * sizeof(T)) == 0;
    outlier_tiles<T><<<grid, kThreads, 0, s>>>(a.a.ptr<const T>(), outliers + 1, outliers, a.b.ptr<const int8_t>(),
                                               a.b_stats.ptr<const float>(), a.out.ptr<T>(), rows, N, K, vec);
    check_launch(op, "outlier_tiles");
  });
}

void int8_linear_outliers(const Int8LinearOutliersArgs& a, void* workspace, Stream stream) {
  const char* op = Int8LinearOutliersArgs::kName;
  const int64_t K = a.a.size(-1);
  if (a.a.numel() == 0 || a.b.shape[0] == 0) return;
  DeviceGuard guard(a.a.device.index, op);
  auto* outliers = static_cast<int32_t*>(workspace);
  compact_outlier_columns<<<1, kCompactThreads, 0, to_cuda(stream)>>>(a.outlier_mask.ptr<const uint8_t>(), K,
                                                                      outliers + 1, outliers);
  check_launch(op, "compact_outlier_columns");
  int8_linear_outlier_terms(a, outliers, stream);
}

}  // namespace lowbit::cuda
