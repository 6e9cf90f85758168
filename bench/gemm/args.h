// What `lowbit bench gemm` measures: weight shapes, batch sizes and weight
// type specs, their defaults and their parsing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "benchmarks.h"
#include "lowbit/ops/gemm.h"

namespace lowbit::bench {

// The default shapes (the Llama 3 8B/70B projections on the GPU), batch
// sizes M, types, repetitions and warm-up runs for the options left empty.
void fill_defaults(GemmOptions& o, bool gpu);

// A weight [N, K]: N outputs, K inputs.
struct WeightShape {
  int64_t N = 0, K = 0;
  std::string name() const;
};
// "NxK" with N, K >= 1; nullopt otherwise.
std::optional<WeightShape> parse_shape(std::string_view s);

// A weight type and its scaling: "TYPE[:gN|:row|:noscale][:zeros[=MODE]]".
// TYPE is a MatmulConfig W_dtype name (int8, int4, int2, int1, uint8, uint4,
// uint2, uint1, nf4, fp4, fp4_e2m1, fp8_e4m3, float16/f16, bfloat16/bf16).
// Quantized types scale over groups of 128 unless told otherwise (gN: groups
// of N, row: one scale per row, noscale: none); zeros means quantized
// (GPTQ-style) zeros, zeros=original|rescale float zeros.
struct TypeSpec {
  std::string name;  // canonical spelling
  WeightType type = WeightType::int4;
  bool scaling = true;
  int64_t group = 128;
  bool zeros = false;
  ZerosMode zeros_mode = ZerosMode::quantized;
};
// Throws lowbit::Error(invalid_argument) with the reason, also where the
// config's own rules refuse the spec.
TypeSpec parse_type_spec(std::string_view spec);

// The config of type `t` for a weight [N, K] prepared for batch sizes `m`:
// A and out f16, f32 accumulation.
MatmulConfig config_for(const TypeSpec& t, int64_t N, int64_t K, const std::vector<int64_t>& m);

}  // namespace lowbit::bench
