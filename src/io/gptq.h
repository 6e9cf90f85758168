// The GPTQ storage layout (AutoGPTQ / HF optimum "gptq" checkpoint format)
// and a round-to-nearest quantizer into it. For a linear layer W [N, K]
// (out_features N, in_features K), `bits` b, group size g, G = ceil(K / g):
//
//   qweight I32 [K * b / 32, N]  codes packed along K: row i, column n holds
//                                q[n, i * 32/b + j] in bits [b*j, b*j + b)
//   qzeros  I32 [G, N * b / 32]  zero points packed along N the same way,
//                                stored as z - 1 (the v1 format; "gptq_v2"
//                                files store z itself)
//   scales  F16 [G, N]
//   g_idx   I32 [K]              group of each input column (k / g here)
//
//   w[n, k] = (q[n, k] - z[g_idx[k], n]) * scales[g_idx[k], n]
//
// The quantizer is GPTQ's Quantizer.find_params per (row, group) followed by
// rounding to nearest: no Hessian, no error feedback, no act-order. It is
// RTN placed on GPTQ's grid, loadable by GPTQ kernels.
#pragma once

#include <cstdint>
#include <string_view>

#include "lowbit/tensor.h"

namespace lowbit::io::detail {

struct GptqSpec {
  int bits = 4;              // 2, 4 or 8 (codes that tile a 32-bit word)
  int64_t group_size = 128;  // -1: one group spanning K
  bool symmetric = true;
  bool v2_zeros = false;  // store z instead of z - 1
};

struct GptqTensors {
  Tensor qweight, qzeros, scales, g_idx;
};

// w: f32/f16/bf16 [N, K] on the CPU; K and N multiples of 32 / bits. A
// weight with any NaN or Inf is refused (invalid_argument naming `name`):
// an integer grid has no code for them, and an Inf would make its group's
// scale overflow.
GptqTensors gptq_quantize_rtn(const TensorRef& w, const GptqSpec& spec, std::string_view name = "weight");

// The weight [N, K] in `dtype` (f32/f16/bf16). Shapes must already be
// checked (layout_gptq.cpp); g_idx values are checked here.
Tensor gptq_dequantize(const TensorRef& qweight, const TensorRef& qzeros, const TensorRef& scales,
                       const TensorRef& g_idx, const GptqSpec& spec, DType dtype);

}  // namespace lowbit::io::detail
