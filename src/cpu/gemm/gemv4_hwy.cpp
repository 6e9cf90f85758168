// The few-rows products of 4-bit weights in Highway, for every SIMD target
// (gemv4_hwy.h): each row of W streamed once, its codes looked up a vector
// of bytes at a time by TableLookupBytes (vpshufb, tbl) in byte tables of
// the 16 values, the bytes interleaved back into fp32 lanes, multiplied into
// fp32 A with MulAdd, each block's sum scaled once. Two bytes a value (the
// values rounded to bf16, as the AVX-512 BF16 kernel's table) for bf16 A;
// all four (the exact fp32 values, as the AVX-512 fp32 kernel) for fp32 A.
//
// Codes of 1, 2 or 4 bits (per = 8 / bits a byte, the first in the low
// bits; bitsandbytes' 4-bit codes the other way round). A step reads one
// vector of N code bytes (per·N elements): the codes at bit u·bits of each
// byte are unit u, N codes. Lookups and interleaves work within 128-bit
// blocks, so the code of byte p of block l lands in block l of output
// vector v, lane d (a_position), and A is stored in that order: its per·N
// floats of a step at u·N + v·N/4 + 4l + d.

// clang-format off: Highway's per-target re-inclusion needs this order.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/gemm/gemv4_hwy.cpp"
#include "cpu/hwy_targets.h"
#include "hwy/foreach_target.h"
#include "hwy/highway.h"
// clang-format on
#include <type_traits>

#include "core/float_convert.h"
#include "cpu/gemm/gemv4_hwy.h"
#include "hwy/cache_control.h"

