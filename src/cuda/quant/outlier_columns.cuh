// LLM.int8's marked columns (docs/int8.md): an outlier mask compacted by one
// CTA into the ascending list of the columns whose byte is set.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lowbit::cuda {

// The exclusive prefix sum of `mine` over the CTA's threads in thread order;
// the sum of all in `total`. Every thread calls it; warp_counts is shared
// memory of kThreads / 32 + 1 ints, free again when it returns.
template <int kThreads>
__device__ __forceinline__ int cta_exclusive_scan(int mine, int* warp_counts, int& total) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = mine;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += v;
  }
  if (lane == 31) warp_counts[warp] = incl;
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int w = 0; w < kWarps; ++w) {
      const int c = warp_counts[w];
      warp_counts[w] = run;
      run += c;
    }
    warp_counts[kWarps] = run;
  }
  __syncthreads();
  const int first = warp_counts[warp] + incl - mine;
  total = warp_counts[kWarps];
  __syncthreads();  // every thread has read warp_counts
  return first;
}

// idx[0, count) = the marked columns of mask[0, K), ascending; *count their
// number. Every thread of the CTA calls it; warp_counts is shared memory of
// kThreads / 32 + 1 ints. Each thread counts a contiguous segment of the
// mask, a scan over the CTA gives its first slot, and a second read writes
// its columns: a few round trips to memory whatever K. The mask is read
// through L2 (ld.cg), so marks stored by other CTAs before a fence are seen.
// Returns the count to every thread.
template <int kThreads>
__device__ int compact_marked_columns(const uint8_t* mask, int64_t K, int32_t* idx, int32_t* count, int* warp_counts) {
  const int64_t seg = (K + kThreads - 1) / kThreads;
  const int64_t k0 = threadIdx.x * seg, k1 = k0 + seg < K ? k0 + seg : K;
  int mine = 0;
#pragma unroll 16
  for (int64_t k = k0; k < k1; ++k) mine += __ldcg(mask + k) != 0;
  int total = 0;
  int slot = cta_exclusive_scan<kThreads>(mine, warp_counts, total);
#pragma unroll 16
  for (int64_t k = k0; k < k1; ++k) {
    if (__ldcg(mask + k) != 0) idx[slot++] = static_cast<int32_t>(k);
  }
  if (threadIdx.x == 0) *count = total;
  return total;
}

}  // namespace lowbit::cuda
