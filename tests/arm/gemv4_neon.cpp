// The Highway few-rows kernels of 4-bit weights (src/cpu/gemm/gemv4_hwy.cpp)
// built for Arm (NEON) and checked against a float64 reference of the same
// rounded weights: bf16 A (both nibble orders, with and without zero-point
// codes) and fp32 A, every blocksize class, 1-4 rows of A. scripts/arm-check
// cross-compiles it with the kernel's sources and runs it under qemu, since
// no Arm machine runs the suites; the exit status is the verdict.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/float_convert.h"
#include "cpu/gemm/gemv4_hwy.h"
#include "cpu/gemm/kernels.h"

// The kernels' sources call core::fail only for a bad LOWBIT_CPU_ISA; the rest of the library stays out.
namespace lowbit::core {
void fail(ErrorCode, const std::string& m) {
  std::fprintf(stderr, "%s\n", m.c_str());
  std::abort();
}
}  // namespace lowbit::core

using namespace lowbit::core::cpu::gemm;
using lowbit::core::bf16_to_f32;
using lowbit::core::f32_to_bf16;
int main() {
  std::mt19937 g(3);
  std::uniform_real_distribution<float> u(-1, 1);
  float vals[16];
  for (int i = 0; i < 16; ++i) vals[i] = u(g);
  const Gemv4Table t = gemv4_table(vals);
  int bad = 0, runs = 0;
  std::printf("target %s, step %ld\n", hwy_gemv4::kernels().name, static_cast<long>(hwy_gemv4::kernels().step));
  for (int64_t K : {64, 192, 512})
    for (int64_t bs : {32, 64, 128})
      for (int rows : {1, 2, 3, 4})
        for (int zeros = 0; zeros < 2; ++zeros)
          for (int order = 0; order < 2; ++order) {
            if (K % bs || !gemv4_bf16_fits(K, bs)) continue;
            const int N = 2;
            std::vector<uint8_t> codes(N * K / 2), zc(N * K / bs);
            for (auto& c : codes) c = g();
            for (auto& z : zc) z = g() % 16;
            std::vector<float> scales(N * K / bs);
            for (auto& s : scales) s = u(g);
            std::vector<uint16_t> a(rows * K);
            for (auto& x : a) x = f32_to_bf16(u(g));
            std::vector<float> ap(rows * K);
            const Nibbles nib = order ? Nibbles::low_first : Nibbles::high_first;
            for (int m = 0; m < rows; ++m) permute_a_bf16(&a[m * K], nullptr, K, nib, &ap[m * K]);
            Gemv4Rows w{{&codes[0], &codes[K / 2]},
                        {&scales[0], &scales[K / bs]},
                        {zeros ? &zc[0] : nullptr, zeros ? &zc[K / bs] : nullptr},
                        2};
            float acc[2][4][16];
            gemv4_rows_bf16(w, K, bs, t, ap.data(), K, rows, &acc[0][0][0]);
            for (int r = 0; r < 2; ++r)
              for (int m = 0; m < rows; ++m) {
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; ++k) {
                  const uint8_t byte = codes[r * K / 2 + k / 2];
                  const int first = order ? (byte & 15) : (byte >> 4), second = order ? (byte >> 4) : (byte & 15);
                  const int c = k % 2 ? second : first;
                  const float v = zeros ? vals[c] - vals[zc[r * K / bs + k / bs]] : vals[c];
                  const double wv = bf16_to_f32(f32_to_bf16(v)) * (double)scales[r * K / bs + k / bs];
                  ref += wv * bf16_to_f32(a[m * K + k]);
                  mag += std::fabs(wv * bf16_to_f32(a[m * K + k]));
                }
                double got = 0;
                for (int l = 0; l < 16; ++l) got += (&acc[0][0][0])[16 * (r * rows + m) + l];
                ++runs;
                if (std::fabs(got - ref) > 1e-5 * mag + 1e-6) {
                  ++bad;
                  printf("bf16 K=%ld bs=%ld rows=%d zeros=%d order=%d r=%d m=%d got %g ref %g\n", (long)K, (long)bs,
                         rows, zeros, order, r, m, got, ref);
                }
              }
            // fp32 path (high nibble first, no zeros)
            if (!zeros && !order && bnb4_gemv_fits(K, bs)) {
              std::vector<float> a32(rows * K), ax(rows * K);
              for (int i = 0; i < rows * K; ++i) a32[i] = u(g);
              for (int m = 0; m < rows; ++m) bnb4_split_a(&a32[m * K], K, &ax[m * K]);
              float out[4];
              bnb4_gemv_row(&codes[0], K, bs, &scales[0], t, ax.data(), K, rows, out);
              for (int m = 0; m < rows; ++m) {
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; ++k) {
                  const uint8_t byte = codes[k / 2];
                  const int c = k % 2 ? (byte & 15) : (byte >> 4);
                  ref += (double)vals[c] * scales[k / bs] * a32[m * K + k];
                  mag += std::fabs((double)vals[c] * scales[k / bs] * a32[m * K + k]);
                }
                ++runs;
                if (std::fabs(out[m] - ref) > 1e-5 * mag + 1e-6) {
                  ++bad;
                  printf("f32 K=%ld bs=%ld rows=%d m=%d got %g ref %g\n", (long)K, (long)bs, rows, m, out[m], ref);
                }
              }
            }
          }
  printf("%d of %d checks wrong\n", bad, runs);
  return bad != 0;
}
