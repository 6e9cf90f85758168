// Element types of lowbit tensors, and their traits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lowbit {

// Packed sub-byte kinds (u4 .. i1) store 8/bits elements per byte, the first
// element in the most significant bits (see docs/formats.md).
enum class DType : uint8_t {
  f32,
  f16,
  bf16,
  f8_e4m3,  // OCP E4M3FN: no infinities, max 448
  f8_e5m2,  // OCP E5M2: IEEE-like, max 57344
  i8,
  u8,
  i32,
  i64,
  u4,
  i4,
  u2,
  i2,
  u1,
  i1,
};

inline constexpr int kNumDTypes = 15;

struct DTypeInfo {
  std::string_view name;
  int bits;
  bool is_signed;
  bool is_float;
};

constexpr DTypeInfo dtype_info(DType t) {
  switch (t) {
    case DType::f32: return {"float32", 32, true, true};
    case DType::f16: return {"float16", 16, true, true};
    case DType::bf16: return {"bfloat16", 16, true, true};
    case DType::f8_e4m3: return {"float8_e4m3fn", 8, true, true};
    case DType::f8_e5m2: return {"float8_e5m2", 8, true, true};
    case DType::i8: return {"int8", 8, true, false};
    case DType::u8: return {"uint8", 8, false, false};
    case DType::i32: return {"int32", 32, true, false};
    case DType::i64: return {"int64", 64, true, false};
    case DType::u4: return {"uint4", 4, false, false};
    case DType::i4: return {"int4", 4, true, false};
    case DType::u2: return {"uint2", 2, false, false};
    case DType::i2: return {"int2", 2, true, false};
    case DType::u1: return {"uint1", 1, false, false};
    case DType::i1: return {"int1", 1, true, false};
  }
  return {"invalid", 0, false, false};
}

constexpr std::string_view dtype_name(DType t) { return dtype_info(t).name; }
constexpr int dtype_bits(DType t) { return dtype_info(t).bits; }
constexpr bool dtype_is_packed(DType t) { return dtype_info(t).bits < 8; }

// Bytes needed to store `numel` elements of `t` (packed kinds round up).
constexpr size_t dtype_storage_bytes(DType t, int64_t numel) {
  // In two parts, so that no intermediate exceeds the byte count.
  return static_cast<size_t>(numel / 8 * dtype_bits(t) + (numel % 8 * dtype_bits(t) + 7) / 8);
}

// Parses a dtype name as printed by dtype_name ("float32", "bfloat16", ...);
// also accepts the short forms "f32", "fp16", "bf16", "half", "float".
// Returns false when the name is unknown.
bool parse_dtype(std::string_view name, DType* out);

}  // namespace lowbit