HWY_BEFORE_NAMESPACE();
namespace lowbit::core::cpu::gemm::hwy_gemv4 {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DU8 = hn::ScalableTag<uint8_t>;
using DU16 = hn::Repartition<uint16_t, DU8>;
using DU32 = hn::Repartition<uint32_t, DU8>;
using DF = hn::Repartition<float, DU8>;
using VU8 = hn::Vec<DU8>;
using VF = hn::Vec<DF>;

// The 16 values' bytes, byte b of value i at position i of table b, in every 128-bit block. (Arrays, not a
// struct: a struct's implicit constructor would be defined outside the target's attributes.)
template <int kBytes>
HWY_INLINE void LoadTables(const uint8_t (&bytes)[kBytes][16], VU8 (&t)[kBytes]) {
  for (int b = 0; b < kBytes; ++b) t[b] = hn::LoadDup128(DU8(), bytes[b]);
}

// One vector of codes (a byte each) to 4 vectors of fp32 values: vector v, block l, lane d holds the value of
// the code at byte p of block l, p = 2d + (v & 1) + 8 (v >> 1) for two-byte values, 4v + d for four-byte ones.
template <int kBytes>
HWY_INLINE void Decode(const VU8 (&t)[kBytes], VU8 idx, VF (&w)[4]) {
  const DU8 du8;
  const DU16 du16;
  const DU32 du32;
  const DF df;
  if constexpr (kBytes == 2) {
    // bf16 words to fp32: the even word of each 32-bit lane shifted up, the odd one masked in place.
    const VU8 lo = hn::TableLookupBytes(t[0], idx), hi = hn::TableLookupBytes(t[1], idx);
    const auto w0 = hn::BitCast(du32, hn::InterleaveLower(du8, lo, hi));
    const auto w1 = hn::BitCast(du32, hn::InterleaveUpper(du8, lo, hi));
    const auto high = hn::Set(du32, 0xffff0000u);
    w[0] = hn::BitCast(df, hn::ShiftLeft<16>(w0));
    w[1] = hn::BitCast(df, hn::And(w0, high));
    w[2] = hn::BitCast(df, hn::ShiftLeft<16>(w1));
    w[3] = hn::BitCast(df, hn::And(w1, high));
  } else {
    const VU8 b0 = hn::TableLookupBytes(t[0], idx), b1 = hn::TableLookupBytes(t[1], idx);
    const VU8 b2 = hn::TableLookupBytes(t[2], idx), b3 = hn::TableLookupBytes(t[3], idx);
    const auto l01 = hn::BitCast(du16, hn::InterleaveLower(du8, b0, b1));
    const auto h01 = hn::BitCast(du16, hn::InterleaveUpper(du8, b0, b1));
    const auto l23 = hn::BitCast(du16, hn::InterleaveLower(du8, b2, b3));
    const auto h23 = hn::BitCast(du16, hn::InterleaveUpper(du8, b2, b3));
    w[0] = hn::BitCast(df, hn::InterleaveLower(du16, l01, l23));
    w[1] = hn::BitCast(df, hn::InterleaveUpper(du16, l01, l23));
    w[2] = hn::BitCast(df, hn::InterleaveLower(du16, h01, h23));
    w[3] = hn::BitCast(df, hn::InterleaveUpper(du16, h01, h23));
  }
}

// One step at k: W's codes decoded, multiplied into part[m][chain] for each of kRows rows of A.
template <int kRows, int kBytes, int kChains, int kBits>
HWY_INLINE void Step(const uint8_t* codes, int64_t k, const VU8 (&t)[kBytes], const float* ap, int64_t ldap,
                     VF (&part)[kRows][kChains]) {
  constexpr int kPer = 8 / kBits;
  const DU8 du8;
  const DU16 du16;
  const DF df;
  const int64_t n = static_cast<int64_t>(hn::Lanes(du8)), nf = n / 4;
  // The weight streams from DRAM when it exceeds the caches: fetched 2 KB ahead it arrives in time.
  hwy::Prefetch(codes + k / kPer + 2048);
  const VU8 x = hn::LoadU(du8, codes + k / kPer);
  const VU8 mask = hn::Set(du8, static_cast<uint8_t>((1 << kBits) - 1));
  for (int u = 0; u < kPer; ++u) {
    const VU8 idx = u == 0 ? hn::And(x, mask)
                           : hn::And(hn::BitCast(du8, hn::ShiftRightSame(hn::BitCast(du16, x), u * kBits)), mask);
    VF w[4];
    Decode<kBytes>(t, idx, w);
    for (int m = 0; m < kRows; ++m) {
      const float* a = ap + m * ldap + k + u * n;
      for (int v = 0; v < 4; ++v) {
        VF& p = part[m][(4 * u + v) % kChains];
        p = hn::MulAdd(w[v], hn::LoadU(df, a + v * nf), p);
      }
    }
  }
}

// acc[m] += (the sum of part[m]'s chains) * s, and the chains cleared.
template <int kRows, int kChains>
HWY_INLINE void Finish(VF (&part)[kRows][kChains], VF s, VF (&acc)[kRows]) {
  for (int m = 0; m < kRows; ++m) {
    VF sum = part[m][0];
    for (int c = 1; c < kChains; ++c) sum = hn::Add(sum, part[m][c]);
    acc[m] = hn::MulAdd(sum, s, acc[m]);
    for (int c = 0; c < kChains; ++c) part[m][c] = hn::Zero(DF());
  }
}

// The scales of a step's lanes where blocks are shorter than a step: 128-bit block l of lanes (`span`
// elements: 16 bytes of codes) takes s[(span (l0 + l)) / blocksize], each a broadcast (not a permute: the
// shuffle units are what the kernel runs out of).
template <class D>
HWY_INLINE hn::Vec<D> BlockScales(D d, const float* s, int64_t l0, int64_t span, int64_t blocksize) {
  if constexpr (sizeof(hn::Vec<D>) <= 16) {
    return hn::Set(d, s[span * l0 / blocksize]);
  } else {
    const hn::Half<D> dh;
    const int64_t half = static_cast<int64_t>(hn::Lanes(dh)) / 4;
    return hn::Combine(d, BlockScales(dh, s, l0 + half, span, blocksize), BlockScales(dh, s, l0, span, blocksize));
  }
}

// One W row against kRows rows of A (ap: the permuted rows, ldap floats apart): acc[m] gets its lane sums.
// Each A row keeps kChains partial sums a block (4 chains in all: the multiply-add latency hidden), scaled once
// a block. Blocks shorter than a step (whole 16-byte spans of codes) take a scale per 128-bit block of lanes;
// zero points come with blocks of whole steps (fits).
template <int kRows, int kBytes, bool kZeros, int kBits>
HWY_NOINLINE void Row(const uint8_t* codes, const float* scales, const uint8_t* zeros, int64_t K, int64_t blocksize,
                      const Gemv4Table& g, const float* ap, int64_t ldap, VF (&acc)[kRows]) {
  constexpr int kChains = kRows == 1 ? 4 : kRows == 2 ? 2 : 1;
  constexpr int64_t kPer = 8 / kBits;
  const DF df;
  const int64_t step = kPer * static_cast<int64_t>(hn::Lanes(DU8()));
  VU8 t[kBytes];
  if constexpr (kBytes == 2) {
    LoadTables<2>(g.bf16_bytes, t);
  } else {
    LoadTables<4>(g.f32_bytes, t);
  }
  VF part[kRows][kChains];
  for (int m = 0; m < kRows; ++m) {
    acc[m] = hn::Zero(df);
    for (int c = 0; c < kChains; ++c) part[m][c] = hn::Zero(df);
  }
  if (blocksize < step) {
    for (int64_t k = 0; k < K; k += step) {
      Step<kRows, kBytes, kChains, kBits>(codes, k, t, ap, ldap, part);
      Finish<kRows, kChains>(part, BlockScales(df, scales + k / blocksize, 0, 16 * kPer, blocksize), acc);
    }
    return;
  }
  for (int64_t b = 0, k = 0; k < K; ++b) {
    if constexpr (kZeros) LoadTables<2>(g.zero_bf16_bytes[zeros[b]], t);
    for (const int64_t end = k + blocksize; k < end; k += step) {
      Step<kRows, kBytes, kChains, kBits>(codes, k, t, ap, ldap, part);
    }
    Finish<kRows, kChains>(part, hn::Set(df, scales[b]), acc);
  }
}

// Up to 4 rows of A, one kernel instance for each count.
template <int kBytes, int kBits>
HWY_INLINE void Rows(const uint8_t* codes, const float* scales, const uint8_t* zeros, int64_t K, int64_t blocksize,
                     const Gemv4Table& g, const float* ap, int64_t ldap, int rows, VF (&acc)[4]) {
  const auto run = [&](auto rows_tag) HWY_ATTR {
    constexpr int kRows = decltype(rows_tag)::value;
    VF a[kRows];
    if (kBytes == 2 && zeros) {
      Row<kRows, 2, true, kBits>(codes, scales, zeros, K, blocksize, g, ap, ldap, a);
    } else {
      Row<kRows, kBytes, false, kBits>(codes, scales, zeros, K, blocksize, g, ap, ldap, a);
    }
    for (int m = 0; m < kRows; ++m) acc[m] = a[m];
  };
  switch (rows) {
    case 1: return run(std::integral_constant<int, 1>());
    case 2: return run(std::integral_constant<int, 2>());
    case 3: return run(std::integral_constant<int, 3>());
    default: return run(std::integral_constant<int, 4>());
  }
}

void RowsBf16(const Gemv4Rows& w, int64_t K, int64_t blocksize, int bits, const Gemv4Table& t, const float* ap,
              int64_t ldap, int rows, float* acc16) {
  const DF df;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  for (int r = 0; r < w.count; ++r) {
    VF acc[4];
    if (bits == 1) {
      Rows<2, 1>(w.codes[r], w.scales[r], w.zeros[r], K, blocksize, t, ap, ldap, rows, acc);
    } else if (bits == 2) {
      Rows<2, 2>(w.codes[r], w.scales[r], w.zeros[r], K, blocksize, t, ap, ldap, rows, acc);
    } else {
      Rows<2, 4>(w.codes[r], w.scales[r], w.zeros[r], K, blocksize, t, ap, ldap, rows, acc);
    }
    for (int m = 0; m < rows; ++m) {
      float* out = acc16 + 16 * (r * rows + m);
      hn::StoreU(acc[m], df, out);
      for (int64_t i = nf; i < 16; ++i) out[i] = 0.0f;
    }
  }
}

void RowF32(const uint8_t* codes, int64_t K, int64_t blocksize, const float* scales, const Gemv4Table& t,
            const float* ax, int64_t ldx, int rows, float* out) {
  const DF df;
  VF acc[4];
  Rows<4, 4>(codes, scales, nullptr, K, blocksize, t, ax, ldx, rows, acc);
  for (int m = 0; m < rows; ++m) out[m] = hn::GetLane(hn::SumOfLanes(df, acc[m]));
}

Kernels Get() { return {static_cast<int64_t>(hn::Lanes(DU8())), hwy::TargetName(HWY_TARGET), &RowsBf16, &RowF32}; }

}  // namespace HWY_NAMESPACE
}  // namespace lowbit::core::cpu::gemm::hwy_gemv4
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "cpu/hwy_pick.h"

