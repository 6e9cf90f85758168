// The few-rows products of 8-bit weights (int8, uint8, fp8 E4M3) on bf16 A
// in Highway, for every SIMD target (gemv8_hwy.h): each row of W streamed
// once, a vector of codes at a time widened to fp32 lanes by arithmetic (int8
// and uint8 converted; E4M3's bits moved into fp32's, its subnormals
// converted from their mantissas), multiplied with MulAdd into A
// converted to fp32 (in order), each block's sum scaled once. The weights
// are exact; with zero points each is v − z in fp32 (exact: both small).

// clang-format off: Highway's per-target re-inclusion needs this order.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/gemm/gemv8_hwy.cpp"
#include "cpu/hwy_targets.h"
#include "hwy/foreach_target.h"
#include "hwy/highway.h"
// clang-format on
#include <type_traits>

#include "cpu/gemm/gemv8_hwy.h"
#include "hwy/cache_control.h"

HWY_BEFORE_NAMESPACE();
namespace lowbit::core::cpu::gemm::hwy_gemv8 {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI32 = hn::RebindToSigned<DF>;
using DU32 = hn::RebindToUnsigned<DF>;
using VF = hn::Vec<DF>;

// nf codes at p as fp32 values.
template <WeightKind kKind>
HWY_INLINE VF Decode(const uint8_t* p) {
  const DF df;
  if constexpr (kKind == WeightKind::sint) {
    const hn::Rebind<int8_t, DF> d8;
    return hn::ConvertTo(df, hn::PromoteTo(DI32(), hn::LoadU(d8, reinterpret_cast<const int8_t*>(p))));
  } else if constexpr (kKind == WeightKind::uint) {
    const hn::Rebind<uint8_t, DF> d8;
    return hn::ConvertTo(df, hn::BitCast(DI32(), hn::PromoteTo(DU32(), hn::LoadU(d8, p))));
  } else {  // E4M3FN: normals by their bits moved into fp32's, subnormals m · 2^-9; S.1111.111 is NaN
    // (no arithmetic on fp32 subnormals, which costs a microcode assist a value on some CPUs).
    const DU32 du32;
    const hn::Rebind<uint8_t, DF> d8;
    const auto b = hn::PromoteTo(du32, hn::LoadU(d8, p));
    const auto mag = hn::And(b, hn::Set(du32, 0x7fu));
    const VF normal = hn::BitCast(df, hn::Add(hn::ShiftLeft<20>(mag), hn::Set(du32, 120u << 23)));
    const VF sub = hn::Mul(hn::ConvertTo(df, hn::BitCast(DI32(), mag)), hn::Set(df, 0x1p-9f));
    const VF v = hn::IfThenElse(hn::RebindMask(df, hn::Lt(mag, hn::Set(du32, 8u))), sub, normal);
    const auto bits =
        hn::IfThenElse(hn::Eq(mag, hn::Set(du32, 0x7fu)), hn::Set(du32, 0x7fc00000u), hn::BitCast(du32, v));
    return hn::BitCast(df, hn::Or(bits, hn::ShiftLeft<24>(hn::And(b, hn::Set(du32, 0x80u)))));
  }
}

// One W row against kRows rows of A (ap: fp32 rows, ldap floats apart): acc[m] gets its lane sums. Steps of 4
// vectors; each A row keeps kChains partial sums a block (4 chains in all), scaled once a block (blocks of whole
// steps); zero points subtracted from each weight.
template <int kRows, WeightKind kKind, bool kZeros>
HWY_NOINLINE void Row(const uint8_t* codes, const float* scales, const uint8_t* zeros, const float* vtab, int64_t K,
                      int64_t blocksize, const float* ap, int64_t ldap, VF (&acc)[kRows]) {
  constexpr int kChains = kRows == 1 ? 4 : kRows == 2 ? 2 : 1;
  const DF df;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df)), step = 4 * nf;
  VF part[kRows][kChains];
  for (int m = 0; m < kRows; ++m) {
    acc[m] = hn::Zero(df);
    for (int c = 0; c < kChains; ++c) part[m][c] = hn::Zero(df);
  }
  for (int64_t b = 0, k = 0; k < K; ++b) {
    const VF z = hn::Set(df, kZeros ? vtab[zeros[b]] : 0.0f);
    for (const int64_t end = k + blocksize; k < end; k += step) {
      // The weight streams from DRAM when it exceeds the caches: fetched 2 KB ahead it arrives in time.
      hwy::Prefetch(codes + k + 2048);
      for (int v = 0; v < 4; ++v) {
        VF w = Decode<kKind>(codes + k + v * nf);
        if constexpr (kZeros) w = hn::Sub(w, z);
        for (int m = 0; m < kRows; ++m) {
          VF& p = part[m][v % kChains];
          p = hn::MulAdd(w, hn::LoadU(df, ap + m * ldap + k + v * nf), p);
        }
      }
    }
    const VF s = hn::Set(df, scales[b]);
    for (int m = 0; m < kRows; ++m) {
      VF sum = part[m][0];
      for (int c = 1; c < kChains; ++c) sum = hn::Add(sum, part[m][c]);
      acc[m] = hn::MulAdd(sum, s, acc[m]);
      for (int c = 0; c < kChains; ++c) part[m][c] = hn::Zero(df);
    }
  }
}

template <WeightKind kKind>
HWY_INLINE void Rows(const uint8_t* codes, const float* scales, const uint8_t* zeros, const float* vtab, int64_t K,
                     int64_t blocksize, const float* ap, int64_t ldap, int rows, VF (&acc)[4]) {
  const auto run = [&](auto rows_tag) HWY_ATTR {
    constexpr int kRows = decltype(rows_tag)::value;
    VF a[kRows];
    if (zeros) {
      Row<kRows, kKind, true>(codes, scales, zeros, vtab, K, blocksize, ap, ldap, a);
    } else {
      Row<kRows, kKind, false>(codes, scales, zeros, vtab, K, blocksize, ap, ldap, a);
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

void RowsBf16(const Gemv4Rows& w, WeightKind kind, const float* vtab, int64_t K, int64_t blocksize, const float* ap,
              int64_t ldap, int rows, float* acc16) {
  const DF df;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  for (int r = 0; r < w.count; ++r) {
    VF acc[4];
    if (kind == WeightKind::sint) {
      Rows<WeightKind::sint>(w.codes[r], w.scales[r], w.zeros[r], vtab, K, blocksize, ap, ldap, rows, acc);
    } else if (kind == WeightKind::uint) {
      Rows<WeightKind::uint>(w.codes[r], w.scales[r], w.zeros[r], vtab, K, blocksize, ap, ldap, rows, acc);
    } else {
      Rows<WeightKind::fp8>(w.codes[r], w.scales[r], w.zeros[r], vtab, K, blocksize, ap, ldap, rows, acc);
    }
    for (int m = 0; m < rows; ++m) {
      float* out = acc16 + 16 * (r * rows + m);
      hn::StoreU(acc[m], df, out);
      for (int64_t i = nf; i < 16; ++i) out[i] = 0.0f;
    }
  }
}

Kernels Get() { return {4 * static_cast<int64_t>(hn::Lanes(DF())), &RowsBf16}; }

}  // namespace HWY_NAMESPACE
}  // namespace lowbit::core::cpu::gemm::hwy_gemv8
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "cpu/hwy_pick.h"

namespace lowbit::core::cpu::gemm::hwy_gemv8 {

const Kernels& kernels() {
  static const Kernels k = LOWBIT_HWY_PICK(Get)();
  return k;
}

}  // namespace lowbit::core::cpu::gemm::hwy_gemv8
#endif
