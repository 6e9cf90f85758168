// Rows-layout instances of the span decoders: the integer (magic-number)
// decoder of one bit width, and the 4-bit tables, each with span loads of 16
// or 8 bytes × fp16 / bf16 × M tiles (the generated instances/rows_*.cu, one
// translation unit each).
#pragma once

#include "cuda/gemm/instance.cuh"

namespace lowbit::cuda::gemm {

template <int kBits, int kLB>
struct Magic {
  template <class T>
  using Of = MagicDecoder<kBits, kLB, T>;
};

template <int kBits>
KernelInfo magic_bits(int lb, bool bf16, int mt) {
  if (lb == 16) return instance_at<Magic<kBits, 16>::template Of>(bf16, mt);
  if (lb == 8) return instance_at<Magic<kBits, 8>::template Of>(bf16, mt);
  return {};
}

template <int kLB>
struct Table {
  template <class T>
  using Of = TableDecoder<kLB, T>;
};

// A template, so only the translation unit that calls it instantiates the kernels.
template <int = 0>
KernelInfo table_spans(int lb, bool bf16, int mt) {
  if (lb == 16) return instance_at<Table<16>::template Of>(bf16, mt);
  if (lb == 8) return instance_at<Table<8>::template Of>(bf16, mt);
  return {};
}

}  // namespace lowbit::cuda::gemm