namespace lowbit::core::cpu::gemm::hwy_gemv4 {

const Kernels& kernels() {
  static const Kernels k = LOWBIT_HWY_PICK(Get)();
  return k;
}

bool fits(int64_t step, int bits, int64_t K, int64_t blocksize, bool zeros) {
  const int64_t span = 16 * (8 / bits);  // the elements of 16 code bytes
  if (blocksize <= 0 || K % step != 0 || blocksize % span != 0) return false;
  return blocksize % step == 0 || (step % blocksize == 0 && !zeros);
}

int64_t a_position(int64_t step, int bits, int64_t j, Nibbles order, int bytes) {
  // j: the element's offset in its step: byte j / per, unit j % per (4-bit codes: per the nibble order).
  const int64_t per = 8 / bits, n = step / per, nf = n / 4, byte = j / per;
  const int64_t u = bits == 4 && order == Nibbles::high_first ? 1 - j % 2 : j % per;
  const int64_t l = byte / 16, p = byte % 16;
  const int64_t v = bytes == 4 ? p / 4 : 2 * (p / 8) + p % 2;
  const int64_t d = bytes == 4 ? p % 4 : (p % 8) / 2;
  return u * n + v * nf + 4 * l + d;
}

void permute_a(int64_t step, int bits, const uint16_t* a16, const float* a32, const int32_t* perm, int64_t K,
               Nibbles order, int bytes, float* ap) {
  int64_t to[512];  // a step: at most 64 bytes of 1-bit codes
  for (int64_t j = 0; j < step; ++j) to[j] = a_position(step, bits, j, order, bytes);
  for (int64_t c = 0; c < K; c += step) {
    for (int64_t j = 0; j < step; ++j) {
      const int64_t k = perm ? perm[c + j] : c + j;
      ap[c + to[j]] = a16 ? bf16_to_f32(a16[k]) : a32[k];
    }
  }
}

}  // namespace lowbit::core::cpu::gemm::hwy_gemv4
#endif
