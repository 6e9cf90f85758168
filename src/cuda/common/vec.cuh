// Vector access for memory-bound kernels: a thread moves its elements as
// 16-byte words (ld/st.global.v4), and converts them with the one definition
// of each format (src/core/float_convert.h, or the proven fast paths in
// convert.cuh).
#pragma once

#include <cstdint>

#include "core/float_convert.h"
#include "cuda/common/convert.cuh"

namespace lowbit::cuda {

// kN elements of T held as whole 16-byte words, or element by element.
// kN * sizeof(T) must be a multiple of 16.
template <class T, int kN>
union Chunk {
  static constexpr int kWords = kN * static_cast<int>(sizeof(T)) / 16;
  static_assert(kWords * 16 == kN * static_cast<int>(sizeof(T)), "a chunk is whole 16-byte words");
  uint4 word[kWords];
  T elem[kN];
};

// Loads kN elements at p (p 16-byte aligned) through the read-only path. No
// evict-first hint: when a thread's words are spread over several warp-wide
// instructions, the first may leave a sector half-used in L2 that the next
// still needs.
template <class T, int kN>
__device__ __forceinline__ void load_chunk(Chunk<T, kN>& c, const T* p) {
  const uint4* w = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < Chunk<T, kN>::kWords; ++i) c.word[i] = __ldg(w + i);
}

// Loads the first `valid` elements at p one by one (unaligned or tail), the
// rest as zero bits (0.0f for every float type).
template <class T, int kN>
__device__ __forceinline__ void load_chunk_partial(Chunk<T, kN>& c, const T* p, int valid) {
#pragma unroll
  for (int i = 0; i < Chunk<T, kN>::kWords; ++i) c.word[i] = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    if (i < valid) c.elem[i] = p[i];
  }
}

template <class T, int kN>
__device__ __forceinline__ void store_chunk(T* p, const Chunk<T, kN>& c) {
  uint4* w = reinterpret_cast<uint4*>(p);
#pragma unroll
  for (int i = 0; i < Chunk<T, kN>::kWords; ++i) w[i] = c.word[i];  // plain: partial sectors merge in L2
}

template <class T, int kN>
__device__ __forceinline__ void store_chunk_partial(T* p, const Chunk<T, kN>& c, int valid) {
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    if (i < valid) p[i] = c.elem[i];
  }
}

}  // namespace lowbit::cuda
