// The check of `lowbit bench gemm`: each result against the CPU backend's on
// the first rows of A and two column slices of W.
#pragma once

#include <cstdint>
#include <vector>

#include "lowbit/ops/gemm.h"
#include "lowbit/tensor.h"

namespace lowbit::bench {

constexpr double kCheckTol = 1e-2;  // relative L2 error allowed (fp16 rounding is ~5e-4)

// The CPU backend's result (f32) for the first 8 rows of A on the first and
// last 256 columns of W: the device result must match it there.
struct Reference {
  struct Slice {
    int64_t n0, n;
    Tensor out;  // f32 [rows, n]
  };
  int64_t rows = 0;
  std::vector<Slice> slices;
};

// The reference of a config for A (on the host) and the unpacked weight.
Reference make_reference(const MatmulConfig& config, const Tensor& A_host, const Tensor& weight, const Tensor& scale,
                         const Tensor& zeros);

// Relative L2 error of the device's first rows against the reference; NaN
// when a compared value is not finite.
double check_error(const Reference& ref, const TensorRef& out, int64_t M, int64_t N);

}  // namespace lowbit::bench
