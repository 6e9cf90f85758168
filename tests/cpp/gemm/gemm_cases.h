// Shared pieces of the matmul tests: random unpacked weights of every
// format, their dequantized values by the tests' own formulas (independent
// of src/core/weight_format.h's), float64 oracles, and CloseCases that pack
// the weight for each implementation's device.
#pragma once

#include <string>
#include <vector>

#include "harness/compare.h"
#include "lowbit/ops/gemm.h"

namespace lowbit::test {

// Unpacked weights (QuantizedWeight) as transform_weight takes them, on the host.
// Random values over W's whole range (and codes / bits of every kind but
// fp8 NaN), scales of `scale_dtype` giving O(1) weights, zeros per mode,
// bias when config.with_bias, a random perm when `with_perm`.
QuantizedWeight random_weight(const MatmulConfig& c, DType scale_dtype, bool with_perm);

// The value of weight element i (an integer value, a code, or fp8 / half
// bits as stored in the weight tensor), by the test's own tables.
float expected_value(WeightType t, const Tensor& weight, int64_t i);
// fp32 dequantized weight [N, K] in A's column order (perm undone).
std::vector<float> expected_dequant(const QuantizedWeight& w);

// out = A · Wᵀ + bias in float64, with Σ|terms| per element. A [M, K]; W
// [N, K] fp32; bias floats (empty for none).
Oracle matmul_oracle(const Tensor& A, const std::vector<float>& W, int64_t N, int64_t K,
                     const std::vector<float>& bias);

// A CloseCase running Matmul(config, device)'s primitive with the weight
// packed for each device; prepared_m from the config's list. The oracle
// multiplies by `dequantized` [N, K] (expected_dequant(w) when empty).
CloseCase<MatmulArgs> matmul_case(const std::string& name, const QuantizedWeight& w, const Tensor& A,
                                  const std::vector<float>& dequantized = {});

std::string describe(const MatmulConfig& c);

}  // namespace lowbit::test
