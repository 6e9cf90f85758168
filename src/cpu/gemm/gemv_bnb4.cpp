// The few-rows product of a bitsandbytes 4-bit weight on AVX-512: each row of
// W streamed once, its codes looked up 16 at a time in a register (vpermps)
// and multiplied into the rows of A without leaving registers, each block's
// sum scaled by its absmax once (a sum of table values times A, then the
// scale: the dequantized weight's products up to fp32 rounding, within the
// matmul's tolerance like the tile path's order of sums).
#include <cstdint>

#include "core/float_convert.h"
#include "cpu/gemm/kernels.h"

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
// codes; word i (bytes 2i, 2i + 1) gives element 4i + 1 in bits 0-3, 4i in
// 4-7, 4i + 3 in 8-11 and 4i + 2 in 12-15. vpermw looks a word up by its low
// 5 bits in a 32-entry table (the 16 values twice, so the next nibble's bit
// needs no mask), after shifts of 0, 4, 8 and 12: four vectors of 32 bf16
// weights, which vdpbf16ps multiplies in pairs by A's chunk permuted the
// same way (bnb4_permute_a_bf16) into fp32 lanes. Lane l sums elements
// 8l .. 8l + 7 of the chunk, so a block of 32 or more holds whole lanes and
// its absmax scales them once a chunk (kLanes lanes a block).
#define LOWBIT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

// One 128-element chunk at k: its weights decoded once, each A row's sums
// scaled by s into acc.
template <int kRows>
LOWBIT_BF16_TARGET __attribute__((always_inline)) inline void chunk_bf16(const uint8_t* row, int64_t k, __m512i tab,
                                                                          const uint16_t* ap, int64_t ldap, __m512 s,
                                                                          __m512 (&acc)[kRows]) {
  // The weight streams from DRAM when it exceeds the caches: fetched 2 KB
  // ahead (the next row's start past a row's end), it arrives in time.
  _mm_prefetch(reinterpret_cast<const char*>(row + k / 2 + 2048), _MM_HINT_T0);
  const __m512i w = _mm512_loadu_si512(row + k / 2);
  const __m512bh w0 = (__m512bh)_mm512_permutexvar_epi16(w, tab);
  const __m512bh w1 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), tab);
  const __m512bh w2 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(w, 8), tab);
  const __m512bh w3 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(w, 12), tab);
  for (int m = 0; m < kRows; ++m) {
    const uint16_t* a = ap + m * ldap + k;
    __m512 p = _mm512_dpbf16_ps(_mm512_setzero_ps(), w0, (__m512bh)_mm512_loadu_si512(a));
    __m512 q = _mm512_dpbf16_ps(_mm512_setzero_ps(), w1, (__m512bh)_mm512_loadu_si512(a + 32));
    p = _mm512_dpbf16_ps(p, w2, (__m512bh)_mm512_loadu_si512(a + 64));
    q = _mm512_dpbf16_ps(q, w3, (__m512bh)_mm512_loadu_si512(a + 96));
    acc[m] = _mm512_fmadd_ps(_mm512_add_ps(p, q), s, acc[m]);
  }
}

template <int kRows, int kLanes>
LOWBIT_BF16_TARGET void row_bf16(const uint8_t* row, int64_t k0, int64_t k1, int64_t blocksize, const float* scales,
                                 const uint16_t* table32, const uint16_t* ap, int64_t ldap, float* acc16) {
  const __m512i tab = _mm512_loadu_si512(table32);
  __m512 acc[kRows];
  for (int m = 0; m < kRows; ++m) acc[m] = _mm512_loadu_ps(acc16 + 16 * m);
  if constexpr (kLanes == 16) {  // blocks of whole chunks
    const int64_t per_block = blocksize / 128;
    for (int64_t b = k0 / blocksize, k = k0; k < k1; ++b) {
      const __m512 s = _mm512_set1_ps(scales[b]);
      for (int64_t c = 0; c < per_block; ++c, k += 128) chunk_bf16<kRows>(row, k, tab, ap, ldap, s, acc);
    }
  } else {  // 16 / kLanes blocks a chunk: lane l takes the scale of block l / kLanes
    const __m512i lane_block = _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                 kLanes == 4 ? 2 : 3);
    constexpr __mmask16 kLoad = (1u << (16 / kLanes)) - 1;
    scales += k0 / blocksize;
    for (int64_t k = k0; k < k1; k += 128, scales += 16 / kLanes) {
      const __m512 s = _mm512_permutexvar_ps(lane_block, _mm512_maskz_loadu_ps(kLoad, scales));
      chunk_bf16<kRows>(row, k, tab, ap, ldap, s, acc);
    }
  }
  for (int m = 0; m < kRows; ++m) _mm512_storeu_ps(acc16 + 16 * m, acc[m]);
}

