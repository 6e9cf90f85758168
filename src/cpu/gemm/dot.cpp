// The dot-product kernel of the fast path: c[mr, nr] += a[mr, kp] · w[nr, kp]ᵀ,
// register-blocked and vectorized, one variant per instruction set, picked
// once at run time. Here FMA contraction is welcome: the sums only need
// to meet the matmul's tolerance, and an FMA rounds less than mul + add.
#include <cstdint>
#include <cstring>

#include "cpu/gemm/tiles.h"
#include "cpu/isa.h"

namespace lowbit::core::cpu::gemm {
namespace {

template <int W>
struct Lanes {
  typedef float type __attribute__((vector_size(W * 4)));
};

// [MR, NR] outputs of W lanes each: per k-step MR + NR vector loads feed
// MR * NR multiply-adds. Fully unrolled, so the MR * NR accumulators live
// in registers (16 of AVX-512's 32 at 4x4).
template <int W, int MR, int NR>
[[gnu::always_inline]] inline void micro(const float* a, int64_t lda, const float* w, int64_t ldw, int64_t kp, float* c,
                                         int64_t ldc) {
  using V = typename Lanes<W>::type;
  V acc[MR][NR] = {};
  for (int64_t k = 0; k < kp; k += W) {
    V av[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) std::memcpy(&av[i], a + i * lda + k, sizeof(V));
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      V wv;
      std::memcpy(&wv, w + j * ldw + k, sizeof(V));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) acc[i][j] += av[i] * wv;
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      float s = 0.0f;
      for (int v = 0; v < W; ++v) s += acc[i][j][v];
      c[i * ldc + j] += s;
    }
  }
}

template <int W, int MR, int NR>
[[gnu::always_inline]] inline void tile(const float* a, int64_t lda, int mr, const float* w, int64_t ldw, int nr,
                                        int64_t kp, float* c, int64_t ldc) {
  static_assert(kVec % W == 0, "rows are padded to kVec floats");
  int i = 0;
  for (; i + MR <= mr; i += MR) {
    int j = 0;
    for (; j + NR <= nr; j += NR) micro<W, MR, NR>(a + i * lda, lda, w + j * ldw, ldw, kp, c + i * ldc + j, ldc);
    for (; j < nr; ++j) micro<W, MR, 1>(a + i * lda, lda, w + j * ldw, ldw, kp, c + i * ldc + j, ldc);
  }
  for (; i < mr; ++i) {
    int j = 0;
    for (; j + NR <= nr; j += NR) micro<W, 1, NR>(a + i * lda, lda, w + j * ldw, ldw, kp, c + i * ldc + j, ldc);
    for (; j < nr; ++j) micro<W, 1, 1>(a + i * lda, lda, w + j * ldw, ldw, kp, c + i * ldc + j, ldc);
  }
}

// 4x4 of 16 lanes fills AVX-512's registers; AVX2's 16 hold 4x2 of 8 lanes
// (8 accumulators, 4 A rows, 1 W row); SSE the same shape at 4 lanes.
__attribute__((target("avx512f"))) void tile_dot_avx512(const float* a, int64_t lda, int mr, const float* w,
                                                        int64_t ldw, int nr, int64_t kp, float* c, int64_t ldc) {
  tile<16, 4, 4>(a, lda, mr, w, ldw, nr, kp, c, ldc);
}
__attribute__((target("avx2,fma"))) void tile_dot_avx2(const float* a, int64_t lda, int mr, const float* w, int64_t ldw,
                                                       int nr, int64_t kp, float* c, int64_t ldc) {
  tile<8, 4, 2>(a, lda, mr, w, ldw, nr, kp, c, ldc);
}
void tile_dot_base(const float* a, int64_t lda, int mr, const float* w, int64_t ldw, int nr, int64_t kp, float* c,
                   int64_t ldc) {
  tile<4, 4, 2>(a, lda, mr, w, ldw, nr, kp, c, ldc);
}

using TileDot = void (*)(const float*, int64_t, int, const float*, int64_t, int, int64_t, float*, int64_t);

TileDot pick_tile_dot() {
  if (supports(Feature::avx512f)) return tile_dot_avx512;
  if (supports(Feature::avx2) && supports(Feature::fma)) return tile_dot_avx2;
  return tile_dot_base;
}

}  // namespace

void tile_dot(const float* a, int64_t lda, int mr, const float* w, int64_t ldw, int nr, int64_t kp, float* c,
              int64_t ldc) {
  static const TileDot fn = pick_tile_dot();
  fn(a, lda, mr, w, ldw, nr, kp, c, ldc);
}

}  // namespace lowbit::core::cpu::gemm
