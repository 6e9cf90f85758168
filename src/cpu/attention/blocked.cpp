// The register tiles of the CPU attention's float32 path (blocked.h), built
// for AVX-512, AVX2 and the baseline (simd_clones.h): 16-float vector values
// in registers, the same sums in every variant.
#include "cpu/attention/blocked.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu/simd_clones.h"

namespace lowbit::core::cpu::attention {

namespace {

// e^x for x <= 0 (and -inf, giving 0), within a few ulp: x = n ln 2 + r with
// |r| <= ln 2 / 2 (ln 2 in two parts), e^r by its degree-6 Taylor polynomial,
// 2^n through the exponent bits, 0 where 2^n is below float's normal range.
// Branch-free, so the loops calling it vectorize.
inline float exp_nonpositive(float x) {
  const float xc = std::max(x, -104.0f);
  const float n = std::floor(xc * 1.44269504f + 0.5f);
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t biased = std::max(static_cast<int32_t>(n == n ? n : 0.0f) + 127, 0);  // NaN: p carries it
  return p * std::bit_cast<float>(biased << 23);
}

// 8 floats as one value (GCC's vector extension), kept in registers.
typedef float F8 __attribute__((vector_size(32)));
// (Loads and stores through memcpy in place: a function taking or returning F8 would change the ABI
// between the variants.)
#define LOWBIT_LOAD8(v, p) std::memcpy(&(v), (p), sizeof(F8))
#define LOWBIT_STORE8(p, v) std::memcpy((p), &(v), sizeof(F8))

}  // namespace

LOWBIT_SIMD_CLONES
void chunk_scores(const float* q4, int64_t D, const float* kt, int64_t ld, int64_t kc, float scale, float* s4) {
  for (int64_t j0 = 0; j0 < kc; j0 += 16) {  // 4 x 16 scores in 8 vectors
    F8 a0 = {}, a1 = {}, a2 = {}, a3 = {}, b0 = {}, b1 = {}, b2 = {}, b3 = {};
    for (int64_t d = 0; d < D; ++d) {
      F8 k, l;
      LOWBIT_LOAD8(k, kt + d * ld + j0);
      LOWBIT_LOAD8(l, kt + d * ld + j0 + 8);
      const float x0 = q4[d], x1 = q4[D + d], x2 = q4[2 * D + d], x3 = q4[3 * D + d];
      a0 += x0 * k, b0 += x0 * l;
      a1 += x1 * k, b1 += x1 * l;
      a2 += x2 * k, b2 += x2 * l;
      a3 += x3 * k, b3 += x3 * l;
    }
    a0 = scale * a0, a1 = scale * a1, a2 = scale * a2, a3 = scale * a3;
    b0 = scale * b0, b1 = scale * b1, b2 = scale * b2, b3 = scale * b3;
    LOWBIT_STORE8(s4 + j0, a0);
    LOWBIT_STORE8(s4 + j0 + 8, b0);
    LOWBIT_STORE8(s4 + ld + j0, a1);
    LOWBIT_STORE8(s4 + ld + j0 + 8, b1);
    LOWBIT_STORE8(s4 + 2 * ld + j0, a2);
    LOWBIT_STORE8(s4 + 2 * ld + j0 + 8, b2);
    LOWBIT_STORE8(s4 + 3 * ld + j0, a3);
    LOWBIT_STORE8(s4 + 3 * ld + j0 + 8, b3);
  }
}

LOWBIT_SIMD_CLONES
void chunk_weighted_sum(const float* p4, int64_t ld, int64_t kc, const float* v, int64_t ldo, int64_t Dvp, float* o4) {
  for (int64_t e0 = 0; e0 < Dvp; e0 += 16) {  // 4 x 16 outputs in 8 vectors
    F8 a0, a1, a2, a3, b0, b1, b2, b3;
    LOWBIT_LOAD8(a0, o4 + e0);
    LOWBIT_LOAD8(b0, o4 + e0 + 8);
    LOWBIT_LOAD8(a1, o4 + ldo + e0);
    LOWBIT_LOAD8(b1, o4 + ldo + e0 + 8);
    LOWBIT_LOAD8(a2, o4 + 2 * ldo + e0);
    LOWBIT_LOAD8(b2, o4 + 2 * ldo + e0 + 8);
    LOWBIT_LOAD8(a3, o4 + 3 * ldo + e0);
    LOWBIT_LOAD8(b3, o4 + 3 * ldo + e0 + 8);
    for (int64_t j = 0; j < kc; ++j) {
      F8 x, y;
      LOWBIT_LOAD8(x, v + j * ldo + e0);
      LOWBIT_LOAD8(y, v + j * ldo + e0 + 8);
      const float w0 = p4[j], w1 = p4[ld + j], w2 = p4[2 * ld + j], w3 = p4[3 * ld + j];
      a0 += w0 * x, b0 += w0 * y;
      a1 += w1 * x, b1 += w1 * y;
      a2 += w2 * x, b2 += w2 * y;
      a3 += w3 * x, b3 += w3 * y;
    }
    LOWBIT_STORE8(o4 + e0, a0);
    LOWBIT_STORE8(o4 + e0 + 8, b0);
    LOWBIT_STORE8(o4 + ldo + e0, a1);
    LOWBIT_STORE8(o4 + ldo + e0 + 8, b1);
    LOWBIT_STORE8(o4 + 2 * ldo + e0, a2);
    LOWBIT_STORE8(o4 + 2 * ldo + e0 + 8, b2);
    LOWBIT_STORE8(o4 + 3 * ldo + e0, a3);
    LOWBIT_STORE8(o4 + 3 * ldo + e0 + 8, b3);
  }
}

LOWBIT_SIMD_CLONES
void rows_scores(const float* q, int64_t nq, int64_t Dp, const float* kr, int64_t kc, float scale, float* s,
                 int64_t lds) {
  typedef int32_t I8 __attribute__((vector_size(32)));
// The sums of two vectors' adjacent lane pairs, interleaved: lanes (a0+a1, b0+b1, a2+a3, b2+b3, ...) (a macro:
// a function on F8 would change the ABI between the variants).
#define LOWBIT_PAIRS(a, b) \
  (__builtin_shuffle(a, b, I8{0, 8, 2, 10, 4, 12, 6, 14}) + __builtin_shuffle(a, b, I8{1, 9, 3, 11, 5, 13, 7, 15}))
  for (int64_t j0 = 0; j0 < kc; j0 += 8) {
    const float* k = kr + j0 * Dp;
    for (int64_t r = 0; r < nq; ++r) {
      const float* qr = q + r * Dp;
      F8 a[8] = {};
      for (int64_t d = 0; d < Dp; d += 8) {
        F8 x;
        LOWBIT_LOAD8(x, qr + d);
        for (int i = 0; i < 8; ++i) {
          F8 y;
          LOWBIT_LOAD8(y, k + i * Dp + d);
          a[i] += x * y;
        }
      }
      // Key i's lanes summed as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), into lane i.
      const F8 p0 = LOWBIT_PAIRS(a[0], a[1]), p1 = LOWBIT_PAIRS(a[2], a[3]), p2 = LOWBIT_PAIRS(a[4], a[5]),
               p3 = LOWBIT_PAIRS(a[6], a[7]);
      const F8 h0 = __builtin_shuffle(p0, p1, I8{0, 1, 8, 9, 4, 5, 12, 13}) +
                    __builtin_shuffle(p0, p1, I8{2, 3, 10, 11, 6, 7, 14, 15});
      const F8 h1 = __builtin_shuffle(p2, p3, I8{0, 1, 8, 9, 4, 5, 12, 13}) +
                    __builtin_shuffle(p2, p3, I8{2, 3, 10, 11, 6, 7, 14, 15});
      const F8 sum = __builtin_shuffle(h0, h1, I8{0, 1, 2, 3, 8, 9, 10, 11}) +
                     __builtin_shuffle(h0, h1, I8{4, 5, 6, 7, 12, 13, 14, 15});
      const F8 out = scale * sum;
      LOWBIT_STORE8(s + r * lds + j0, out);
    }
  }
}

LOWBIT_SIMD_CLONES
void row_weighted_sum(const float* p, int64_t kc, const float* v, int64_t Dvp, float* o) {
  for (int64_t e0 = 0; e0 < Dvp; e0 += 32) {  // 32 outputs in 4 vectors
    F8 a0, a1, a2, a3;
    LOWBIT_LOAD8(a0, o + e0);
    LOWBIT_LOAD8(a1, o + e0 + 8);
    LOWBIT_LOAD8(a2, o + e0 + 16);
    LOWBIT_LOAD8(a3, o + e0 + 24);
    for (int64_t j = 0; j < kc; ++j) {
      const float* vr = v + j * Dvp + e0;
      F8 x0, x1, x2, x3;
      LOWBIT_LOAD8(x0, vr);
      LOWBIT_LOAD8(x1, vr + 8);
      LOWBIT_LOAD8(x2, vr + 16);
      LOWBIT_LOAD8(x3, vr + 24);
      const float w = p[j];
      a0 += w * x0, a1 += w * x1, a2 += w * x2, a3 += w * x3;
    }
    LOWBIT_STORE8(o + e0, a0);
    LOWBIT_STORE8(o + e0 + 8, a1);
    LOWBIT_STORE8(o + e0 + 16, a2);
    LOWBIT_STORE8(o + e0 + 24, a3);
  }
}

LOWBIT_SIMD_CLONES
void row_step(float* x, int64_t n, int64_t seen, float& peak, float& sum, float* o, int64_t Dvp) {
  for (int64_t j = seen; j < n; ++j) x[j] = -std::numeric_limits<float>::infinity();
  float lanes[16];
  for (float& l : lanes) l = peak;
  int64_t j = 0;
  for (; j + 16 <= seen; j += 16) {
    for (int l = 0; l < 16; ++l) lanes[l] = std::max(lanes[l], x[j + l]);
  }
  for (int l = 0; j < seen; ++j, ++l) lanes[l] = std::max(lanes[l], x[j]);
  float m = lanes[0];
  for (const float l : lanes) m = std::max(m, l);
  const float alpha = exp_nonpositive(peak - m);
  for (j = 0; j < n; ++j) x[j] = exp_nonpositive(x[j] - m);
  float parts[16] = {};
  for (j = 0; j + 16 <= n; j += 16) {
    for (int l = 0; l < 16; ++l) parts[l] += x[j + l];
  }
  for (int l = 0; j < n; ++j, ++l) parts[l] += x[j];
  float total = 0.0f;
  for (const float e : parts) total += e;
  sum = sum * alpha + total;
  peak = m;
  for (int64_t e = 0; e < Dvp; ++e) o[e] *= alpha;
}

#undef LOWBIT_PAIRS
#undef LOWBIT_LOAD8
#undef LOWBIT_STORE8

}  // namespace lowbit::core::cpu::attention
