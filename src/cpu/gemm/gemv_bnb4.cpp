// The few-rows products of 4-bit weights on AVX-512: each row of W streamed
// once, its codes looked up in a register and multiplied into the rows of A
// without leaving registers, each block's sum scaled by its scale once (a
// sum of table values times A, then the scale: the dequantized weight's
// products up to fp32 rounding, within the matmul's tolerance like the tile
// path's order of sums). fp32 A: bitsandbytes' codes, 16 at a time by
// vpermps. bf16 A: bitsandbytes' codes or the rows layout's (the nibble
// order is A's permutation), 32 at a time by vpermw into vdpbf16ps, for
// matmul_4bit and Matmul alike. Without AVX-512 the Highway kernels
// (gemv4_hwy.cpp: AVX2, SSE4, NEON) serve both; this file picks.
#include <cstdint>

#include "core/float_convert.h"
#include "cpu/byte_tables.h"
#include "cpu/gemm/gemv4_hwy.h"
#include "cpu/gemm/gemv8_hwy.h"
#include "cpu/gemm/kernels.h"
#include "cpu/isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's AVX-512 headers, as in decode.cpp
#endif
#endif

namespace lowbit::core::cpu::gemm {
namespace {

#if defined(__x86_64__)
// Each 16 bytes of a row hold 32 codes: lane j's byte gives element 2j (high
// nibble) and 2j + 1 (low nibble), which meet the even and odd halves of A's
// 32-element chunk (bnb4_split_a's layout). The even and odd products, and
// kSteps chunks in turn, go to separate sums: enough independent FMA chains
// that their latency is hidden (one chain a row is latency-bound).
template <int kRows, int kSteps>
__attribute__((target("avx512f"))) void row_avx512(const uint8_t* row, int64_t K, int64_t blocksize,
                                                   const float* scales, const float* table16, const float* ax,
                                                   int64_t ldx, float* out) {
  constexpr int kSums = 2 * kSteps;
  const __m512 tab = _mm512_loadu_ps(table16);
  const __m512i low = _mm512_set1_epi32(0xf);
  __m512 acc[kRows];
  for (int m = 0; m < kRows; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t b = 0, k0 = 0; k0 < K; ++b, k0 += blocksize) {
    __m512 part[kRows][kSums];
    for (int m = 0; m < kRows; ++m) {
      for (int i = 0; i < kSums; ++i) part[m][i] = _mm512_setzero_ps();
    }
    for (int64_t k = k0; k < k0 + blocksize; k += 32 * kSteps) {
      for (int t = 0; t < kSteps; ++t) {
        const int64_t kk = k + 32 * t;
        const __m512i codes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + kk / 2)));
        const __m512 even = _mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), tab);
        const __m512 odd = _mm512_permutexvar_ps(_mm512_and_si512(codes, low), tab);
        for (int m = 0; m < kRows; ++m) {
          part[m][2 * t] = _mm512_fmadd_ps(even, _mm512_loadu_ps(ax + m * ldx + kk), part[m][2 * t]);
          part[m][2 * t + 1] = _mm512_fmadd_ps(odd, _mm512_loadu_ps(ax + m * ldx + kk + 16), part[m][2 * t + 1]);
        }
      }
    }
    const __m512 s = _mm512_set1_ps(scales[b]);
    for (int m = 0; m < kRows; ++m) {
      __m512 sum = part[m][0];
      for (int i = 1; i < kSums; ++i) sum = _mm512_add_ps(sum, part[m][i]);
      acc[m] = _mm512_fmadd_ps(sum, s, acc[m]);
    }
  }
  for (int m = 0; m < kRows; ++m) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc[m]);
    float sum = 0.0f;
    for (float v : lanes) sum += v;
    out[m] = sum;
  }
}

