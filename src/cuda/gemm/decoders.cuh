// Weight decoders of the rows-layout tensor-core kernel (kernel.cuh).
//
// A thread owns a "span" of E consecutive weight elements of one row (one
// 16-, 8- or 4-byte load) and feeds them to mma.sync as its four k slots per
// m16n8k16 step. Which element sits in which slot is free, as long as the
// activations are staged in shared memory in the same order: phys(s) is the
// element a span's slot s holds. pair(r) returns register r of the span: the
// values of slots 2r and 2r + 1 as two fp16/bf16 halves.
//
// Three decoders:
// - MagicDecoder (int/uint of 1, 2, 4, 8 bits): codes are or-ed under a
//   magic exponent (fp16 0x6400 = 1024 + x, bf16 0x4300 = 128 + x; 8-bit on
//   bf16 goes through fp32 0x4B000000 = 2^23 + x) and one fma per pair
//   subtracts the magic, the sign bias and the integer zero: v - z exactly
//   (1-bit codes take two: int1's offset 2049 + z is not an fp16 value).
//   Bit widths below 8 pair element i with element i + W/2 of a 32-bit word
//   of W codes (one shift + lop3 per pair), hence the permutation.
// - TableDecoder (nf4, fp4, fp4_e2m1): a byte of two codes indexes a
//   shared-memory table of value pairs, one copy per lane (no bank conflicts).
// - GenericDecoder (every type and rule): per element in fp32 by the core
//   definitions (weight_code_value, dequant), then rounded to A's type.
//
// The first two multiply by the group's scale after the mma, on the fp32
// accumulators (kPostScale): their halves are exact integers (or the table
// value rounded once), so the product is rounded once, in fp32. The generic
// decoder applies the whole rule first and rounds w once to A's type.
#pragma once

#include <cstdint>

#include "core/weight_format.h"
#include "cuda/common/ptx/arith.cuh"
#include "cuda/gemm/mma.cuh"
#include "cuda/gemm/params.h"

namespace lowbit::cuda::gemm {

// The value of an integer code by Params' rule, (code ^ sign) · mul - bias:
// two's complement, ±1 or the code itself (exact).
__device__ __forceinline__ float int_code_value(uint32_t code, const Params& p) {
  return __fadd_rn(__fmul_rn(static_cast<float>((code ^ p.xor_word) & core::code_mask(p.bits)), p.code_mul),
                   -p.code_bias);
}

// Per row and span: what pair() needs besides the codes.
struct RowCtx {
  float s = 1.0f;             // the group's scale (post-scale decoders), or
  float z = 0.0f;             // with s, the zero (generic)
  uint32_t negoff = 0;        // magic: -(offset) in both halves (fp32 bits for 8-bit bf16)
  uint32_t negoff_j[4] = {};  // fp16 2- and 4-bit: -(offset) for the code at bit j·b of a byte
};

// kXor: flip the codes' sign bits per word by Params::xor_word (two's
// complement codes of the rows layout); the tiles layout stores them in
// offset binary already (core::tile_code) and instantiates kXor = false.
template <int kBits_, int kLB_, class T, bool kXor = true>
struct MagicDecoder {
  static constexpr int kBits = kBits_;
  static constexpr int kLB = kLB_;  // bytes per span load
  static constexpr int kE = kLB * 8 / kBits;
  static constexpr bool kPostScale = true;
  static constexpr bool kTable = false;
  static constexpr int kWord = 32 / kBits;                   // codes per 32-bit word
  static constexpr int kPermBlock = kBits == 8 ? 1 : kWord;  // phys permutes within blocks of this size
  static constexpr bool kFloatRoute = kBits == 8 && T::kMagicBits < 8;
  // fp16, 2 and 4 bits: a code is masked in place (bit j·b of its byte)
  // under the magic and the fma scales by 2^-jb: no shift per code, one per
  // byte (bf16's 7-bit mantissa has no room for the shifted codes).
  static constexpr bool kInPlace = (kBits == 2 || kBits == 4) && T::kMagicBits >= 10;
  static constexpr int kPerByte = 8 / kBits;

  __device__ static uint32_t flip(uint32_t word, const Params& p) {
    if constexpr (kXor) return word ^ p.xor_word;
    return word;
  }

  __host__ __device__ static constexpr int phys(int s) {
    if (kBits == 8) return s;
    const int r = s % kWord;
    return s - r + r / 2 + (r % 2) * (kWord / 2);
  }

  // off = code_mul * magic + code_bias + z.
  __device__ static RowCtx ctx(const Params& p, float s, float z) {
    RowCtx c;
    c.s = s;
    if (kFloatRoute) {
      c.negoff = __float_as_uint(-(8388608.0f + p.code_bias + z));
    } else if (kBits == 1) {
      c.negoff = splat2<T>(-(p.code_bias + z));  // after the magic is gone (pair())
    } else if (kInPlace) {
      float unit = 1.0f;
      for (int j = 0; j < kPerByte; ++j, unit *= 1.0f / (1 << kBits)) {
        c.negoff_j[j] = splat2<T>(-(T::kMagicValue * unit + p.code_bias + z));
      }
    } else {
      c.negoff = splat2<T>(-(p.code_mul * T::kMagicValue + p.code_bias + z));
    }
    return c;
  }

