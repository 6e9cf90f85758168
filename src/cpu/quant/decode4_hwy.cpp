// dequantize_4bit's fused block decoder in Highway (decode4_hwy.h), for
// every SIMD target: the codes of a step (16 or 32: vectors of at most 256
// bits) put in element order (each byte widened to a word, its high nibble
// into the low byte and its low nibble into the high one), looked up by
// TableLookupBytes in four byte tables of the values' fp32 bits (exact),
// the bytes interleaved back into fp32 lanes, then times the block's scale
// (IEEE products, the reference's bits); bf16 by f32_to_bf16's integer
// rounding, NaN kept quiet with its sign and high payload.

// clang-format off: Highway's per-target re-inclusion needs this order.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/quant/decode4_hwy.cpp"
#include "cpu/hwy_targets.h"
#include "hwy/foreach_target.h"
#include "hwy/highway.h"
// clang-format on
#include <algorithm>

#include "core/float_convert.h"
#include "cpu/byte_tables.h"
#include "cpu/quant/decode4_hwy.h"

HWY_BEFORE_NAMESPACE();
namespace lowbit::core::cpu::hwy_decode4 {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most two 128-bit blocks: the interleaves work within blocks, and one concatenation puts two back in order.
using DU8 = hn::CappedTag<uint8_t, 32>;
using DU16 = hn::Repartition<uint16_t, DU8>;
using DU32 = hn::Repartition<uint32_t, DU8>;
using DF = hn::Repartition<float, DU8>;
using DB = hn::Rebind<uint8_t, DU16>;   // the step's code bytes, one a word lane
using DH = hn::Rebind<uint16_t, DU32>;  // bf16 out, one a float lane
using VU8 = hn::Vec<DU8>;
using VF = hn::Vec<DF>;

// Elements k .. k + step of the codes at packed (step: Lanes(DU8)), table[code] * m, into v[0..3] in order.
HWY_INLINE void Decode(const VU8 (&t)[4], const uint8_t* packed, int64_t k, VF m, VF (&v)[4]) {
  const DU8 du8;
  const DU16 du16;
  const DF df;
  const auto w = hn::PromoteTo(du16, hn::LoadU(DB(), packed + k / 2));
  const VU8 idx = hn::BitCast(du8, hn::Or(hn::ShiftRight<4>(w), hn::ShiftLeft<8>(hn::And(w, hn::Set(du16, 15)))));
  const VU8 b0 = hn::TableLookupBytes(t[0], idx), b1 = hn::TableLookupBytes(t[1], idx);
  const VU8 b2 = hn::TableLookupBytes(t[2], idx), b3 = hn::TableLookupBytes(t[3], idx);
  const auto l01 = hn::BitCast(du16, hn::InterleaveLower(du8, b0, b1));
  const auto h01 = hn::BitCast(du16, hn::InterleaveUpper(du8, b0, b1));
  const auto l23 = hn::BitCast(du16, hn::InterleaveLower(du8, b2, b3));
  const auto h23 = hn::BitCast(du16, hn::InterleaveUpper(du8, b2, b3));
  // d[j]: in each 128-bit block l, elements 16l + 4j .. 16l + 4j + 3.
  const VF d0 = hn::BitCast(df, hn::InterleaveLower(du16, l01, l23));
  const VF d1 = hn::BitCast(df, hn::InterleaveUpper(du16, l01, l23));
  const VF d2 = hn::BitCast(df, hn::InterleaveLower(du16, h01, h23));
  const VF d3 = hn::BitCast(df, hn::InterleaveUpper(du16, h01, h23));
  if constexpr (sizeof(VF) <= 16) {
    v[0] = hn::Mul(d0, m), v[1] = hn::Mul(d1, m), v[2] = hn::Mul(d2, m), v[3] = hn::Mul(d3, m);
  } else {
    v[0] = hn::Mul(hn::ConcatLowerLower(df, d1, d0), m);
    v[1] = hn::Mul(hn::ConcatLowerLower(df, d3, d2), m);
    v[2] = hn::Mul(hn::ConcatUpperUpper(df, d1, d0), m);
    v[3] = hn::Mul(hn::ConcatUpperUpper(df, d3, d2), m);
  }
}

HWY_INLINE void Store(VF v, float* o) { hn::StoreU(v, DF(), o); }

HWY_INLINE void Store(VF v, BFloat16* o) {
  const DU32 du32;
  const auto u = hn::BitCast(du32, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du32, 1));
  const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(lsb, hn::Set(du32, 0x7fff))));
  const auto nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du32, 0x40));
  const auto bits = hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), nan, rounded);
  // Below 2^16, so the signed-to-unsigned narrowing (what every target has) is exact.
  hn::StoreU(hn::DemoteTo(DH(), hn::BitCast(hn::RebindToSigned<DU32>(), bits)), DH(), reinterpret_cast<uint16_t*>(o));
}

