// The Highway few-rows kernels of 4-bit weights (src/cpu/gemm/gemv4_hwy.cpp)
// built for Arm (NEON) and checked against a float64 reference of the same
// rounded weights: bf16 A on codes of 1, 2 and 4 bits (4-bit ones in both
// nibble orders) and int8, uint8 and fp8 E4M3 (gemv8_hwy.cpp), with and
// without zero-point codes, and fp32 A, every blocksize class, 1-4 rows. scripts/arm-check
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
using lowbit::core::e4m3_to_f32;
using lowbit::core::f32_to_bf16;
using lowbit::core::WeightKind;
// Code k of a row: `bits` wide, the first in a byte's low bits (4-bit codes with high_first: the high nibble).
int code_at(const uint8_t* row, int64_t k, int bits, Nibbles order) {
  if (bits == 8) return row[k];
  const int per = 8 / bits, sub = static_cast<int>(k % per);
  const int shift = bits == 4 && order == Nibbles::high_first ? 4 * (1 - sub) : sub * bits;
  return (row[k / per] >> shift) & ((1 << bits) - 1);
}

int main() {
  std::mt19937 g(3);
  std::uniform_real_distribution<float> u(-1, 1);
  float vals[16];
  for (float& v : vals) v = u(g);
  const Gemv4Table t4 = gemv4_table(vals, true);
  // 8-bit codes: int8, uint8 and E4M3 (its NaN codes left out of the weights), their values for zero points.
  const WeightKind kinds[3] = {WeightKind::sint, WeightKind::uint, WeightKind::fp8};
  float vtab8[3][256];
  for (int c = 0; c < 256; ++c) {
    vtab8[0][c] = static_cast<float>(static_cast<int8_t>(c));
    vtab8[1][c] = static_cast<float>(c);
    vtab8[2][c] = e4m3_to_f32(static_cast<uint8_t>(c));
  }
  int bad = 0, runs = 0;
  std::printf("target %s, %ld code bytes a step\n", hwy_gemv4::kernels().name,
              static_cast<long>(hwy_gemv4::kernels().bytes));
  for (const int kb : {1, 2, 4, 80, 81, 82}) {  // 8x: 8-bit codes of kinds[x]
    const int bits = kb >= 80 ? 8 : kb, kind = kb >= 80 ? kb - 80 : -1;
    const Gemv4Table t = kind >= 0 ? gemv8_table(kinds[kind], vtab8[kind]) : t4;
    const float* value = kind >= 0 ? vtab8[kind] : vals;
    for (const int64_t K : {64, 192, 512, 1024}) {
      for (const int64_t bs : {32, 64, 128, 512}) {
        for (int rows = 1; rows <= 4; ++rows) {
          for (const bool zeros : {false, true}) {
            for (const Nibbles order : {Nibbles::high_first, Nibbles::low_first}) {
              if (K % bs != 0 || (bits != 4 && order == Nibbles::high_first)) continue;
              if (!gemv4_bf16_fits(K, bs, bits, zeros, true)) continue;
              const int64_t row_bytes = K * bits / 8, blocks = K / bs;
              std::vector<uint8_t> codes(2 * row_bytes), zc(2 * blocks);
              if (kind == 2 && zeros) continue;  // zero points are for integer codes
              for (auto& c : codes) {
                c = static_cast<uint8_t>(g());
                if (kind == 2 && (c & 0x7f) == 0x7f) c ^= 1;  // not NaN
              }
              for (auto& z : zc) z = static_cast<uint8_t>(g() % (1u << bits));
              std::vector<float> scales(2 * blocks);
              for (auto& s : scales) s = u(g);
              std::vector<uint16_t> a(rows * K);
              for (auto& x : a) x = f32_to_bf16(u(g));
              std::vector<float> ap(rows * K);
              for (int m = 0; m < rows; ++m) permute_a_bf16(&a[m * K], nullptr, nullptr, K, bits, order, &ap[m * K]);
              const Gemv4Rows w{{&codes[0], &codes[row_bytes]},
                                {&scales[0], &scales[blocks]},
                                {zeros ? &zc[0] : nullptr, zeros ? &zc[blocks] : nullptr},
                                2};
              float acc[2][4][16];
              gemv4_rows_bf16(w, K, bs, bits, t, ap.data(), K, rows, &acc[0][0][0], true);
              for (int r = 0; r < 2; ++r) {
                for (int m = 0; m < rows; ++m) {
                  double ref = 0, mag = 0;
                  for (int64_t k = 0; k < K; ++k) {
                    const int c = code_at(&codes[r * row_bytes], k, bits, order);
                    const float v = zeros ? value[c] - value[zc[r * blocks + k / bs]] : value[c];
                    const float w8 = bits == 8 ? v : bf16_to_f32(f32_to_bf16(v));  // 8-bit weights are exact
                    const double x = w8 * double{scales[r * blocks + k / bs]} * bf16_to_f32(a[m * K + k]);
                    ref += x;
                    mag += std::fabs(x);
                  }
                  double got = 0;
                  for (int l = 0; l < 16; ++l) got += (&acc[0][0][0])[16 * (r * rows + m) + l];
                  ++runs;
                  if (std::fabs(got - ref) > 1e-5 * mag + 1e-6 && ++bad < 10) {
                    std::printf("bf16 bits=%d kind=%d K=%ld bs=%ld rows=%d zeros=%d r=%d m=%d: %g, want %g\n", bits,
                                kind, static_cast<long>(K), static_cast<long>(bs), rows, zeros, r, m, got, ref);
                  }
                }
              }
              // fp32 A: 4-bit codes of either order (bitsandbytes', the rows layout's), no zero points.
              if (bits != 4 || zeros || !bnb4_gemv_fits(K, bs)) continue;
              std::vector<float> a32(rows * K), ax(rows * K);
              for (auto& x : a32) x = u(g);
              for (int m = 0; m < rows; ++m) bnb4_split_a(&a32[m * K], K, order, &ax[m * K]);
              float out[4];
              bnb4_gemv_row(&codes[0], K, bs, &scales[0], t4, ax.data(), K, rows, out);
              for (int m = 0; m < rows; ++m) {
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; ++k) {
                  const double x = double{vals[code_at(&codes[0], k, 4, order)]} * scales[k / bs] * a32[m * K + k];
                  ref += x;
                  mag += std::fabs(x);
                }
                ++runs;
                if (std::fabs(out[m] - ref) > 1e-5 * mag + 1e-6 && ++bad < 10) {
                  std::printf("f32 K=%ld bs=%ld rows=%d m=%d: %g, want %g\n", static_cast<long>(K),
                              static_cast<long>(bs), rows, m, out[m], ref);
                }
              }
            }
          }
        }
      }
    }
  }
  std::printf("%d of %d checks wrong\n", bad, runs);
  return bad != 0;
}
