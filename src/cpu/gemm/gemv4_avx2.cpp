// The few-rows products of 4-bit weights on AVX2 + FMA (CPUs without
// AVX-512): each row of W streamed once, its codes looked up 32 at a time
// by vpshufb in byte tables of the 16 values and widened to fp32 lanes by
// byte and word interleaves (no vpermw, no vdpbf16ps on AVX2), multiplied
// into fp32 A with FMA, each block's sum scaled once. Two bytes a value
// (the values rounded to bf16, as the AVX-512 BF16 kernel's table) for bf16
// A; all four bytes (the exact fp32 values, as the AVX-512 fp32 kernel) for
// fp32 A.
//
// A 64-element step reads 32 bytes of a row: the low nibbles of bytes
// 0 .. 31, then the high ones (unit u = 0, 1), each 32 codes in a ymm whose
// lane l holds bytes 16l .. 16l + 15. The interleaves put each byte's value
// of unit u in lane l, dword d of output vector v (a_position: which byte
// where depends on the value's width), so A is stored in that order: its 64
// floats at 32u + 8v + 4l + d.
#include "cpu/gemm/gemv4_avx2.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lowbit::core::cpu::gemm::avx2 {

int64_t a_position(int64_t j, Nibbles order, int bytes) {
  // j: the element's offset in its 64-element step (byte j / 2, which nibble by j % 2 and the order).
  const int64_t byte = j / 2;
  const bool high = (j % 2 == 0) == (order == Nibbles::high_first);
  const int64_t u = high ? 1 : 0, l = byte / 16, in_lane = byte % 16;
  // Four-byte values: byte 4v + d of a lane in vector v, dword d. Two-byte values: bytes 8h + 2d + e in vector
  // 2h + e (the even and odd words of each interleave), dword d.
  const int64_t v = bytes == 4 ? in_lane / 4 : 2 * (in_lane / 8) + in_lane % 2;
  const int64_t d = bytes == 4 ? in_lane % 4 : (in_lane % 8) / 2;
  return 32 * u + 8 * v + 4 * l + d;
}

void permute_a(const uint16_t* a16, const float* a32, const int32_t* perm, int64_t K, Nibbles order, int bytes,
               float* ap) {
  int64_t to[64];
  for (int64_t j = 0; j < 64; ++j) to[j] = a_position(j, order, bytes);
  for (int64_t c = 0; c < K; c += 64) {
    for (int64_t j = 0; j < 64; ++j) {
      const int64_t k = perm ? perm[c + j] : c + j;
      float v;
      if (a16) {
        const uint32_t bits = static_cast<uint32_t>(a16[k]) << 16;
        std::memcpy(&v, &bits, sizeof v);
      } else {
        v = a32[k];
      }
      ap[c + to[j]] = v;
    }
  }
}

bool fits(int64_t K, int64_t blocksize) {
  return K % 64 == 0 && blocksize > 0 && (blocksize == 32 || blocksize % 64 == 0);
}

#if defined(__x86_64__)
namespace {

#define LOWBIT_AVX2_TARGET __attribute__((target("avx2,fma")))

// The 16 values' bytes, byte b of value i at position i of table b, in both lanes.
template <int kBytes>
struct Tables {
  __m256i t[kBytes];
};

template <int kBytes>
LOWBIT_AVX2_TARGET __attribute__((always_inline)) inline Tables<kBytes> load_tables(
    const uint8_t (&bytes)[kBytes][16]) {
  Tables<kBytes> t;
  for (int b = 0; b < kBytes; ++b) {
    t.t[b] = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes[b])));
  }
  return t;
}