template <int kRows>
LOWBIT_BF16_TARGET void row_bf16_blocks(const uint8_t* row, int64_t k0, int64_t k1, int64_t blocksize,
                                        const float* scales, const uint16_t* table32, const uint16_t* ap,
                                        int64_t ldap, float* acc16) {
  if (blocksize == 32) return row_bf16<kRows, 4>(row, k0, k1, blocksize, scales, table32, ap, ldap, acc16);
  if (blocksize == 64) return row_bf16<kRows, 8>(row, k0, k1, blocksize, scales, table32, ap, ldap, acc16);
  return row_bf16<kRows, 16>(row, k0, k1, blocksize, scales, table32, ap, ldap, acc16);
}

LOWBIT_BF16_TARGET void row_bf16_any(const uint8_t* row, int64_t k0, int64_t k1, int64_t blocksize,
                                     const float* scales, const uint16_t* table32, const uint16_t* ap, int64_t ldap,
                                     int rows, float* acc16) {
  switch (rows) {
    case 1: return row_bf16_blocks<1>(row, k0, k1, blocksize, scales, table32, ap, ldap, acc16);
    case 2: return row_bf16_blocks<2>(row, k0, k1, blocksize, scales, table32, ap, ldap, acc16);
    case 3: return row_bf16_blocks<3>(row, k0, k1, blocksize, scales, table32, ap, ldap, acc16);
    default: return row_bf16_blocks<4>(row, k0, k1, blocksize, scales, table32, ap, ldap, acc16);
  }
}
#undef LOWBIT_BF16_TARGET
#endif

using RowBf16Fn = void (*)(const uint8_t*, int64_t, int64_t, int64_t, const float*, const uint16_t*, const uint16_t*,
                           int64_t, int, float*);

RowBf16Fn row_bf16_fn() {
  static const RowBf16Fn fn = [] {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16")) return &row_bf16_any;
#endif
    return static_cast<RowBf16Fn>(nullptr);
  }();
  return fn;
}

using RowFn = void (*)(const uint8_t*, int64_t, int64_t, const float*, const float*, const float*, int64_t, int,
                       float*);

RowFn pick_row() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return row_avx512_any;
#endif
  return nullptr;
}

RowFn row_fn() {
  static const RowFn fn = pick_row();
  return fn;
}

}  // namespace

bool bnb4_gemv_available() { return row_fn() != nullptr; }

void bnb4_split_a(const float* a, int64_t K, float* ax) {
  for (int64_t c = 0; c < K; c += 32) {
    for (int j = 0; j < 16; ++j) {
      ax[c + j] = a[c + 2 * j];
      ax[c + 16 + j] = a[c + 2 * j + 1];
    }
  }
}

void bnb4_gemv_row(const uint8_t* row, int64_t K, int64_t blocksize, const float* scales, const float* table16,
                   const float* ax, int64_t ldx, int rows, float* out) {
  row_fn()(row, K, blocksize, scales, table16, ax, ldx, rows, out);
}

bool bnb4_gemv_bf16_available() { return row_bf16_fn() != nullptr; }

void bnb4_permute_a_bf16(const uint16_t* a, int64_t K, uint16_t* ap) {
  for (int64_t c = 0; c < K; c += 128) {
    for (int i = 0; i < 32; ++i) {
      ap[c + i] = a[c + 4 * i + 1];
      ap[c + 32 + i] = a[c + 4 * i];
      ap[c + 64 + i] = a[c + 4 * i + 3];
      ap[c + 96 + i] = a[c + 4 * i + 2];
    }
  }
}

void bnb4_table_bf16(const float* table16, uint16_t* table32) {
  for (int i = 0; i < 32; ++i) table32[i] = f32_to_bf16(table16[i % 16]);
}

void bnb4_gemv_row_bf16(const uint8_t* row, int64_t k0, int64_t k1, int64_t blocksize, const float* scales,
                        const uint16_t* table32, const uint16_t* ap, int64_t ldap, int rows, float* acc16) {
  row_bf16_fn()(row, k0, k1, blocksize, scales, table32, ap, ldap, rows, acc16);
}

}  // namespace lowbit::core::cpu::gemm