// One row of A takes two chunks a step where the blocks allow (four chains), more rows one.
__attribute__((target("avx512f"))) void row_avx512_any(const uint8_t* row, int64_t K, int64_t blocksize,
                                                       const float* scales, const float* table16, const float* ax,
                                                       int64_t ldx, int rows, float* out) {
  switch (rows) {
    case 1:
      if (blocksize % 64 == 0) return row_avx512<1, 2>(row, K, blocksize, scales, table16, ax, ldx, out);
      return row_avx512<1, 1>(row, K, blocksize, scales, table16, ax, ldx, out);
    case 2: return row_avx512<2, 1>(row, K, blocksize, scales, table16, ax, ldx, out);
    case 3: return row_avx512<3, 1>(row, K, blocksize, scales, table16, ax, ldx, out);
    default: return row_avx512<4, 1>(row, K, blocksize, scales, table16, ax, ldx, out);
  }
}

// bf16 activations (AVX-512 BW and BF16). Each 64 bytes of a row hold 128
// codes; word i (bytes 2i, 2i + 1) gives elements 4i .. 4i + 3 in its four
// nibbles (bitsandbytes: 4i + 1, 4i, 4i + 3, 4i + 2 from bit 0; the rows
// layout: 4i, 4i + 1, 4i + 2, 4i + 3). vpermw looks a word up by its low
// 5 bits in a 32-entry table (the 16 values twice, so the next nibble's bit
// needs no mask), after shifts of 0, 4, 8 and 12: four vectors of 32 bf16
// weights, which vdpbf16ps multiplies in pairs by A's chunk permuted the
// same way (permute_a_bf16) into fp32 lanes. Lane l sums elements
// 8l .. 8l + 7 of the chunk, so a block of 32 or more holds whole lanes and
// its absmax scales them once a chunk (kLanes lanes a block).
#define LOWBIT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

// One 128-element chunk at k of kW rows of W: each row's weights decoded
// once (by its table), A's chunk of each of its kRows rows loaded once for
// all kW, each (W row, A row) sum scaled by its W row's s into acc.
template <int kRows, int kW>
LOWBIT_BF16_TARGET __attribute__((always_inline)) inline void chunk_bf16(const uint8_t* const (&row)[2], int64_t k,
                                                                          const __m512i (&tab)[2], const uint16_t* ap,
                                                                          int64_t ldap, const __m512 (&s)[2],
                                                                          __m512 (&acc)[kW][kRows]) {
  __m512bh w[kW][4];
  for (int r = 0; r < kW; ++r) {
    // The weight streams from DRAM when it exceeds the caches: fetched 2 KB
    // a row ahead (past a row's end, the start of the row as far after it:
    // with two rows, not the other one's), it arrives in time.
    _mm_prefetch(reinterpret_cast<const char*>(row[r] + k / 2 + 2048 * kW), _MM_HINT_T0);
    const __m512i x = _mm512_loadu_si512(row[r] + k / 2);
    w[r][0] = (__m512bh)_mm512_permutexvar_epi16(x, tab[r]);
    w[r][1] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(x, 4), tab[r]);
    w[r][2] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(x, 8), tab[r]);
    w[r][3] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(x, 12), tab[r]);
  }
  for (int m = 0; m < kRows; ++m) {
    const uint16_t* a = ap + m * ldap + k;
    const __m512bh a0 = (__m512bh)_mm512_loadu_si512(a), a1 = (__m512bh)_mm512_loadu_si512(a + 32);
    const __m512bh a2 = (__m512bh)_mm512_loadu_si512(a + 64), a3 = (__m512bh)_mm512_loadu_si512(a + 96);
    for (int r = 0; r < kW; ++r) {
      const __m512 p = _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), w[r][0], a0), w[r][2], a2);
      const __m512 q = _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), w[r][1], a1), w[r][3], a3);
      acc[r][m] = _mm512_fmadd_ps(_mm512_add_ps(p, q), s[r], acc[r][m]);
    }
  }
}

