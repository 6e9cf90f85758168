// The weight formats of the mixed-precision matmul (docs/gemm.md),
// defined once for host and device code: each WeightType's bits, value range
// and code -> value map; the dequantization rule; the bit-stream packing
// rule of the `rows` layout and of packed (GPTQ-style) zeros; and the tile
// permutation of the CUDA `tiles` layout.
#pragma once

#include <cstdint>

#include "core/float_convert.h"
#include "core/hd.h"
#include "core/tables.h"
#include "lowbit/ops/gemm.h"

namespace lowbit::core {

// How a code becomes a value.
enum class WeightKind : uint8_t {
  sint,   // two's complement in `bits` bits
  pm1,    // int1: code 0 -> -1, code 1 -> +1
  uint,   // the code itself
  table,  // a 16-entry table (nf4, fp4, fp4_e2m1)
  fp8,    // E4M3FN bits
  f16,    // IEEE half bits
  bf16,   // bfloat16 bits
};

struct WeightTypeInfo {
  int bits;  // 1, 2, 4, 8 or 16 per element in a packed stream
  WeightKind kind;
  int32_t min;  // integer kinds: the value range; other kinds: the code range
  int32_t max;
};

LOWBIT_HD constexpr WeightTypeInfo weight_type_info(WeightType t) {
  switch (t) {
    case WeightType::int8: return {8, WeightKind::sint, -128, 127};
    case WeightType::int4: return {4, WeightKind::sint, -8, 7};
    case WeightType::int2: return {2, WeightKind::sint, -2, 1};
    case WeightType::int1: return {1, WeightKind::pm1, -1, 1};
    case WeightType::uint8: return {8, WeightKind::uint, 0, 255};
    case WeightType::uint4: return {4, WeightKind::uint, 0, 15};
    case WeightType::uint2: return {2, WeightKind::uint, 0, 3};
    case WeightType::uint1: return {1, WeightKind::uint, 0, 1};
    case WeightType::nf4: return {4, WeightKind::table, 0, 15};
    case WeightType::fp4: return {4, WeightKind::table, 0, 15};
    case WeightType::fp4_e2m1: return {4, WeightKind::table, 0, 15};
    case WeightType::fp8_e4m3: return {8, WeightKind::fp8, 0, 255};
    case WeightType::f16: return {16, WeightKind::f16, 0, 65535};
    case WeightType::bf16: return {16, WeightKind::bf16, 0, 65535};
  }
  return {0, WeightKind::uint, 0, 0};
}

LOWBIT_HD constexpr int weight_bits(WeightType t) { return weight_type_info(t).bits; }
LOWBIT_HD constexpr bool weight_is_integer(WeightType t) {
  const WeightKind k = weight_type_info(t).kind;
  return k == WeightKind::sint || k == WeightKind::pm1 || k == WeightKind::uint;
}
LOWBIT_HD constexpr uint32_t code_mask(int bits) { return bits >= 32 ? ~0u : (1u << bits) - 1u; }

// Integer kinds: the value a code stands for, and the code of a value (which
// must lie in [min, max]; int1 takes only -1 and +1).
LOWBIT_HD int32_t weight_int_value(WeightType t, uint32_t code) {
  const WeightTypeInfo info = weight_type_info(t);
  if (info.kind == WeightKind::pm1) return code ? 1 : -1;
  if (info.kind == WeightKind::sint) {
    const int shift = 32 - info.bits;  // sign-extend the low `bits` bits
    return static_cast<int32_t>(code << shift) >> shift;
  }
  return static_cast<int32_t>(code);
}
LOWBIT_HD uint32_t weight_int_code(WeightType t, int32_t value) {
  const WeightTypeInfo info = weight_type_info(t);
  if (info.kind == WeightKind::pm1) return value > 0 ? 1u : 0u;
  return static_cast<uint32_t>(value) & code_mask(info.bits);
}
LOWBIT_HD constexpr bool weight_int_in_range(WeightType t, int32_t value) {
  const WeightTypeInfo info = weight_type_info(t);
  if (info.kind == WeightKind::pm1) return value == -1 || value == 1;
  return value >= info.min && value <= info.max;
}

// The host table of a table kind (null for others). Device code keeps its
// own copy of these 16 values (a kernel parameter or shared memory).
inline const float* weight_table16(WeightType t) {
  switch (t) {
    case WeightType::nf4: return kNf4Table;
    case WeightType::fp4: return kFp4Table;
    case WeightType::fp4_e2m1: return kFp4E2m1Table;
    default: return nullptr;
  }
}

// The fp32 value of a code; `table16` is weight_table16(t) (or its device
// copy) for table kinds and ignored otherwise. Exact for every kind.
LOWBIT_HD float weight_code_value(WeightType t, uint32_t code, const float* table16) {
  switch (weight_type_info(t).kind) {
    case WeightKind::sint:
    case WeightKind::pm1:
    case WeightKind::uint: return static_cast<float>(weight_int_value(t, code));
    case WeightKind::table: return table16[code & 15u];
    case WeightKind::fp8: return e4m3_to_f32(static_cast<uint8_t>(code));
    case WeightKind::f16: return f16_to_f32(static_cast<uint16_t>(code));
    case WeightKind::bf16: return bf16_to_f32(static_cast<uint16_t>(code));
  }
  return 0.0f;
}

// ----------------------------------------------------------- dequantization

// The dequantization rule of a weight format, v = weight_code_value(code):
//   value:     w = v
//   scale:     w = v * s
//   subtract:  w = (v - z) * s     zeros original, and quantized with z the
//                                  zero code's value (v - z is then an exact
//                                  integer, the GPTQ (q - z) * s)
//   rescale:   w = v * s - z
// Each step rounds to fp32 on its own (never an FMA), on every backend.
enum class DequantRule : uint8_t { value, scale, subtract, rescale };

LOWBIT_HD constexpr DequantRule dequant_rule(bool with_scaling, bool with_zeros, ZerosMode mode) {
  if (!with_scaling) return DequantRule::value;
  if (!with_zeros) return DequantRule::scale;
  return mode == ZerosMode::rescale ? DequantRule::rescale : DequantRule::subtract;
}
inline DequantRule dequant_rule(const WeightFormat& f) {
  return dequant_rule(f.with_scaling, f.with_zeros, f.zeros_mode);
}

LOWBIT_HD float dequant(DequantRule rule, float v, float s, float z) {
  switch (rule) {
    case DequantRule::value: return v;
    case DequantRule::scale: return mul_rn(v, s);
    case DequantRule::subtract: return mul_rn(add_rn(v, -z), s);
    case DequantRule::rescale: return add_rn(mul_rn(v, s), -z);
  }
  return v;
}

// ---------------------------------------------------------------- bit streams

// A stream of b-bit codes (b = 1, 2, 4, 8, 16): element i occupies bits
// [i*b, i*b + b) counted from bit 0 of byte 0, least significant bit first —
// the same bits as 32-bit little-endian words with element j of a word in
// bits [j*b, j*b + b) (GPTQ's int32 packing). Rows of the `rows` layout and
// packed zeros are such streams.
LOWBIT_HD uint32_t stream_read(const uint8_t* s, int64_t i, int bits) {
  if (bits == 16) return static_cast<uint32_t>(s[2 * i]) | (static_cast<uint32_t>(s[2 * i + 1]) << 8);
  const int64_t bit = i * bits;
  return (static_cast<uint32_t>(s[bit >> 3]) >> (bit & 7)) & code_mask(bits);
}

// ORs the code into a zero-initialized stream.
LOWBIT_HD void stream_write(uint8_t* s, int64_t i, int bits, uint32_t code) {
  if (bits == 16) {
    s[2 * i] = static_cast<uint8_t>(code);
    s[2 * i + 1] = static_cast<uint8_t>(code >> 8);
    return;
  }
  const int64_t bit = i * bits;
  s[bit >> 3] = static_cast<uint8_t>(s[bit >> 3] | ((code & code_mask(bits)) << (bit & 7)));
}

// `rows` layout: each row of W padded to a multiple of 16 bytes, so rows
// start 16-byte aligned (vector loads) and a reader may fetch whole 16-byte
// words; the padding bits are 0.
inline constexpr int64_t kRowsAlignBytes = 16;
LOWBIT_HD constexpr int64_t rows_row_bytes(int64_t K, int bits) {
  const int64_t bytes = (K * bits + 7) / 8;
  return (bytes + kRowsAlignBytes - 1) / kRowsAlignBytes * kRowsAlignBytes;
}

// Packed quantized zeros: one stream of N codes per group, padded to whole
// 32-bit words: i32 [groups, packed_zeros_words(N, bits)].
LOWBIT_HD constexpr int64_t packed_zeros_words(int64_t N, int bits) { return (N * bits + 31) / 32; }

// ------------------------------------------------------------ tiles layout

// `tiles` (CUDA, docs/gemm.md draws it): W cut into tiles of 16 rows ×
// tile_k(bits) columns, 512 bytes each whatever the bit width, stored so that
// one warp's 16-byte loads of a tile are exactly the A fragments of its
// mma.m16n8k16 (and wgmma m64nNk16, whose A fragment per warp is the same)
// steps over those columns. Lane l = 4g + q holds bytes [16l, 16l + 16) of
// the tile: four 32-bit words that decode, in order, into fragment registers
// rho = 0 .. 64 / bits - 1, each a pair of halves. Register rho = 4j + r is
// register r of k16 step j:
//   r = 0: row g,     columns 16j + 2q + {0, 1}
//   r = 1: row g + 8, columns 16j + 2q + {0, 1}
//   r = 2: row g,     columns 16j + 2q + 8 + {0, 1}
//   r = 3: row g + 8, columns 16j + 2q + 8 + {0, 1}
// Two's complement codes (intN) are stored in offset binary, code ^ 2^(bits-1)
// (tile_code), so a code's value is stored - 2^(bits-1) with no sign flip to
// undo per word; quantized zeros the same (tiles_zero_codes).
// Register rho is pair i = rho % P of word rho / P, P = 16 / bits pairs a word
// (2 for 8 bits): elements (i, i + P) of the word for integer types below 8
// bits (what one shift and mask under a magic exponent yields), (2i, 2i + 1)
// for 8-bit types and 4-bit tables (a byte is a pair). Element e of a word
// sits at bits [e·bits, e·bits + bits). Tile (nt, kt) starts at byte
// (nt · tiles_k_tiles + kt) · 512; rows past N and columns past K hold code 0.
inline constexpr int kTileRows = 16;
inline constexpr int kTileBytes = 512;
LOWBIT_HD constexpr int tile_k(int bits) { return 256 / bits; }
LOWBIT_HD constexpr int64_t tiles_row_tiles(int64_t N) { return (N + kTileRows - 1) / kTileRows; }
LOWBIT_HD constexpr int64_t tiles_k_tiles(int64_t K, int bits) { return (K + tile_k(bits) - 1) / tile_k(bits); }
// Rows of the per-row tensors (scale, zero codes): N padded to whole tiles.
LOWBIT_HD constexpr int64_t tiles_padded_rows(int64_t N) { return tiles_row_tiles(N) * kTileRows; }

// A code as the tiles layout stores it, and back (an involution): offset
// binary for two's complement types, the code itself for the others.
LOWBIT_HD constexpr uint32_t tile_code(WeightType t, uint32_t code) {
  const WeightTypeInfo info = weight_type_info(t);
  return info.kind == WeightKind::sint ? code ^ (1u << (info.bits - 1)) : code;
}

// Whether a word's pairs are adjacent elements (8-bit types, 4-bit tables).
LOWBIT_HD constexpr bool tile_pairs_adjacent(WeightType t) {
  return weight_type_info(t).bits == 8 || weight_type_info(t).kind == WeightKind::table;
}

// The byte of a tile holding element (row, col) (row < 16, col < tile_k),
// and the element's bit position in that byte.
struct TileSpot {
  int byte;
  int shift;
};
LOWBIT_HD constexpr TileSpot tile_spot(int bits, bool adjacent, int row, int col) {
  const int j = col / 16, c = col % 16;
  const int g = row % 8, q = (c % 8) / 2, h = c % 2;
  const int rho = 4 * j + row / 8 + 2 * (c / 8);
  const int pairs = bits == 8 ? 2 : 16 / bits;
  const int e = adjacent ? 2 * (rho % pairs) + h : rho % pairs + h * pairs;
  const int bit = 128 * (4 * g + q) + 32 * (rho / pairs) + e * bits;
  return {bit / 8, bit % 8};
}

// The formats the tile kernels run: integer types of 1, 2, 4, 8 bits and
// the 4-bit tables, with no scale, a scale, or quantized (integer) zeros,
// and groups of a power-of-two count of whole tiles (a tile lies in one
// group; the kernels find a tile's group with a shift).
LOWBIT_HD constexpr bool tiles_supported(WeightType t, int64_t group_size, bool with_zeros, ZerosMode mode) {
  const WeightTypeInfo info = weight_type_info(t);
  const bool integer = info.kind == WeightKind::sint || info.kind == WeightKind::pm1 || info.kind == WeightKind::uint;
  if (!integer && info.kind != WeightKind::table) return false;
  if (info.bits > 8) return false;
  if (with_zeros && mode != ZerosMode::quantized) return false;
  if (group_size <= 0) return true;
  const int64_t tiles = group_size / tile_k(info.bits);
  return group_size % tile_k(info.bits) == 0 && (tiles & (tiles - 1)) == 0;
}
inline bool tiles_supported(const WeightFormat& f) {
  return tiles_supported(f.type, f.with_scaling ? f.group_size : -1, f.with_zeros, f.zeros_mode);
}

}  // namespace lowbit::core