  __device__ static uint32_t pair(const uint32_t* w, int r, const RowCtx& c, const Params& p, const uint32_t* /*tab*/,
                                  int /*lane*/) {
    if constexpr (kBits == 8) {
      const uint32_t x = flip(w[r / 2], p);
      if constexpr (kFloatRoute) {
        const float lo = __uint_as_float(ptx::prmt(x, 0x4bu, (r % 2) ? 0x4552u : 0x4550u));
        const float hi = __uint_as_float(ptx::prmt(x, 0x4bu, (r % 2) ? 0x4553u : 0x4551u));
        const float off = __uint_as_float(c.negoff);
        return pack2<T>(__fadd_rn(lo, off), __fadd_rn(hi, off));
      } else {
        const uint32_t t = ptx::prmt(x, 0x64646464u, (r % 2) ? 0x4342u : 0x4140u);
        return fma2<T>(t, splat2<T>(1.0f), c.negoff);
      }
    } else {
      constexpr uint32_t kMask = core::code_mask(kBits) * 0x00010001u;
      constexpr int kPairs = kWord / 2;  // pairs per word
      if constexpr (kInPlace) {
        // Pair i of a word: byte i / kPerByte of each half, code j = i % kPerByte.
        const int i = r % kPairs, j = i % kPerByte;
        const uint32_t x = flip(w[r / kPairs], p) >> (8 * (i / kPerByte));
        const uint32_t t = ptx::lop3_and_or(x, kMask << (j * kBits), T::kMagic * 0x00010001u);
        const uint32_t unit = static_cast<uint32_t>(15 - j * kBits) << 10;  // fp16 2^-jb
        return fma2<T>(t, unit * 0x00010001u, c.negoff_j[j]);
      }
      const uint32_t x = flip(w[r / kPairs], p) >> ((r % kPairs) * kBits);
      const uint32_t t = ptx::lop3_and_or(x, kMask, T::kMagic * 0x00010001u);
      if constexpr (kBits == 1) {
        // int1's 2·x - (2·magic + 1 + z) needs an odd offset past 2048, not
        // an fp16 value: take the magic off first (exact), then 2·c - 1 - z.
        const uint32_t c01 = fma2<T>(t, splat2<T>(1.0f), splat2<T>(-T::kMagicValue));
        return fma2<T>(c01, splat2<T>(p.code_mul), c.negoff);
      }
      return fma2<T>(t, splat2<T>(p.code_mul), c.negoff);
    }
  }
};

template <int kLB_, class T>
struct TableDecoder {
  static constexpr int kBits = 4;
  static constexpr int kLB = kLB_;
  static constexpr int kE = kLB * 2;
  static constexpr bool kPostScale = true;
  static constexpr bool kTable = true;
  static constexpr int kPermBlock = 1;
  __host__ __device__ static constexpr int phys(int s) { return s; }

  __device__ static RowCtx ctx(const Params&, float s, float) {
    RowCtx c;
    c.s = s;
    return c;
  }

  // tab: [256][32] pairs, entry b for lane l at b * 32 + l.
  __device__ static void fill(uint32_t* tab, const Params& p) {
    for (int i = threadIdx.x; i < 256 * 32; i += blockDim.x) {
      const int b = i >> 5;
      const float lo = p.table[b & 15];
      const float hi = p.table[b >> 4];
      tab[i] = pack2<T>(lo, hi);
    }
  }

  __device__ static uint32_t pair(const uint32_t* w, int r, const RowCtx&, const Params&, const uint32_t* tab,
                                  int lane) {
    const uint32_t byte = (w[r / 4] >> ((r % 4) * 8)) & 0xffu;
    return tab[byte * 32 + lane];
  }
};

// How the generic decoder reads a code (one instance per kind keeps each
// kernel free of a per-element switch over every kind).
enum class GenericKind : uint8_t { integer, table, fp8, f16, bf16 };

template <int kBits_, GenericKind kKind, class T>
struct GenericDecoder {
  static constexpr int kBits = kBits_;
  static constexpr int kE = (128 / kBits) < 32 ? (128 / kBits) : 32;  // a span never crosses a group
  static constexpr int kLB = kE * kBits / 8;
  static constexpr bool kPostScale = false;
  static constexpr bool kTable = false;
  static constexpr int kPermBlock = 1;
  __host__ __device__ static constexpr int phys(int s) { return s; }

  __device__ static RowCtx ctx(const Params&, float s, float z) {
    RowCtx c;
    c.s = s;
    c.z = z;
    return c;
  }

  // The code's value (src/core/weight_format.h's weight_code_value, kind by kind).
  __device__ static float value(uint32_t code, const Params& p, const float* table) {
    if constexpr (kKind == GenericKind::integer) {
      return int_code_value(code, p);
    } else if constexpr (kKind == GenericKind::table) {
      return table[code];
    } else if constexpr (kKind == GenericKind::fp8) {
      return core::e4m3_to_f32(static_cast<uint8_t>(code));
    } else if constexpr (kKind == GenericKind::f16) {
      return __half2float(__ushort_as_half(static_cast<unsigned short>(code)));
    } else {
      return __uint_as_float(code << 16);
    }
  }

  // w = dequant(rule, v, s, z): (v - z) * s, with z = 0 and s = 1 standing
  // in for the rules without them (exact), or v * s - z for rescale.
  __device__ static float element(const uint32_t* w, int i, const RowCtx& c, const Params& p, const float* table) {
    const int bit = i * kBits;
    const uint32_t code = (w[bit / 32] >> (bit % 32)) & core::code_mask(kBits);
    const float v = value(code, p, table);
    if (p.rule == static_cast<uint8_t>(core::DequantRule::rescale)) return __fadd_rn(__fmul_rn(v, c.s), -c.z);
    return __fmul_rn(__fadd_rn(v, -c.z), c.s);
  }

  // `tab` holds the 16 table values as floats.
  __device__ static uint32_t pair(const uint32_t* w, int r, const RowCtx& c, const Params& p, const uint32_t* tab,
                                  int) {
    const auto* table = reinterpret_cast<const float*>(tab);
    return pack2<T>(element(w, 2 * r, c, p, table), element(w, 2 * r + 1, c, p, table));
  }
};

}  // namespace lowbit::cuda::gemm