template <int kRows, int kW, int kLanes, bool kZeros = false>
LOWBIT_BF16_TARGET void rows_bf16(const Gemv4Rows& w, int64_t K, int64_t blocksize, const Gemv4Table& t,
                                  const uint16_t* ap, int64_t ldap, float* acc16) {
  __m512i tab[2];
  tab[0] = tab[1] = _mm512_loadu_si512(t.bf16);
  __m512 acc[kW][kRows];
  for (int r = 0; r < kW; ++r) {
    for (int m = 0; m < kRows; ++m) acc[r][m] = _mm512_setzero_ps();
  }
  __m512 s[2];
  if constexpr (kLanes == 16) {  // blocks of whole chunks
    const int64_t per_block = blocksize / 128;
    for (int64_t b = 0, k = 0; k < K; ++b) {
      for (int r = 0; r < kW; ++r) {
        s[r] = _mm512_set1_ps(w.scales[r][b]);
        if constexpr (kZeros) tab[r] = _mm512_loadu_si512(t.zero_bf16[w.zeros[r][b]]);
      }
      for (int64_t c = 0; c < per_block; ++c, k += 128) chunk_bf16<kRows, kW>(w.codes, k, tab, ap, ldap, s, acc);
    }
  } else {  // 16 / kLanes blocks a chunk: lane l takes the scale of block l / kLanes
    const __m512i lane_block = _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                 kLanes == 4 ? 2 : 3);
    constexpr __mmask16 kLoad = (1u << (16 / kLanes)) - 1;
    for (int64_t k = 0, b = 0; k < K; k += 128, b += 16 / kLanes) {
      for (int r = 0; r < kW; ++r) {
        s[r] = _mm512_permutexvar_ps(lane_block, _mm512_maskz_loadu_ps(kLoad, w.scales[r] + b));
      }
      chunk_bf16<kRows, kW>(w.codes, k, tab, ap, ldap, s, acc);
    }
  }
  for (int r = 0; r < kW; ++r) {
    for (int m = 0; m < kRows; ++m) _mm512_storeu_ps(acc16 + 16 * (r * kRows + m), acc[r][m]);
  }
}

template <int kRows, int kW>
LOWBIT_BF16_TARGET void rows_bf16_blocks(const Gemv4Rows& w, int64_t K, int64_t blocksize, const Gemv4Table& t,
                                         const uint16_t* ap, int64_t ldap, float* acc16) {
  if (blocksize == 32) return rows_bf16<kRows, kW, 4>(w, K, blocksize, t, ap, ldap, acc16);
  if (blocksize == 64) return rows_bf16<kRows, kW, 8>(w, K, blocksize, t, ap, ldap, acc16);
  // A table rebuilt per block is a loop-carried value; the kernel without zeros keeps one in a register.
  if (w.zeros[0] != nullptr) return rows_bf16<kRows, kW, 16, true>(w, K, blocksize, t, ap, ldap, acc16);
  return rows_bf16<kRows, kW, 16>(w, K, blocksize, t, ap, ldap, acc16);
}

template <int kW>
LOWBIT_BF16_TARGET void rows_bf16_any(const Gemv4Rows& w, int64_t K, int64_t blocksize, const Gemv4Table& t,
                                      const uint16_t* ap, int64_t ldap, int rows, float* acc16) {
  switch (rows) {
    case 1: return rows_bf16_blocks<1, kW>(w, K, blocksize, t, ap, ldap, acc16);
    case 2: return rows_bf16_blocks<2, kW>(w, K, blocksize, t, ap, ldap, acc16);
    case 3: return rows_bf16_blocks<3, kW>(w, K, blocksize, t, ap, ldap, acc16);
    default: return rows_bf16_blocks<4, kW>(w, K, blocksize, t, ap, ldap, acc16);
  }
}

LOWBIT_BF16_TARGET void rows_bf16_entry(const Gemv4Rows& w, int64_t K, int64_t blocksize, const Gemv4Table& t,
                                        const uint16_t* ap, int64_t ldap, int rows, float* acc16) {
  if (w.count == 2) return rows_bf16_any<2>(w, K, blocksize, t, ap, ldap, rows, acc16);
  return rows_bf16_any<1>(w, K, blocksize, t, ap, ldap, rows, acc16);
}
#undef LOWBIT_BF16_TARGET
#endif

// Which kernels serve the few-rows products on this CPU (under LOWBIT_CPU_ISA): the AVX-512 ones above where
// their features are allowed, else the Highway ones (gemv4_hwy.cpp) for the best target allowed.
enum class Kernels { hwy, avx512 };

Kernels f32_kernels() {
  static const Kernels k = [] {
#if defined(__x86_64__)
    if (supports(Feature::avx512f)) return Kernels::avx512;
#endif
    return Kernels::hwy;
  }();
  return k;
}