// 32 codes (one per byte of idx) to 4 vectors of 8 fp32 values.
template <int kBytes>
LOWBIT_AVX2_TARGET __attribute__((always_inline)) inline void decode(const Tables<kBytes>& t, __m256i idx,
                                                                     __m256 (&w)[4]) {
  if constexpr (kBytes == 2) {
    // bf16 words to fp32: the even word of each dword shifted up, the odd one masked in place (ALU work, not
    // more interleaves: the shuffle ports are what the loop runs out of).
    const __m256i lo = _mm256_shuffle_epi8(t.t[0], idx), hi = _mm256_shuffle_epi8(t.t[1], idx);
    const __m256i w0 = _mm256_unpacklo_epi8(lo, hi), w1 = _mm256_unpackhi_epi8(lo, hi);
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    w[0] = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
    w[1] = _mm256_castsi256_ps(_mm256_and_si256(w0, high));
    w[2] = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
    w[3] = _mm256_castsi256_ps(_mm256_and_si256(w1, high));
  } else {
    const __m256i b0 = _mm256_shuffle_epi8(t.t[0], idx), b1 = _mm256_shuffle_epi8(t.t[1], idx);
    const __m256i b2 = _mm256_shuffle_epi8(t.t[2], idx), b3 = _mm256_shuffle_epi8(t.t[3], idx);
    const __m256i l01 = _mm256_unpacklo_epi8(b0, b1), h01 = _mm256_unpackhi_epi8(b0, b1);
    const __m256i l23 = _mm256_unpacklo_epi8(b2, b3), h23 = _mm256_unpackhi_epi8(b2, b3);
    w[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(l01, l23));
    w[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(l01, l23));
    w[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(h01, h23));
    w[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(h01, h23));
  }
}

// One 64-element step at k: W's codes decoded, multiplied into part[m][chain] for each A row.
template <int kRows, int kBytes, int kChains>
LOWBIT_AVX2_TARGET __attribute__((always_inline)) inline void step(const uint8_t* codes, int64_t k,
                                                                   const Tables<kBytes>& t, const float* ap,
                                                                   int64_t ldap, __m256 (&part)[kRows][kChains]) {
  // The weight streams from DRAM when it exceeds the caches: fetched 2 KB ahead it arrives in time.
  _mm_prefetch(reinterpret_cast<const char*>(codes + k / 2 + 2048), _MM_HINT_T0);
  const __m256i low = _mm256_set1_epi8(0x0f);
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + k / 2));
  const __m256i idx[2] = {_mm256_and_si256(x, low), _mm256_and_si256(_mm256_srli_epi16(x, 4), low)};
#pragma GCC unroll 2
  for (int u = 0; u < 2; ++u) {
    __m256 w[4];
    decode<kBytes>(t, idx[u], w);
#pragma GCC unroll 4
    for (int m = 0; m < kRows; ++m) {
      const float* a = ap + m * ldap + k + 32 * u;
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        __m256& p = part[m][(4 * u + v) % kChains];
        p = _mm256_fmadd_ps(w[v], _mm256_loadu_ps(a + 8 * v), p);
      }
    }
  }
}

// acc[m] += (the sum of part[m]'s chains) * s, and the chains cleared.
template <int kRows, int kChains>
LOWBIT_AVX2_TARGET __attribute__((always_inline)) inline void finish(__m256 (&part)[kRows][kChains], const __m256& s,
                                                                     __m256 (&acc)[kRows]) {
  for (int m = 0; m < kRows; ++m) {
    __m256 sum = part[m][0];
    for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, part[m][c]);
    acc[m] = _mm256_fmadd_ps(sum, s, acc[m]);
    for (int c = 0; c < kChains; ++c) part[m][c] = _mm256_setzero_ps();
  }
}

// One W row against kRows rows of A (ap: the permuted rows, ldap floats apart): acc[m] gets 8 lane sums. Each
// A row keeps kChains partial sums a block (4 chains in all: the FMA latency hidden), scaled once a block;
// blocks of 32 take a scale per lane (lane l of a step: block 2 * step + l).
template <int kRows, int kBytes, bool kZeros>
LOWBIT_AVX2_TARGET void row(const uint8_t* codes, const float* scales, const uint8_t* zeros, int64_t K,
                            int64_t blocksize, const Gemv4Table& g, const float* ap, int64_t ldap,
                            __m256 (&acc)[kRows]) {
  constexpr int kChains = kRows == 1 ? 4 : kRows == 2 ? 2 : 1;
  Tables<kBytes> t;
  if constexpr (kBytes == 2) {
    t = load_tables<2>(g.bf16_bytes);
  } else {
    t = load_tables<4>(g.f32_bytes);
  }
  __m256 part[kRows][kChains];
  for (int m = 0; m < kRows; ++m) {
    acc[m] = _mm256_setzero_ps();
    for (int c = 0; c < kChains; ++c) part[m][c] = _mm256_setzero_ps();
  }
  if (blocksize == 32) {
    for (int64_t k = 0; k < K; k += 64) {
      step<kRows, kBytes, kChains>(codes, k, t, ap, ldap, part);
      const float* s = scales + k / 32;
      finish<kRows, kChains>(part, _mm256_setr_m128(_mm_set1_ps(s[0]), _mm_set1_ps(s[1])), acc);
    }
    return;
  }
  for (int64_t b = 0, k = 0; k < K; ++b) {
    if constexpr (kZeros) t = load_tables<2>(g.zero_bf16_bytes[zeros[b]]);
    for (const int64_t end = k + blocksize; k < end; k += 64) step<kRows, kBytes, kChains>(codes, k, t, ap, ldap, part);
    finish<kRows, kChains>(part, _mm256_set1_ps(scales[b]), acc);
  }
}

