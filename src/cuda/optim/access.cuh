// Element access of the optimizer kernels: a thread's kN consecutive
// elements moved as 16-byte words where the array is 16-byte aligned and the
// chunk is whole, element by element otherwise (the tail, misaligned views).
#pragma once

#include <cstdint>

#include "cuda/common/vec.cuh"

namespace lowbit::cuda::optim {

// gnorm_scale times the update's device clip scale where it has one
// ("Clip scale" in lowbit/ops/optim.h: the CPU's product, rounded to f32).
__device__ __forceinline__ float with_clip(float gnorm_scale, const float* clip) {
  return clip != nullptr ? gnorm_scale * *clip : gnorm_scale;
}

template <class T, int kN>
__device__ __forceinline__ void load_in(Chunk<T, kN>& c, const T* src, int valid, bool vec) {
  if (valid == kN && vec) {
    load_chunk(c, src);  // read-only for the whole kernel: the non-coherent path is safe
  } else {
    load_chunk_partial(c, src, valid);
  }
}

// Arrays the kernel also writes: plain loads, never the non-coherent path.
template <class T, int kN>
__device__ __forceinline__ void load_inout(Chunk<T, kN>& c, const T* src, int valid, bool vec) {
  if (valid == kN && vec) {
    const uint4* w = reinterpret_cast<const uint4*>(src);
#pragma unroll
    for (int i = 0; i < Chunk<T, kN>::kWords; ++i) c.word[i] = w[i];
  } else {
    load_chunk_partial(c, src, valid);
  }
}

template <class T, int kN>
__device__ __forceinline__ void store_out(T* dst, const Chunk<T, kN>& c, int valid, bool vec) {
  if (valid == kN && vec) {
    store_chunk(dst, c);
  } else {
    store_chunk_partial(dst, c, valid);
  }
}

// 8 one-byte codes, moved as one 8-byte word where aligned and whole.
union Codes8 {
  uint2 word;
  uint8_t c[8];
};

__device__ __forceinline__ void load_codes(Codes8& c, const uint8_t* src, int valid, bool vec) {
  if (valid == 8 && vec) {
    c.word = *reinterpret_cast<const uint2*>(src);
  } else {
    c.word = make_uint2(0u, 0u);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (i < valid) c.c[i] = src[i];
    }
  }
}

__device__ __forceinline__ void store_codes(uint8_t* dst, const Codes8& c, int valid, bool vec) {
  if (valid == 8 && vec) {
    *reinterpret_cast<uint2*>(dst) = c.word;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (i < valid) dst[i] = c.c[i];
    }
  }
}

}  // namespace lowbit::cuda::optim