Kernels bf16_kernels() {
  static const Kernels k = [] {
#if defined(__x86_64__)
    if (supports(Feature::avx512bw) && supports(Feature::avx512bf16)) return Kernels::avx512;
#endif
    return Kernels::hwy;
  }();
  return k;
}

}  // namespace

Gemv4Table gemv4_table(const float* values16, bool zeros) {
  Gemv4Table t{};
  // vpermw's table: each value's bf16 twice (it reads 5 index bits).
  const auto twice = [](const uint8_t(&bytes)[2][16], uint16_t(&words)[32]) {
    for (int i = 0; i < 32; ++i) words[i] = static_cast<uint16_t>(bytes[0][i % 16] | bytes[1][i % 16] << 8);
  };
  for (int i = 0; i < 16; ++i) t.values[i] = values16[i];
  f32_byte_tables(values16, t.f32_bytes);
  bf16_byte_tables(values16, t.bf16_bytes);
  twice(t.bf16_bytes, t.bf16);
  for (int z = 0; zeros && z < 16; ++z) {
    float shifted[16];
    for (int i = 0; i < 16; ++i) shifted[i] = values16[i] - values16[z];
    bf16_byte_tables(shifted, t.zero_bf16_bytes[z]);
    twice(t.zero_bf16_bytes[z], t.zero_bf16[z]);
  }
  return t;
}

Gemv4Table gemv8_table(WeightKind kind, const float* vtab256) {
  Gemv4Table t{};
  t.kind8 = kind;
  t.vtab256 = vtab256;
  return t;
}

bool bnb4_gemv_fits(int64_t K, int64_t blocksize) {
  if (blocksize <= 0 || K % blocksize != 0 || blocksize % 32 != 0) return false;
  const hwy_gemv4::Kernels& k = hwy_gemv4::kernels();
  return f32_kernels() == Kernels::avx512 || hwy_gemv4::fits(hwy_gemv4::step_of(k, 4), 4, K, blocksize, false);
}

int64_t bnb4_gemv_max_rows() { return f32_kernels() == Kernels::hwy ? 64 : 4; }

void bnb4_split_a(const float* a, int64_t K, Nibbles order, float* ax) {
  if (f32_kernels() == Kernels::hwy) {
    const int64_t step = hwy_gemv4::step_of(hwy_gemv4::kernels(), 4);
    return hwy_gemv4::permute_a(step, 4, nullptr, a, nullptr, K, order, 4, ax);
  }
  // The AVX-512 kernel takes each byte's high nibble against ax[c + j], its low one against ax[c + 16 + j].
  const int first = order == Nibbles::high_first ? 0 : 1;
  for (int64_t c = 0; c < K; c += 32) {
    for (int j = 0; j < 16; ++j) {
      ax[c + j] = a[c + 2 * j + first];
      ax[c + 16 + j] = a[c + 2 * j + 1 - first];
    }
  }
}

void bnb4_gemv_row(const uint8_t* row, int64_t K, int64_t blocksize, const float* scales, const Gemv4Table& t,
                   const float* ax, int64_t ldx, int rows, float* out) {
#if defined(__x86_64__)
  if (f32_kernels() == Kernels::avx512) return row_avx512_any(row, K, blocksize, scales, t.values, ax, ldx, rows, out);
#endif
  hwy_gemv4::kernels().row_f32(row, K, blocksize, scales, t, ax, ldx, rows, out);
}

namespace {

// The kernel that takes A (bf16 when a_bf16, else fp32) with codes of `bits`: the AVX-512 BF16 one (4-bit codes
// on bf16 A, where allowed), Highway's table kernel (1, 2 and 4 bits) or its 8-bit one; none for other widths.
enum class Bf16Kernel { avx512, hwy_table, hwy8, none };

Bf16Kernel bf16_kernel(int bits, bool a_bf16) {
  if (bits == 8) return Bf16Kernel::hwy8;
  if (bits != 1 && bits != 2 && bits != 4) return Bf16Kernel::none;
  return a_bf16 && bits == 4 && bf16_kernels() == Kernels::avx512 ? Bf16Kernel::avx512 : Bf16Kernel::hwy_table;
}

}  // namespace

