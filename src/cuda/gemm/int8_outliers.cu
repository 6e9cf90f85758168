// int8_linear_outliers on CUDA (LLM.int8's fp32 part for the outlier columns,
// docs/int8.md): two launches, nothing read on the host (int8_linear, whose
// quantization lists the columns itself, runs the second alone).
//   1. One CTA compacts outlier_mask into the ascending list of marked
//      columns and their count (the workspace).
//   2. 64 x 128 tiles of out: each CTA reads the count (and returns at once
//      when it is zero, leaving out as it is), loads its part of out, then
//      takes the marked columns 32 at a time: a's and b's values there
//      gathered into shared memory (b dequantized), each thread adding them
//      into its 4 x 8 sums in ascending column order, the same steps as the
//      CPU's; then the sums go into out (8 columns a 16-byte access where
//      they fit).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/float_convert.h"
#include "core/hd.h"
#include "core/quant_math.h"
#include "cuda/common/check.h"
#include "cuda/common/convert.cuh"
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

constexpr int kTileM = 64, kTileN = 128, kChunk = 32, kThreads = 256;
constexpr int kRowsPer = 4, kColsPer = 8;  // a thread's outputs: rows 4 ty + r, columns 8 tx + c

// Eight elements of T as 16-byte words.
template <class T>
struct Vec8 {
  static constexpr int kWords = static_cast<int>(sizeof(T)) / 2;
  uint4 w[kWords];
  __device__ __forceinline__ T (&elements())[kColsPer] { return *reinterpret_cast<T(*)[kColsPer]>(w); }
};

// Grid: (row tiles of 64, column tiles of 128). vec: out's rows hold whole
// aligned runs of 8 (N % 8 == 0, out 16-byte aligned).
template <class T>
__global__ void __launch_bounds__(kThreads)
    outlier_tiles(const T* a, const int32_t* idx, const int32_t* count, const int8_t* b, const float* b_stats, T* out,
                  int64_t rows, int64_t N, int64_t K, bool vec) {
  const int C = *count;
  if (C == 0) return;
  __shared__ __align__(16) float as[kChunk][kTileM];
  __shared__ __align__(16) float ws[kChunk][kTileN];
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTileM, n0 = static_cast<int64_t>(blockIdx.y) * kTileN;
  const int ty = threadIdx.x / (kTileN / kColsPer), tx = threadIdx.x % (kTileN / kColsPer);
  const int64_t n = n0 + kColsPer * tx;
  const bool whole = vec && n + kColsPer <= N;
  // out's values first: their loads are in flight while the columns are gathered.
  Vec8<T> o[kRowsPer];
#pragma unroll
  for (int r = 0; r < kRowsPer; ++r) {
    const int64_t m = m0 + kRowsPer * ty + r;
    if (whole && m < rows) {
      const auto* src = reinterpret_cast<const uint4*>(out + m * N + n);
#pragma unroll
      for (int w = 0; w < Vec8<T>::kWords; ++w) o[r].w[w] = src[w];
    }
  }
  float acc[kRowsPer][kColsPer] = {};
  for (int c0 = 0; c0 < C; c0 += kChunk) {
    const int len = min(kChunk, C - c0);
    __syncthreads();  // the previous chunk read by every thread
    // The chunk's columns of a's rows and b's (dequantized) rows; slots past them stay unread.
    for (int i = threadIdx.x; i < len * (kTileM + kTileN); i += kThreads) {
      const int j = i / (kTileM + kTileN), r = i % (kTileM + kTileN);
      const int64_t k = idx[c0 + j];
      if (r < kTileM) {
        as[j][r] = m0 + r < rows ? core::to_f32(a[(m0 + r) * K + k]) : 0.0f;
      } else {
        const int64_t nr = n0 + r - kTileM;
        ws[j][r - kTileM] = nr < N ? core::int8_decode(b[nr * K + k], __ldg(b_stats + nr)) : 0.0f;
      }
    }
    __syncthreads();
    for (int j = 0; j < len; ++j) {
      const float4 av = *reinterpret_cast<const float4*>(&as[j][kRowsPer * ty]);
      const float4 w0 = *reinterpret_cast<const float4*>(&ws[j][kColsPer * tx]);
      const float4 w1 = *reinterpret_cast<const float4*>(&ws[j][kColsPer * tx + 4]);
      const float avs[kRowsPer] = {av.x, av.y, av.z, av.w};
      const float wvs[kColsPer] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
      for (int r = 0; r < kRowsPer; ++r) {
#pragma unroll
        for (int c = 0; c < kColsPer; ++c) acc[r][c] = core::int8_fp32_step(acc[r][c], avs[r], wvs[c]);
      }
    }
  }
  // out += the sums, in the same rounding steps as the CPU's.
#pragma unroll
  for (int r = 0; r < kRowsPer; ++r) {
    const int64_t m = m0 + kRowsPer * ty + r;
    if (m >= rows || n >= N) continue;
    T* dst = out + m * N + n;
    if (whole) {
      T(&e)[kColsPer] = o[r].elements();
      float v[kColsPer];
      to_floats(e, v);
#pragma unroll
      for (int c = 0; c < kColsPer; ++c) v[c] = core::add_rn(v[c], acc[r][c]);
      from_floats(v, e);
#pragma unroll
      for (int w = 0; w < Vec8<T>::kWords; ++w) reinterpret_cast<uint4*>(dst)[w] = o[r].w[w];
      continue;
    }
#pragma unroll
    for (int c = 0; c < kColsPer; ++c) {
      if (n + c < N) dst[c] = core::from_f32<T>(core::add_rn(core::to_f32(dst[c]), acc[r][c]));
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
  LOWBIT_REQUIRE(ceil_div(N, kTileN) <= 65535 && ceil_div(rows, kTileM) <= INT32_MAX && K <= INT32_MAX,
                 ErrorCode::invalid_argument, op, ": shape too large for the cuda kernel's grid (N ", N, ", K ", K,
                 ")");
  DeviceGuard guard(a.a.device.index, op);
  const cudaStream_t s = to_cuda(stream);
  with_float_type(a.a.dtype, op, "a", [&](auto t) {
    using T = decltype(t);
    const dim3 grid(static_cast<unsigned>(ceil_div(rows, kTileM)), static_cast<unsigned>(ceil_div(N, kTileN)));
    const bool vec = N % kColsPer == 0 && aligned16(a.out.data);
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
