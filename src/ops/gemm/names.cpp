// Names of the matmul enums, as BitBLAS spells them.
#include <string_view>

#include "lowbit/ops/gemm.h"

namespace lowbit {

std::string_view weight_type_name(WeightType t) {
  switch (t) {
    case WeightType::int8: return "int8";
    case WeightType::int4: return "int4";
    case WeightType::int2: return "int2";
    case WeightType::int1: return "int1";
    case WeightType::uint8: return "uint8";
    case WeightType::uint4: return "uint4";
    case WeightType::uint2: return "uint2";
    case WeightType::uint1: return "uint1";
    case WeightType::nf4: return "nf4";
    case WeightType::fp4: return "fp4";
    case WeightType::fp4_e2m1: return "fp4_e2m1";
    case WeightType::fp8_e4m3: return "fp8_e4m3";
    case WeightType::f16: return "float16";
    case WeightType::bf16: return "bfloat16";
  }
  return "invalid";
}

bool parse_weight_type(std::string_view name, WeightType* out) {
  for (int i = 0; i < kNumWeightTypes; ++i) {
    const auto t = static_cast<WeightType>(i);
    if (weight_type_name(t) == name) {
      *out = t;
      return true;
    }
  }
  struct Alias {
    std::string_view name;
    WeightType type;
  };
  static constexpr Alias kAliases[] = {{"fp16", WeightType::f16},
                                       {"f16", WeightType::f16},
                                       {"bf16", WeightType::bf16},
                                       {"float8_e4m3fn", WeightType::fp8_e4m3},
                                       {"e4m3", WeightType::fp8_e4m3}};
  for (const Alias& a : kAliases) {
    if (a.name == name) {
      *out = a.type;
      return true;
    }
  }
  return false;
}

std::string_view zeros_mode_name(ZerosMode m) {
  switch (m) {
    case ZerosMode::original: return "original";
    case ZerosMode::rescale: return "rescale";
    case ZerosMode::quantized: return "quantized";
  }
  return "invalid";
}

bool parse_zeros_mode(std::string_view name, ZerosMode* out) {
  for (ZerosMode m : {ZerosMode::original, ZerosMode::rescale, ZerosMode::quantized}) {
    if (zeros_mode_name(m) == name) {
      *out = m;
      return true;
    }
  }
  return false;
}

std::string_view weight_layout_name(WeightLayout l) {
  switch (l) {
    case WeightLayout::rows: return "rows";
    case WeightLayout::tiles: return "tiles";
  }
  return "invalid";
}

}  // namespace lowbit
