// Launch helpers: grid sizes for persistent (grid-stride) kernels.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/hd.h"
#include "cuda/common/check.h"

namespace lowbit::cuda {

// An attribute of the current device (cached per device and attribute).
int device_attribute(cudaDeviceAttr attr, const char* op);
// Multiprocessors of the current device.
int sm_count(const char* op);
// Whether the current device runs sm_90a code (compute capability 9.0).
bool device_is_sm90(const char* op);

// CTAs of `kernel` (with `threads` threads and `smem` dynamic shared bytes)
// that fit on one SM at once, cached per kernel and device.
int blocks_per_sm(const void* kernel, int threads, size_t smem, const char* op);

// CTAs of `kernel` the device holds at once (one wave; at least one an SM).
inline int64_t wave_ctas(const void* kernel, int threads, size_t smem, const char* op) {
  return static_cast<int64_t>(sm_count(op)) * std::max(1, blocks_per_sm(kernel, threads, smem, op));
}

// A persistent grid: as many CTAs as fit on the device at once (one full
// wave, so no CTA waits for a second wave), but no more than `work` tiles.
template <class Kernel>
int persistent_grid(Kernel* kernel, int threads, size_t smem, int64_t work, const char* op) {
  const int64_t wave = wave_ctas(reinterpret_cast<const void*>(kernel), threads, smem, op);
  return static_cast<int>(std::max<int64_t>(1, std::min(wave, work)));
}

using core::ceil_div;

inline int log2_exact(int64_t v) {
  int l = 0;
  while ((int64_t{1} << l) < v) ++l;
  return l;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
inline bool aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7u) == 0; }

}  // namespace lowbit::cuda