template <int kRows, int kBytes>
LOWBIT_AVX2_TARGET void row_any(const uint8_t* codes, const float* scales, const uint8_t* zeros, int64_t K,
                                int64_t blocksize, const Gemv4Table& g, const float* ap, int64_t ldap,
                                __m256 (&acc)[kRows]) {
  if constexpr (kBytes == 2) {
    if (zeros) return row<kRows, 2, true>(codes, scales, zeros, K, blocksize, g, ap, ldap, acc);
  }
  row<kRows, kBytes, false>(codes, scales, zeros, K, blocksize, g, ap, ldap, acc);
}

// Up to 4 rows of A: in one call, or rows 1 + 1 + ... where registers run out.
template <int kBytes>
LOWBIT_AVX2_TARGET void rows_any(const uint8_t* codes, const float* scales, const uint8_t* zeros, int64_t K,
                                 int64_t blocksize, const Gemv4Table& g, const float* ap, int64_t ldap, int rows,
                                 __m256 (&acc)[4]) {
  switch (rows) {
    case 1: {
      __m256 a[1];
      row_any<1, kBytes>(codes, scales, zeros, K, blocksize, g, ap, ldap, a);
      acc[0] = a[0];
      return;
    }
    case 2: {
      __m256 a[2];
      row_any<2, kBytes>(codes, scales, zeros, K, blocksize, g, ap, ldap, a);
      acc[0] = a[0], acc[1] = a[1];
      return;
    }
    case 3: {
      __m256 a[3];
      row_any<3, kBytes>(codes, scales, zeros, K, blocksize, g, ap, ldap, a);
      acc[0] = a[0], acc[1] = a[1], acc[2] = a[2];
      return;
    }
    default: {
      row_any<4, kBytes>(codes, scales, zeros, K, blocksize, g, ap, ldap, acc);
      return;
    }
  }
}

LOWBIT_AVX2_TARGET float total(const __m256& v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  float sum = 0.0f;
  for (float x : lanes) sum += x;
  return sum;
}

}  // namespace

LOWBIT_AVX2_TARGET void rows_bf16(const Gemv4Rows& w, int64_t K, int64_t blocksize, const Gemv4Table& t,
                                  const float* ap, int64_t ldap, int rows, float* acc16) {
  for (int r = 0; r < w.count; ++r) {
    __m256 acc[4];
    rows_any<2>(w.codes[r], w.scales[r], w.zeros[r], K, blocksize, t, ap, ldap, rows, acc);
    for (int m = 0; m < rows; ++m) {
      float* out = acc16 + 16 * (r * rows + m);
      _mm256_storeu_ps(out, acc[m]);
      _mm256_storeu_ps(out + 8, _mm256_setzero_ps());
    }
  }
}

LOWBIT_AVX2_TARGET void row_f32(const uint8_t* codes, int64_t K, int64_t blocksize, const float* scales,
                                const Gemv4Table& t, const float* ax, int64_t ldx, int rows, float* out) {
  __m256 acc[4];
  rows_any<4>(codes, scales, nullptr, K, blocksize, t, ax, ldx, rows, acc);
  for (int m = 0; m < rows; ++m) out[m] = total(acc[m]);
}
#undef LOWBIT_AVX2_TARGET
#endif

}  // namespace lowbit::core::cpu::gemm::avx2
