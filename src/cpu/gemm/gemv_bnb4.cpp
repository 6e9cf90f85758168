// The few-rows product of a bitsandbytes 4-bit weight on AVX-512: each row of
// W streamed once, its codes looked up 16 at a time in a register (vpermps)
// and multiplied into the rows of A without leaving registers, each block's
// sum scaled by its absmax once (a sum of table values times A, then the
// scale: the dequantized weight's products up to fp32 rounding, within the
// matmul's tolerance like the tile path's order of sums).
#include <cstdint>

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
#endif

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

}  // namespace lowbit::core::cpu::gemm