bool gemv4_bf16_fits(int64_t K, int64_t blocksize, int bits, bool zeros, bool a_bf16) {
  if (blocksize <= 0) return false;
  switch (bf16_kernel(bits, a_bf16)) {
    case Bf16Kernel::avx512:
      return K % 128 == 0 && (blocksize == 32 || blocksize == 64 || blocksize % 128 == 0) &&
             (!zeros || blocksize % 128 == 0);
    case Bf16Kernel::hwy_table:
      return hwy_gemv4::fits(hwy_gemv4::step_of(hwy_gemv4::kernels(), bits), bits, K, blocksize, zeros);
    case Bf16Kernel::hwy8: return K % hwy_gemv8::kernels().step == 0 && blocksize % hwy_gemv8::kernels().step == 0;
    case Bf16Kernel::none: return false;
  }
  return false;
}

int64_t gemv4_bf16_max_rows(int bits, bool a_bf16) {
  switch (bf16_kernel(bits, a_bf16)) {
    case Bf16Kernel::avx512: return 64;
    case Bf16Kernel::hwy_table: return 32;
    case Bf16Kernel::hwy8: return a_bf16 ? 16 : 8;  // fp16 A's other path, the tiles, wins from 16 rows
    case Bf16Kernel::none: return 0;
  }
  return 0;
}

int64_t gemv4_a_bytes(int bits, bool a_bf16) { return bf16_kernel(bits, a_bf16) == Bf16Kernel::avx512 ? 2 : 4; }

void permute_a_bf16(const uint16_t* a, const float* a32, const int32_t* perm, int64_t K, int bits, Nibbles order,
                    void* out) {
  switch (bf16_kernel(bits, a != nullptr)) {
    case Bf16Kernel::hwy8: {  // in order, as fp32
      auto* ap = static_cast<float*>(out);
      for (int64_t k = 0; k < K; ++k) {
        const int64_t j = perm ? perm[k] : k;
        ap[k] = a ? bf16_to_f32(a[j]) : a32[j];
      }
      return;
    }
    case Bf16Kernel::hwy_table: {
      const int64_t step = hwy_gemv4::step_of(hwy_gemv4::kernels(), bits);
      return hwy_gemv4::permute_a(step, bits, a, a32, perm, K, order, 2, static_cast<float*>(out));
    }
    case Bf16Kernel::avx512: {
      auto* ap = static_cast<uint16_t*>(out);
      // The element each shift of word i yields, in shift order 0, 4, 8, 12.
      const int high[4] = {1, 0, 3, 2}, low[4] = {0, 1, 2, 3};
      const int* at = order == Nibbles::high_first ? high : low;
      for (int64_t c = 0; c < K; c += 128) {
        for (int s = 0; s < 4; ++s) {
          for (int i = 0; i < 32; ++i) {
            const int64_t k = c + 4 * i + at[s];
            ap[c + 32 * s + i] = a[perm ? perm[k] : k];
          }
        }
      }
      return;
    }
    case Bf16Kernel::none: return;
  }
}

void gemv4_rows_bf16(const Gemv4Rows& w, int64_t K, int64_t blocksize, int bits, const Gemv4Table& t, const void* ap,
                     int64_t ldap, int rows, float* acc16, bool a_bf16) {
  const auto* ap32 = static_cast<const float*>(ap);
  switch (bf16_kernel(bits, a_bf16)) {
    case Bf16Kernel::hwy8:
      return hwy_gemv8::kernels().rows_bf16(w, t.kind8, t.vtab256, K, blocksize, ap32, ldap, rows, acc16);
    case Bf16Kernel::hwy_table:
      return hwy_gemv4::kernels().rows_bf16(w, K, blocksize, bits, t, ap32, ldap, rows, acc16);
    case Bf16Kernel::avx512:
#if defined(__x86_64__)
      return rows_bf16_entry(w, K, blocksize, t, static_cast<const uint16_t*>(ap), ldap, rows, acc16);
#endif
    case Bf16Kernel::none: return;
  }
}

}  // namespace lowbit::core::cpu::gemm