template <class T>
HWY_INLINE void Blocks(const uint8_t* packed, int64_t count, int64_t bs, const float* scales,
                       const uint8_t (&bytes)[4][16], const float* table, T* out) {
  const DF df;
  const int64_t step = static_cast<int64_t>(hn::Lanes(DU8())), nf = step / 4;
  VU8 t[4];
  for (int b = 0; b < 4; ++b) t[b] = hn::LoadDup128(DU8(), bytes[b]);
  for (int64_t b = 0, k0 = 0; k0 < count; ++b, k0 += bs) {
    const VF m = hn::Set(df, scales[b]);
    const int64_t end = std::min(count, k0 + bs);
    int64_t k = k0;
    for (; k + step <= end; k += step) {
      VF v[4];
      Decode(t, packed, k, m, v);
      for (int j = 0; j < 4; ++j) Store(v[j], out + k + j * nf);
    }
    for (; k < end; ++k) {  // the last block's ragged tail
      const uint8_t byte = packed[k / 2];
      out[k] = from_f32<T>(table[k % 2 ? byte & 0xfu : byte >> 4] * scales[b]);
    }
  }
}

void BlocksF32(const uint8_t* packed, int64_t count, int64_t bs, const float* scales, const uint8_t (&bytes)[4][16],
               const float* table, float* out) {
  Blocks(packed, count, bs, scales, bytes, table, out);
}

void BlocksBf16(const uint8_t* packed, int64_t count, int64_t bs, const float* scales, const uint8_t (&bytes)[4][16],
                const float* table, BFloat16* out) {
  Blocks(packed, count, bs, scales, bytes, table, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace lowbit::core::cpu::hwy_decode4
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "cpu/hwy_pick.h"

namespace lowbit::core::cpu::hwy_decode4 {
namespace {

using F32Fn = void (*)(const uint8_t*, int64_t, int64_t, const float*, const uint8_t (&)[4][16], const float*, float*);
using Bf16Fn = void (*)(const uint8_t*, int64_t, int64_t, const float*, const uint8_t (&)[4][16], const float*,
                        BFloat16*);

struct Fns {
  F32Fn f32;
  Bf16Fn bf16;
};

const Fns& fns() {
  static const Fns f{LOWBIT_HWY_PICK(BlocksF32), LOWBIT_HWY_PICK(BlocksBf16)};
  return f;
}

}  // namespace

void blocks(const uint8_t* packed, int64_t count, int64_t bs, const float* scales, const float* table, float* out) {
  uint8_t bytes[4][16];
  f32_byte_tables(table, bytes);
  fns().f32(packed, count, bs, scales, bytes, table, out);
}

void blocks(const uint8_t* packed, int64_t count, int64_t bs, const float* scales, const float* table, BFloat16* out) {
  uint8_t bytes[4][16];
  f32_byte_tables(table, bytes);
  fns().bf16(packed, count, bs, scales, bytes, table, out);
}

}  // namespace lowbit::core::cpu::hwy_decode4
#endif
